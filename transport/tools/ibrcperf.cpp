// ibrcperf: two RC queue pairs moving messages, in the spirit of rdma-core's
// ibv_rc_pingpong and perftest's ib_send_bw: on the soft fabric or an HCA.
//
//   ibrcperf [port options] server [--listen ADDR:PORT]
//   ibrcperf [port options] client --connect ADDR:PORT [--test T] [--size N|MIN:MAX] [--count N] [--depth D]
//
// 1. open the port, wait until it is ACTIVE, create an RC QP (and a UD QP
//    for --test ud) and register memory
// 2. exchange LID, QPN, first PSN, R_Key and addresses over TCP, as those
//    tools do; both sides connect (INIT, RTR, RTS)
// 3. the client posts --count work requests, at most --depth outstanding:
//      send   SENDs
//      write  RDMA WRITEs with immediate data into the server's memory
//      read   RDMA READs of the server's memory
//      mixed  all three, chosen at random (the scenario's test)
//      ud     UD datagrams to the server's UD QP (the baseline: no
//             acknowledgement, no retransmission; loss shows as loss)
//    every SEND and WRITE carries a sequence number, its length and a
//    CRC-32 of its body; the server checks each arrives once, in order,
//    intact; the client checks every READ's bytes against the pattern the
//    server's memory holds
// 4. the client prints messages/s, Gb/s of payload and the QP's counters
//    (retransmissions, timeouts, RNR NAKs), the server what it checked;
//    exit 0 only when every message arrived intact, exactly once, in order
//    (ud: when none was corrupt; loss is reported, not an error)
//
// A work request that completes in error (retry or RNR retry exceeded, a
// remote error, flushed) ends the run: the client says which and exits 1.
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <boost/program_options.hpp>
#include <chrono>
#include <cinttypes>
#include <cstdio>
#include <cstring>
#include <deque>
#include <iostream>
#include <map>
#include <random>
#include <sstream>
#include <thread>

#include "common/option_table.h"
#include "common/sys_error.h"
#include "transport/gid.h"
#include "transport/port_factory.h"
#include "transport/tools/port_option_rows.h"
#include "transport/soft/guid.h"

namespace po = boost::program_options;
using namespace ipoibd;
using namespace ipoibd::transport;
using Clock = std::chrono::steady_clock;

namespace {

volatile sig_atomic_t g_stop = 0;
void on_signal(int) { g_stop = 1; }

constexpr std::size_t kHeader = 12;  // seq(4) len(4) crc32(4)
constexpr std::size_t kMaxSize = 1u << 20;
constexpr std::size_t kMemoryBudget = 64u << 20;  // the server's write slots
constexpr std::size_t kReadArea = 1u << 20;       // what READs read
constexpr std::uint32_t kUdQkey = 0x11B1CE;
constexpr int kProtocol = 1;

enum class Test : std::uint8_t { send, write, read, mixed, ud };
const char* to_string(Test t) {
    switch (t) {
        case Test::send: return "send";
        case Test::write: return "write";
        case Test::read: return "read";
        case Test::mixed: return "mixed";
        case Test::ud: return "ud";
    }
    return "?";
}

struct Options {
    PortOptions port;
    std::string mode;
    std::optional<SocketAddress> connect_to;
    SocketAddress listen_on;
    Test test = Test::send;
    std::uint64_t count = 1000;
    std::size_t size_min = 4096, size_max = 4096;
    std::size_t depth = 32;
    std::uint32_t mtu = 0;  // 0: the port's active MTU
    rc::RtsAttributes rts{};
    std::uint8_t min_rnr_timer = 12;
    std::uint64_t seed = 1;
    double timeout_s = 120;  // the whole run; 0: none (then connecting waits kConnectWait)
    double stall_s = 0;      // no progress for this long fails the run; 0: no such bound
    double wait_active_s = 10;

    // How long the server waits for its client and the client for its
    // server: the run's bound, or one of its own when the run has none.
    double connect_wait_s() const { return timeout_s > 0 ? timeout_s : 120; }
};

// A deadline of `seconds` from `from`, or none for 0.
std::optional<Clock::time_point> deadline_after(Clock::time_point from, double seconds) {
    if (seconds <= 0) return std::nullopt;
    return from + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// The run's two bounds: the whole run (--run-timeout) and progress
// (--stall-timeout: the last completion, or receive, is at most this old).
// A run on a loaded machine takes longer but still progresses; only the
// stall bound tells a stuck run from a slow one.
struct RunBounds {
    std::optional<Clock::time_point> until;
    double stall_s;
    Clock::time_point last_progress;

    RunBounds(const Options& o, Clock::time_point start)
        : until(deadline_after(start, o.timeout_s)), stall_s(o.stall_s), last_progress(start) {}
    void progressed(Clock::time_point now) { last_progress = now; }
    bool out_of_time(Clock::time_point now) const { return until && now >= *until; }
    bool stalled(Clock::time_point now) const {
        return stall_s > 0 && now - last_progress >= std::chrono::duration<double>(stall_s);
    }
};

// The byte at `offset` of the server's read area.
std::uint8_t pattern(std::size_t offset) {
    return static_cast<std::uint8_t>((offset * 2654435761u) >> 11);
}

void fill_message(std::span<std::uint8_t> m, std::uint32_t seq) {
    for (std::size_t i = kHeader; i < m.size(); ++i) m[i] = static_cast<std::uint8_t>(seq * 31 + i);
    store_be32(m.data(), seq);
    store_be32(m.data() + 4, static_cast<std::uint32_t>(m.size()));
    store_be32(m.data() + 8, static_cast<std::uint32_t>(crc32_z(0, m.data() + kHeader, m.size() - kHeader)));
}

// The message's sequence number when it is intact (its length field
// within `m` and its CRC right); -1 when not.
std::int64_t intact_message(bytes m) {
    if (m.size() < kHeader) return -1;
    const std::uint32_t len = load_be32(m.data() + 4);
    if (len < kHeader || len > m.size()) return -1;
    if (load_be32(m.data() + 8) != static_cast<std::uint32_t>(crc32_z(0, m.data() + kHeader, len - kHeader)))
        return -1;
    return load_be32(m.data());
}

// ---------------------------------------------------------------------------
// The out-of-band exchange: one line each way, "key=value" words.

using Fields = std::map<std::string, std::string>;

std::string format_line(const std::string& tag, const Fields& f) {
    std::string line = tag;
    for (const auto& [k, v] : f) line += " " + k + "=" + v;
    return line + "\n";
}

expected<std::pair<std::string, Fields>, std::string> parse_line(const std::string& line) {
    std::istringstream in(line);
    std::string tag, word;
    if (!(in >> tag)) return unexpected(std::string("an empty line"));
    Fields f;
    while (in >> word) {
        const auto eq = word.find('=');
        if (eq == std::string::npos || eq == 0) return unexpected("'" + word + "' is not key=value");
        f[word.substr(0, eq)] = word.substr(eq + 1);
    }
    return std::pair{tag, f};
}

expected<std::uint64_t, std::string> field(const Fields& f, const char* key, std::uint64_t max) {
    const auto it = f.find(key);
    if (it == f.end()) return unexpected(std::string("the peer sent no ") + key);
    const auto n = cli::number(it->second, max);
    if (!n) return unexpected(std::string("the peer's ") + key + " '" + it->second + "' is not a number up to " +
                              std::to_string(max));
    return *n;
}

class Channel {
public:
    explicit Channel(int fd) : fd_(fd) {}
    ~Channel() {
        if (fd_ >= 0) ::close(fd_);
    }
    Channel(const Channel&) = delete;
    Channel& operator=(const Channel&) = delete;
    int fd() const { return fd_; }
    bool send(const std::string& line) {
        std::size_t off = 0;
        while (off < line.size()) {
            const ssize_t n = ::send(fd_, line.data() + off, line.size() - off, MSG_NOSIGNAL);
            if (n <= 0) return false;
            off += static_cast<std::size_t>(n);
        }
        return true;
    }
    // Reads what is there without blocking; a complete line when one is.
    // eof() after the peer closed.
    std::optional<std::string> try_line() {
        char buf[512];
        for (;;) {
            const ssize_t n = ::recv(fd_, buf, sizeof buf, MSG_DONTWAIT);
            if (n > 0) {
                in_.append(buf, static_cast<std::size_t>(n));
                if (in_.size() > 4096) {
                    eof_ = true;  // nobody sends lines that long
                    break;
                }
                continue;
            }
            if (n == 0) eof_ = true;
            break;
        }
        const auto nl = in_.find('\n');
        if (nl == std::string::npos) return std::nullopt;
        std::string line = in_.substr(0, nl);
        in_.erase(0, nl + 1);
        return line;
    }
    bool eof() const { return eof_; }
    // Waits up to `seconds` for a line.
    std::optional<std::string> line(double seconds) {
        const auto until = Clock::now() + std::chrono::duration<double>(seconds);
        while (!g_stop && Clock::now() < until) {
            if (auto l = try_line()) return l;
            if (eof_) return std::nullopt;
            pollfd p{fd_, POLLIN, 0};
            ::poll(&p, 1, 50);
        }
        return std::nullopt;
    }

private:
    int fd_;
    std::string in_;
    bool eof_ = false;
};

std::unique_ptr<Channel> tcp_connect(const SocketAddress& to, double seconds) {
    const auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (!g_stop && Clock::now() < until) {
        const int fd = ::socket(to.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0) return nullptr;
        if (::connect(fd, to.get(), to.length) == 0) {
            const int one = 1;
            ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
            return std::make_unique<Channel>(fd);
        }
        ::close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the server may not listen yet
    }
    return nullptr;
}

// ---------------------------------------------------------------------------
// The port's loop.

struct Loop {
    Port& port;
    int epoll_fd = -1;
    int channel_fd = -1;

    Loop(Port& p, int channel) : port(p), channel_fd(channel) {
        epoll_fd = ::epoll_create1(EPOLL_CLOEXEC);
        for (int fd : {port.fd(), channel_fd}) {
            if (fd < 0) continue;
            epoll_event ev{};
            ev.events = EPOLLIN;
            ev.data.fd = fd;
            ::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev);
        }
    }
    ~Loop() { ::close(epoll_fd); }
    // Waits for the port, the channel or the port's next timer (at most
    // 50 ms), then lets the port do its I/O. True when the channel has
    // something to read.
    bool pump(bool busy) {
        int timeout = busy ? 0 : 50;
        if (const auto d = port.next_deadline(); d && !busy) {
            const auto left = std::chrono::ceil<std::chrono::milliseconds>(*d - Clock::now()).count();
            timeout = static_cast<int>(std::clamp<long long>(left, 0, 50));
        }
        if (port.needs_periodic_process()) timeout = std::min(timeout, 1);
        epoll_event ev[4];
        const int n = ::epoll_wait(epoll_fd, ev, 4, timeout);
        bool channel = false;
        for (int i = 0; i < n; ++i) channel |= ev[i].data.fd == channel_fd;
        port.process();
        PortEvent events[8];
        for (std::size_t k = port.poll_events(events), i = 0; i < k; ++i) {
            const auto a = port.attributes();
            std::printf("event %s: state %s LID 0x%04x\n", to_string(events[i]), to_string(a.state), a.lid);
        }
        return channel;
    }
};

void print_counters(const char* who, const RcQueuePair& qp, const Port& port) {
    struct Printer final : CounterSink {
        const char* prefix;
        explicit Printer(const char* p) : prefix(p) {}
        void counter(std::string_view name, std::uint64_t value) override {
            if (value != 0)
                std::printf("%s %.*s %" PRIu64 "\n", prefix, static_cast<int>(name.size()), name.data(), value);
        }
    };
    Printer rc_out("rc");
    visit(qp.counters(), rc_out);
    Printer port_out("port");
    port.visit_counters(port_out);
    std::printf("%s: QP state %s\n", who, rc::to_string(qp.state()));
}

std::uint32_t random_psn() {
    std::random_device rd;
    return rd() & 0xFFFFFF;
}

// Each side's QPs and memory.
struct Side {
    std::unique_ptr<RcQueuePair> rc;
    std::unique_ptr<UdQp> ud;
    std::uint32_t psn = random_psn();
};

expected<Side, std::string> make_side(Port& port, bool with_ud) {
    Side s;
    auto rc = port.create_rc_qp(0);
    if (!rc) return unexpected("could not create the RC QP: " + rc.error().message());
    s.rc = std::move(*rc);
    if (with_ud) {
        auto ud = port.create_ud_qp({.qkey = kUdQkey, .send_depth = 512, .receive_depth = 512});
        if (!ud) return unexpected("could not create the UD QP: " + ud.error().message());
        s.ud = std::move(*ud);
    }
    return s;
}

expected<void, std::string> connect_rc(const Options& o, Port& port, RcQueuePair& qp, const Fields& peer,
                                       std::uint32_t my_psn) {
    auto lid = field(peer, "lid", 0xBFFF);
    auto qpn = field(peer, "qpn", 0xFFFFFF);
    auto psn = field(peer, "psn", 0xFFFFFF);
    auto mtu = field(peer, "mtu", 4096);
    if (!lid) return unexpected(lid.error());
    if (!qpn) return unexpected(qpn.error());
    if (!psn) return unexpected(psn.error());
    if (!mtu) return unexpected(mtu.error());
    std::uint32_t pmtu = ib::mtu_bytes(port.attributes().active_mtu);
    if (o.mtu) pmtu = std::min(pmtu, o.mtu);
    pmtu = std::min<std::uint32_t>(pmtu, static_cast<std::uint32_t>(*mtu));
    rc::RtsAttributes rts = o.rts;
    rts.sq_psn = my_psn;
    auto r = qp.connect(static_cast<std::uint16_t>(*lid),
                        {.dest_qpn = static_cast<std::uint32_t>(*qpn), .pmtu = pmtu,
                         .rq_psn = static_cast<std::uint32_t>(*psn), .min_rnr_timer = o.min_rnr_timer},
                        rts);
    if (!r) return unexpected("could not connect the RC QP: " + r.error());
    std::printf("connected: local QPN 0x%06x PSN 0x%06x, remote LID 0x%04x QPN 0x%06x PSN 0x%06x, path MTU %u\n",
                qp.qpn(), my_psn, static_cast<unsigned>(*lid), static_cast<unsigned>(*qpn),
                static_cast<unsigned>(*psn), pmtu);
    return {};
}

std::uint32_t local_mtu(const Options& o, Port& port) {
    const std::uint32_t m = ib::mtu_bytes(port.attributes().active_mtu);
    return o.mtu ? std::min(m, o.mtu) : m;
}

// ---------------------------------------------------------------------------
// Server

int fail(const std::string& what) {
    std::fprintf(stderr, "ibrcperf: %s\n", what.c_str());
    return 1;
}

int run_server(const Options& o, Port& port) {
    const int lfd = ::socket(o.listen_on.family(), SOCK_STREAM | SOCK_CLOEXEC, 0);
    const int one = 1;
    ::setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (lfd < 0 || ::bind(lfd, o.listen_on.get(), o.listen_on.length) != 0 || ::listen(lfd, 1) != 0)
        return fail("cannot listen on " + o.listen_on.to_string() + ": " + std::strerror(errno));
    std::printf("ibrcperf server: LID 0x%04x listening on %s\n", port.attributes().lid, o.listen_on.to_string().c_str());
    // Accept while keeping the port alive (its link and SMA answer).
    int cfd = -1;
    const auto accept_until = Clock::now() + std::chrono::duration<double>(o.connect_wait_s());
    while (!g_stop && cfd < 0 && Clock::now() < accept_until) {
        pollfd p{lfd, POLLIN, 0};
        if (::poll(&p, 1, 20) > 0) cfd = ::accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
        port.process();
        PortEvent events[8];
        port.poll_events(events);
    }
    ::close(lfd);
    if (cfd < 0) return fail("no client connected");
    Channel ch(cfd);
    const auto hello = ch.line(10);
    if (!hello) return fail("the client sent no greeting");
    auto parsed = parse_line(*hello);
    if (!parsed || parsed->first != "IBRCPERF") return fail("the client's greeting is not ibrcperf's: " + *hello);
    const Fields& peer = parsed->second;
    auto proto = field(peer, "protocol", 1000);
    if (!proto || *proto != kProtocol) return fail("the client speaks another protocol version");
    const auto test_name = peer.count("test") ? peer.at("test") : "";
    Test test = Test::send;
    if (test_name == "send") test = Test::send;
    else if (test_name == "write") test = Test::write;
    else if (test_name == "read") test = Test::read;
    else if (test_name == "mixed") test = Test::mixed;
    else if (test_name == "ud") test = Test::ud;
    else return fail("the client asks for test '" + test_name + "'");
    auto max_size = field(peer, "size_max", kMaxSize);
    auto depth = field(peer, "depth", 4096);
    if (!max_size || !depth || *max_size < kHeader) return fail("the client's size_max or depth is wrong");

    // Receive buffers and write slots: a WRITE's slot is its sequence
    // number modulo the slots, and at most receives + depth messages can be
    // unchecked at once (each consumed a receive buffer or is outstanding
    // at the client), so a slot is never written while it is checked.
    const std::size_t receives =
        std::clamp<std::size_t>(kMemoryBudget / *max_size > *depth + 8 ? kMemoryBudget / *max_size - *depth - 8 : 8, 8, 256);
    const std::size_t slots = receives + *depth + 8;
    std::vector<std::uint8_t> memory(slots * *max_size + kReadArea);
    for (std::size_t i = 0; i < kReadArea; ++i) memory[slots * *max_size + i] = pattern(i);
    auto side = make_side(port, test == Test::ud);
    if (!side) return fail(side.error());
    auto region = port.register_memory(memory, rc::access::remote_write | rc::access::remote_read);
    if (!region) return fail("could not register memory: " + region.error().message());
    const auto a = port.attributes();
    Fields mine{{"protocol", std::to_string(kProtocol)}, {"lid", std::to_string(a.lid)},
                {"qpn", std::to_string(side->rc->qpn())}, {"psn", std::to_string(side->psn)},
                {"udqpn", std::to_string(side->ud ? side->ud->qpn() : 0)}, {"rkey", std::to_string(region->rkey)},
                {"va", std::to_string(region->va)}, {"slots", std::to_string(slots)},
                {"slot_size", std::to_string(*max_size)}, {"read_offset", std::to_string(slots * *max_size)},
                {"read_len", std::to_string(kReadArea)}, {"mtu", std::to_string(local_mtu(o, port))}};
    // Receives first: their credits go in the connection's first ACK.
    for (std::uint64_t i = 0; i < receives; ++i)
        if (auto r = side->rc->post_recv({.wr_id = i, .capacity = static_cast<std::uint32_t>(*max_size)}); !r)
            return fail("could not post a receive: " + r.error());
    if (!ch.send(format_line("IBRCPERF", mine))) return fail("the client went away");
    if (auto c = connect_rc(o, port, *side->rc, peer, side->psn); !c) return fail(c.error());

    // UD: buffers with the GRH slot.
    std::vector<std::vector<std::uint8_t>> ud_buffers;
    if (side->ud) {
        ud_buffers.assign(512, std::vector<std::uint8_t>(kGrhSlotSize + ib::kMaxPmtuBytes));
        for (std::uint64_t i = 0; i < ud_buffers.size(); ++i) {
            const ReceiveBuffer b{i, ud_buffers[i]};
            (void)side->ud->post_receive({&b, 1});
        }
    }

    Loop loop(port, ch.fd());
    std::uint64_t received = 0, bytes_in = 0, bad = 0, out_of_order = 0, errors = 0;
    std::uint32_t expected_seq = 0;
    std::optional<Clock::time_point> first, last;
    std::optional<std::uint64_t> end_expected;  // the client's END: how many to wait for
    Clock::time_point end_at{};
    bool done = false, stalled = false;
    std::uint64_t packets_sent = 0;
    RunBounds bounds(o, Clock::now());
    while (!g_stop && !done && !bounds.out_of_time(Clock::now())) {
        if (bounds.stalled(Clock::now())) {
            stalled = true;
            break;
        }
        const bool channel = loop.pump(false);
        // Progress at the server: a line from the client, or a packet this
        // QP sent (the ACKs and READ responses that answer the client's
        // requests; a READ-only run receives no message here).
        if (const auto sent = side->rc->counters().packets_sent; channel || sent != packets_sent) {
            packets_sent = sent;
            bounds.progressed(Clock::now());
        }
        for (rc::Completion& c : side->rc->poll()) {
            if (!c.receive) continue;
            if (c.status != rc::Status::success) {
                if (c.status != rc::Status::flushed)
                    std::printf("server: receive %" PRIu64 " completed with %s\n", c.wr_id, rc::to_string(c.status));
                ++errors;
                continue;
            }
            std::int64_t seq = -1;
            std::size_t len = 0;
            if (c.imm) {  // a WRITE: the message is in its slot
                const std::size_t slot = *c.imm % slots;
                seq = intact_message(bytes(memory).subspan(slot * *max_size, *max_size));
                if (seq != *c.imm) seq = -1;
                if (seq >= 0) len = load_be32(memory.data() + slot * *max_size + 4);
            } else {
                seq = intact_message(c.data);
                if (seq >= 0 && load_be32(c.data.data() + 4) != c.data.size()) seq = -1;
                len = c.data.size();
            }
            const auto now = Clock::now();
            if (!first) first = now;
            last = now;
            bounds.progressed(now);
            if (seq < 0) {
                ++bad;
            } else if (const auto got = static_cast<std::uint32_t>(seq); got != expected_seq) {
                ++out_of_order;
                std::printf("server: message %u arrived where %u was expected\n", got, expected_seq);
                expected_seq = got + 1;
            } else {
                ++expected_seq;
                ++received;
                bytes_in += len;
            }
            if (auto r = side->rc->post_recv({.wr_id = c.wr_id, .capacity = static_cast<std::uint32_t>(*max_size)}); !r)
                ++errors;
        }
        if (side->ud) {
            Completion wc[64];
            for (std::size_t n = side->ud->poll(wc), i = 0; i < n; ++i) {
                if (wc[i].kind != CompletionKind::receive) continue;
                const auto payload = bytes(ud_buffers[wc[i].wr_id]).subspan(kGrhSlotSize, wc[i].byte_len - kGrhSlotSize);
                const auto now = Clock::now();
                if (!first) first = now;
                last = now;
                bounds.progressed(now);
                if (wc[i].status != CompletionStatus::success || intact_message(payload) < 0 ||
                    load_be32(payload.data() + 4) != payload.size()) {
                    ++bad;
                } else {
                    ++received;
                    bytes_in += payload.size();
                }
                const ReceiveBuffer b{wc[i].wr_id, ud_buffers[wc[i].wr_id]};
                (void)side->ud->post_receive({&b, 1});
            }
        }
        if (channel || !end_expected) {
            if (auto l = ch.try_line()) {
                auto p = parse_line(*l);
                if (p && p->first == "END") {
                    auto n = field(p->second, "messages", ~0ULL);
                    end_expected = n ? *n : 0;
                    end_at = Clock::now();
                }
            } else if (ch.eof()) {
                std::printf("server: the client went away\n");
                break;
            }
        }
        if (end_expected) {
            // RC: everything the client completed has arrived. UD: wait a
            // little for stragglers, not for the lost.
            const auto grace = test == Test::ud ? std::chrono::milliseconds(300) : std::chrono::milliseconds(2000);
            if (received + bad + out_of_order >= *end_expected || Clock::now() - end_at > grace) done = true;
        }
    }
    if (stalled)
        std::printf("server: stalled: nothing arrived for %g s (received %" PRIu64 ")\n", o.stall_s, received);
    const double span_us = first && last ? std::chrono::duration<double, std::micro>(*last - *first).count() : 0;
    std::printf("server: test %s received %" PRIu64 " bytes %" PRIu64 " corrupt %" PRIu64 " out_of_order %" PRIu64
                " errors %" PRIu64 "\n",
                to_string(test), received, bytes_in, bad, out_of_order, errors);
    if (done)
        (void)ch.send(format_line("RESULT", {{"received", std::to_string(received)},
                                             {"bytes", std::to_string(bytes_in)},
                                             {"corrupt", std::to_string(bad)},
                                             {"out_of_order", std::to_string(out_of_order)},
                                             {"span_us", std::to_string(static_cast<std::uint64_t>(span_us))}}));
    print_counters("server", *side->rc, port);
    const bool complete = done && (test == Test::ud || !end_expected || received == *end_expected);
    return complete && bad == 0 && out_of_order == 0 ? 0 : 1;
}

// ---------------------------------------------------------------------------
// Client

struct Posted {
    std::uint64_t wr_id;
    rc::WrOpcode op;
    std::size_t size;
    std::size_t read_offset = 0;  // READ: where in the read area
};

int run_client(const Options& o, Port& port) {
    auto side = make_side(port, o.test == Test::ud);
    if (!side) return fail(side.error());
    auto ch = tcp_connect(*o.connect_to, o.connect_wait_s());
    if (!ch) return fail("could not reach the server at " + o.connect_to->to_string());
    const auto a = port.attributes();
    Fields mine{{"protocol", std::to_string(kProtocol)}, {"test", to_string(o.test)}, {"lid", std::to_string(a.lid)},
                {"qpn", std::to_string(side->rc->qpn())}, {"psn", std::to_string(side->psn)},
                {"size_max", std::to_string(o.size_max)}, {"depth", std::to_string(o.depth)},
                {"mtu", std::to_string(local_mtu(o, port))}};
    if (!ch->send(format_line("IBRCPERF", mine))) return fail("the server went away");
    const auto reply = ch->line(10);
    if (!reply) return fail("the server did not answer the greeting");
    auto parsed = parse_line(*reply);
    if (!parsed || parsed->first != "IBRCPERF") return fail("the server's answer is not ibrcperf's: " + *reply);
    const Fields& peer = parsed->second;
    auto rkey = field(peer, "rkey", 0xFFFFFFFF);
    auto va = field(peer, "va", ~0ULL);
    auto slots = field(peer, "slots", 1u << 20);
    auto slot_size = field(peer, "slot_size", kMaxSize);
    auto read_offset = field(peer, "read_offset", ~0ULL);
    auto read_len = field(peer, "read_len", 1u << 30);
    auto udqpn = field(peer, "udqpn", 0xFFFFFF);
    auto lid = field(peer, "lid", 0xBFFF);
    for (const auto* f : {&rkey, &va, &slots, &slot_size, &read_offset, &read_len, &udqpn, &lid})
        if (!*f) return fail(f->error());
    if (*slots == 0 || *slot_size < o.size_max || *read_len < o.size_max)
        return fail("the server's memory does not fit these messages");
    if (auto c = connect_rc(o, port, *side->rc, peer, side->psn); !c) return fail(c.error());
    if (o.test == Test::ud && o.size_max > local_mtu(o, port))
        return fail("--test ud sends datagrams of at most the MTU (" + std::to_string(local_mtu(o, port)) + " bytes)");

    // READs land in a ring of depth buffers: at most depth are outstanding
    // and they complete in order.
    std::vector<std::uint8_t> read_ring(o.depth * o.size_max);
    if (auto r = port.register_memory(read_ring, rc::access::local_write); !r)
        return fail("could not register memory: " + r.error().message());

    std::mt19937_64 rng(o.seed);
    std::uniform_int_distribution<std::size_t> size_of(o.size_min, o.size_max);
    std::uniform_int_distribution<int> op_of(0, 9);
    std::uniform_int_distribution<std::size_t> offset_of(0, *read_len - o.size_max);
    std::deque<Posted> outstanding;
    std::uint64_t posted = 0, completed = 0, bytes_done = 0, read_bad = 0, deliverable = 0;
    std::uint32_t seq = 0;
    std::vector<std::uint8_t> msg;
    std::string failure;
    Loop loop(port, -1);
    const auto start = Clock::now();
    RunBounds bounds(o, start);
    bool out_of_time = false;
    while (!g_stop && failure.empty() && completed < o.count) {
        if (const auto now = Clock::now(); bounds.out_of_time(now)) {
            out_of_time = true;
            break;
        } else if (bounds.stalled(now)) {
            char what[128];
            std::snprintf(what, sizeof what, "stalled: no work request completed for %g s (%" PRIu64 " of %" PRIu64 " done)",
                          o.stall_s, completed, o.count);
            failure = what;
            break;
        }
        while (posted < o.count && outstanding.size() < o.depth) {
            const std::size_t size = size_of(rng);
            rc::WrOpcode op = rc::WrOpcode::send;
            if (o.test == Test::write) op = rc::WrOpcode::rdma_write;
            if (o.test == Test::read) op = rc::WrOpcode::rdma_read;
            if (o.test == Test::mixed) {
                const int r = op_of(rng);
                op = r < 4 ? rc::WrOpcode::send : r < 7 ? rc::WrOpcode::rdma_write : rc::WrOpcode::rdma_read;
            }
            if (o.test == Test::ud) {
                msg.assign(size, 0);
                fill_message(msg, seq);
                const SendRequest req{.wr_id = posted, .ah = {.dlid = static_cast<std::uint16_t>(*lid)},
                                      .remote_qpn = static_cast<std::uint32_t>(*udqpn), .remote_qkey = kUdQkey,
                                      .payload = msg};
                auto r = side->ud->post_send({&req, 1});
                if (!r) {
                    failure = "send failed: " + r.error().message();
                    break;
                }
                if (*r == 0) break;  // send queue full: poll first
                ++seq;
                ++deliverable;
                outstanding.push_back({posted++, op, size});
                continue;
            }
            rc::SendWr wr{.wr_id = posted, .opcode = op};
            Posted p{posted, op, size};
            if (op == rc::WrOpcode::rdma_read) {
                p.read_offset = offset_of(rng);
                wr.remote_va = *va + *read_offset + p.read_offset;
                wr.rkey = static_cast<std::uint32_t>(*rkey);
                wr.read_into = std::span(read_ring).subspan((posted % o.depth) * o.size_max, size);
            } else {
                wr.payload.assign(size, 0);
                fill_message(wr.payload, seq);
                if (op == rc::WrOpcode::rdma_write) {
                    wr.imm = seq;
                    wr.remote_va = *va + (seq % *slots) * *slot_size;
                    wr.rkey = static_cast<std::uint32_t>(*rkey);
                }
                ++seq;
                ++deliverable;
            }
            if (auto r = side->rc->post_send(std::move(wr)); !r) {
                failure = "post failed: " + r.error();
                break;
            }
            outstanding.push_back(p);
            ++posted;
        }
        // UD sends complete locally, nothing wakes the port's fd for them:
        // no waiting.
        loop.pump(o.test == Test::ud);
        if (o.test == Test::ud) {
            Completion wc[64];
            for (std::size_t n = side->ud->poll(wc), i = 0; i < n; ++i) {
                if (wc[i].kind != CompletionKind::send) continue;
                if (outstanding.empty()) continue;
                bytes_done += outstanding.front().size;
                outstanding.pop_front();
                ++completed;
                bounds.progressed(Clock::now());
            }
            continue;
        }
        for (rc::Completion& c : side->rc->poll()) {
            if (c.receive) continue;
            if (outstanding.empty() || c.wr_id != outstanding.front().wr_id) {
                failure = "completion for work request " + std::to_string(c.wr_id) + " out of order";
                break;
            }
            const Posted p = outstanding.front();
            outstanding.pop_front();
            if (c.status != rc::Status::success) {
                failure = "work request " + std::to_string(c.wr_id) + " (" +
                          (p.op == rc::WrOpcode::send ? "SEND" : p.op == rc::WrOpcode::rdma_write ? "RDMA WRITE" : "RDMA READ") +
                          ") completed with " + rc::to_string(c.status);
                break;
            }
            if (p.op == rc::WrOpcode::rdma_read) {
                const std::uint8_t* got = read_ring.data() + (p.wr_id % o.depth) * o.size_max;
                for (std::size_t i = 0; i < p.size; ++i)
                    if (got[i] != pattern(p.read_offset + i)) {
                        ++read_bad;
                        break;
                    }
            }
            bytes_done += p.size;
            ++completed;
            bounds.progressed(Clock::now());
        }
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    if (g_stop) failure = "interrupted";
    if (failure.empty() && completed < o.count && out_of_time)
        failure = "timed out after " + std::to_string(completed) + " of " + std::to_string(o.count) + " work requests";
    if (!failure.empty()) {
        std::printf("client: %s\n", failure.c_str());
        std::fprintf(stderr, "ibrcperf: %s\n", failure.c_str());
        print_counters("client", *side->rc, port);
        return 1;
    }
    // The server's account.
    (void)ch->send(format_line("END", {{"messages", std::to_string(deliverable)}}));
    std::optional<Fields> result;
    const auto rl = ch->line(10);
    if (rl)
        if (auto p = parse_line(*rl); p && p->first == "RESULT") result = p->second;
    auto get = [&](const char* k) -> std::uint64_t {
        if (!result) return 0;
        auto v = field(*result, k, ~0ULL);
        return v ? *v : 0;
    };
    double payload_bytes = static_cast<double>(bytes_done);
    double span = seconds;
    if (o.test == Test::ud && result) {  // what arrived, over the time it took to arrive
        payload_bytes = static_cast<double>(get("bytes"));
        span = std::max(seconds, static_cast<double>(get("span_us")) / 1e6);
    }
    std::printf("client: test %s messages %" PRIu64 " bytes %" PRIu64 " seconds %.3f\n", to_string(o.test), completed,
                bytes_done, seconds);
    std::printf("rate: %.0f messages/s %.3f Gb/s payload\n", static_cast<double>(completed) / seconds,
                payload_bytes * 8 / span / 1e9);
    const auto counters = side->rc->counters();
    std::printf("retransmitted %" PRIu64 " timeouts %" PRIu64 " rnr_naks %" PRIu64 " naks %" PRIu64 " read_bad %" PRIu64
                "\n",
                counters.retransmitted, counters.timeouts, counters.rnr_naks_received, counters.naks_received, read_bad);
    bool ok = read_bad == 0;
    if (!result) {
        std::printf("client: the server did not report\n");
        ok = false;
    } else {
        const std::uint64_t got = get("received");
        std::printf("server: received %" PRIu64 " of %" PRIu64 " corrupt %" PRIu64 " out_of_order %" PRIu64 "\n", got,
                    deliverable, get("corrupt"), get("out_of_order"));
        if (o.test == Test::ud)
            std::printf("ud: lost %" PRIu64 " (%.2f%%)\n", deliverable - std::min(got, deliverable),
                        deliverable ? 100.0 * static_cast<double>(deliverable - std::min(got, deliverable)) /
                                          static_cast<double>(deliverable)
                                    : 0.0);
        ok = ok && get("corrupt") == 0 && get("out_of_order") == 0 && (o.test == Test::ud || got == deliverable);
    }
    print_counters("client", *side->rc, port);
    std::printf("client: %s\n", ok ? "every message arrived intact, once, in order" : "FAILED");
    return ok ? 0 : 1;
}

// ---------------------------------------------------------------------------
// Options

using cli::number;


cli::Applied small(const char* name, const std::string& v, unsigned max, std::uint8_t& out) {
    const auto n = number(v, max);
    if (!n) return unexpected(std::string("--") + name + " is 0.." + std::to_string(max) + ", not '" + v + "'");
    out = static_cast<std::uint8_t>(*n);
    return {};
}

const auto kOptions = cli::rows(
    std::to_array<cli::Option<Options>>({{"help,h", cli::Takes::nothing, "this text"}}),
    port_option_rows<Options>("ibrcperf"),
    std::to_array<cli::Option<Options>>({
    {"listen", cli::Takes::value, "server: TCP address for the exchange",
     [](Options& o, const std::string& v) -> cli::Applied {
         auto a = parse_socket_address(v);
         if (!a) return unexpected("bad --listen '" + v + "': " + a.error());
         o.listen_on = *a;
         return {};
     },
     "0.0.0.0:18515"},
    {"connect", cli::Takes::value, "client: the server's TCP address ADDR:PORT",
     [](Options& o, const std::string& v) -> cli::Applied {
         auto a = parse_socket_address(v);
         if (!a) return unexpected("bad --connect '" + v + "': " + a.error());
         o.connect_to = *a;
         return {};
     }},
    {"test", cli::Takes::value, "client: send | write | read | mixed | ud",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (v == "send") o.test = Test::send;
         else if (v == "write") o.test = Test::write;
         else if (v == "read") o.test = Test::read;
         else if (v == "mixed") o.test = Test::mixed;
         else if (v == "ud") o.test = Test::ud;
         else return unexpected("--test is send, write, read, mixed or ud, not '" + v + "'");
         return {};
     },
     "send"},
    {"count", cli::Takes::value, "client: work requests to post",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = cli::typed<std::uint64_t>("count", v);
         if (!n) return unexpected(n.error());
         if (*n == 0) return unexpected(std::string("--count must be at least 1"));
         o.count = *n;
         return {};
     }},
    {"size", cli::Takes::value, "client: message bytes, N or MIN:MAX (12..1048576)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto colon = v.find(':');
         const auto lo = number(v.substr(0, colon), kMaxSize);
         const auto hi = number(colon == std::string::npos ? v : v.substr(colon + 1), kMaxSize);
         if (!lo || !hi || *lo > *hi || *lo < kHeader)
             return unexpected("bad --size '" + v + "' (12..1048576, N or MIN:MAX)");
         o.size_min = *lo;
         o.size_max = *hi;
         return {};
     }},
    {"depth", cli::Takes::value, "client: work requests outstanding (1..1024)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = number(v, 1024);
         if (!n || *n == 0) return unexpected("--depth is 1..1024, not '" + v + "'");
         o.depth = *n;
         return {};
     }},
    {"mtu", cli::Takes::value, "path MTU in bytes (256..4096; default: the port's)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = number(v, 4096);
         if (!n || (*n != 256 && *n != 512 && *n != 1024 && *n != 2048 && *n != 4096))
             return unexpected("--mtu is 256, 512, 1024, 2048 or 4096, not '" + v + "'");
         o.mtu = static_cast<std::uint32_t>(*n);
         return {};
     }},
    {"timeout", cli::Takes::value, "local ACK timeout code: 4.096 us x 2^N (0: none)",
     [](Options& o, const std::string& v) -> cli::Applied { return small("timeout", v, 31, o.rts.timeout); }},
    {"retry-count", cli::Takes::value, "retransmissions before retry exceeded (0..7)",
     [](Options& o, const std::string& v) -> cli::Applied { return small("retry-count", v, 7, o.rts.retry_count); }},
    {"rnr-retry", cli::Takes::value, "RNR retries (0..7, 7: infinite)",
     [](Options& o, const std::string& v) -> cli::Applied { return small("rnr-retry", v, 7, o.rts.rnr_retry); }},
    {"min-rnr-timer", cli::Takes::value, "the RNR timer code this side's NAKs carry (0..31)",
     [](Options& o, const std::string& v) -> cli::Applied { return small("min-rnr-timer", v, 31, o.min_rnr_timer); }},
    {"seed", cli::Takes::value, "client: seed of the sizes, operations and READ offsets",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = number(v, ~0ULL);
         if (!n) return unexpected("bad --seed '" + v + "'");
         o.seed = *n;
         return {};
     }},
    {"run-timeout", cli::Takes::value, "seconds before giving up on the whole run, or none",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (v == "none") {
             o.timeout_s = 0;
             return {};
         }
         const auto n = cli::typed<double>("run-timeout", v);
         if (!n) return unexpected(n.error());
         if (*n <= 0) return unexpected(std::string("--run-timeout must be positive, or none"));
         o.timeout_s = *n;
         return {};
     }},
    {"stall-timeout", cli::Takes::value, "seconds without a completed message before giving up (0: never)",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = cli::typed<double>("stall-timeout", v);
         if (!n) return unexpected(n.error());
         if (*n < 0) return unexpected(std::string("--stall-timeout must be 0 or more"));
         o.stall_s = *n;
         return {};
     }},
    {"wait-active", cli::Takes::value, "seconds to wait for the port to become ACTIVE",
     [](Options& o, const std::string& v) -> cli::Applied {
         const auto n = cli::typed<double>("wait-active", v);
         if (!n) return unexpected(n.error());
         o.wait_active_s = *n;
         return {};
     }},
    {"mode", cli::Takes::value, "server | client",
     [](Options& o, const std::string& v) -> cli::Applied {
         if (v != "server" && v != "client") return unexpected(std::string("say 'server' or 'client'"));
         o.mode = v;
         return {};
     },
     ""},
    }));

std::optional<Options> parse(int argc, char** argv) {
    auto fail_with = [](const std::string& what) -> std::optional<Options> {
        std::cerr << "ibrcperf: " << what << "\n";
        return std::nullopt;
    };
    po::options_description desc("ibrcperf options");
    cli::describe<Options>(kOptions, desc);
    po::positional_options_description pos;
    pos.add("mode", 1);
    po::variables_map vm;
    if (auto error = cli::parse_arguments(cli::arguments(argc, argv), [&](const std::vector<std::string>& args) {
            po::store(po::command_line_parser(args).options(desc).positional(pos).run(), vm);
            po::notify(vm);
        }))
        return fail_with(*error);
    if (vm.count("help")) {
        std::cout << "usage: ibrcperf [options] server | client --connect ADDR:PORT\n" << desc << "\n";
        std::exit(0);
    }
    Options o;
    if (auto applied = cli::apply<Options>(kOptions, vm, o); !applied) return fail_with(applied.error());
    if (o.mode.empty()) return fail_with("say 'server' or 'client'");
    if (o.mode == "client" && !o.connect_to) return fail_with("client needs --connect ADDR:PORT");
    return o;
}

}  // namespace

int main(int argc, char** argv) {
    auto options = parse(argc, argv);
    if (!options) return 2;
    const Options& o = *options;
    std::setvbuf(stdout, nullptr, _IOLBF, 0);
    ::signal(SIGINT, on_signal);
    ::signal(SIGTERM, on_signal);
    ::signal(SIGPIPE, SIG_IGN);

    auto port = open_port(o.port);
    if (!port) return fail("could not open port: " + port.error().message());
    Port& p = *port->port;
    const auto timeout = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::duration<double>(o.wait_active_s));
    if (!wait_until_active(p, timeout, {}, [] { return g_stop != 0; }))
        return fail("port not ACTIVE after " + std::to_string(static_cast<int>(o.wait_active_s)) + " s (state " +
                    to_string(p.attributes().state) + ")");
    return o.mode == "server" ? run_server(o, p) : run_client(o, p);
}
