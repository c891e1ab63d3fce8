// arp_fill: fills a running ipoibd's neighbour cache over the soft fabric,
// for bench/tunnel.sh's memory figures. A benchmark aid, not installed.
//
//   bench_arp_fill --fabric ADDR:PORT --dlid LID --dqpn QPN --target IPV4
//                  [--count 10000] [--first 198.18.1.0] [--guid G]
//                  [--qkey 0x0b1b] [--batch 64] [--pause-ms 2]
//                  [--distinct-gids 0|1]
//
// 1. plugs in a soft port (GUID G) and waits until the SM made it ACTIVE;
// 2. sends COUNT IPoIB ARP requests for TARGET (the daemon's address) to the
//    daemon's QP (DLID, DQPN), each from its own sender address FIRST+i and
//    this port's QP as sender link address: the daemon learns every
//    requester (Linux arp_process; ipoib/engine_rx.cpp on_arp) and answers;
// 3. counts the answers, and sends the requests still unanswered again (up
//    to 3 passes: the daemon holds only a few replies while it looks up the
//    path to this port, so the first batch loses some answers).
// Prints "sent S requests, N answered"; exit 0 when every request was
// answered. The neighbour cache is checked by the caller (ipoibctl stats).
//
// --distinct-gids 1: each sender claims a GID of its own (this port's
// subnet prefix, GUIDs 0x0002c90300f00000 + i) instead of this port's, so
// that the daemon holds as many link addresses and looks up as many paths
// as there are neighbours, like on a subnet of that many hosts. No such
// port exists: the SA answers the path queries with an error and no reply
// comes back, so one pass is made and exit 0 means "all sent".
#include <sys/epoll.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "common/socket_address.h"
#include "ipoib/arp.h"
#include "ipoib/frame.h"
#include "ipoib/hw_address.h"
#include "common/ip_address.h"
#include "transport/soft/soft_port.h"

using namespace ipoibd;
using namespace ipoibd::transport;
using Clock = std::chrono::steady_clock;

namespace {

std::uint64_t number(const std::string& s) { return std::stoull(s, nullptr, 0); }

std::uint32_t v4_value(const ipoibd::Ipv4Address& a) {
    return std::uint32_t{a[0]} << 24 | std::uint32_t{a[1]} << 16 | std::uint32_t{a[2]} << 8 | a[3];
}

ipoibd::Ipv4Address v4_of(std::uint32_t v) {
    return {static_cast<std::uint8_t>(v >> 24), static_cast<std::uint8_t>(v >> 16), static_cast<std::uint8_t>(v >> 8),
            static_cast<std::uint8_t>(v)};
}

struct Filler {
    SoftPort& port;
    UdQp& qp;
    int epoll_fd;
    std::vector<std::uint8_t> buffers;
    std::size_t buffer_size = kGrhSlotSize + 4096;
    std::size_t depth = 256;
    std::uint32_t first = 0;
    std::vector<bool> answered;
    std::size_t answers = 0;

    void post_receive(std::size_t i) {
        ReceiveBuffer b{.wr_id = i, .buffer = mutable_bytes(buffers.data() + i * buffer_size, buffer_size)};
        (void)qp.post_receive({&b, 1});
    }

    // Moves completions: reposts receive buffers, notes ARP replies.
    void drain() {
        port.process();
        Completion c[64];
        for (std::size_t n; (n = qp.poll(c)) > 0;) {
            for (std::size_t i = 0; i < n; ++i) {
                if (c[i].kind != CompletionKind::receive) continue;
                if (c[i].status == CompletionStatus::success && c[i].byte_len > kGrhSlotSize) {
                    const bytes payload(buffers.data() + c[i].wr_id * buffer_size + kGrhSlotSize,
                                        c[i].byte_len - kGrhSlotSize);
                    auto frame = ipoib::decapsulate(payload);
                    if (frame && frame->type == ipoib::EtherType::arp) {
                        auto arp = ipoib::parse_arp(frame->payload);
                        if (arp && arp->op == ipoib::ArpOp::reply) {
                            const std::uint32_t k = v4_value(arp->target_ip) - first;
                            if (k < answered.size() && !answered[k]) {
                                answered[k] = true;
                                ++answers;
                            }
                        }
                    }
                }
                post_receive(c[i].wr_id);
            }
        }
    }

    void pump(std::chrono::milliseconds how_long) {
        const auto end = Clock::now() + how_long;
        do {
            epoll_event ev;
            ::epoll_wait(epoll_fd, &ev, 1, 1);
            drain();
        } while (Clock::now() < end);
    }
};

}  // namespace

int main(int argc, char** argv) {
    std::string fabric, target_text, first_text = "198.18.1.0";
    std::uint64_t guid = 0x0002C903000000F1ULL, dlid = 0, dqpn = 0, qkey = 0x0B1B, count = 10'000, batch = 64,
                  pause_ms = 2, distinct_gids = 0;
    for (int i = 1; i + 1 < argc; i += 2) {
        const std::string k = argv[i], v = argv[i + 1];
        if (k == "--fabric") fabric = v;
        else if (k == "--guid") guid = number(v);
        else if (k == "--dlid") dlid = number(v);
        else if (k == "--dqpn") dqpn = number(v);
        else if (k == "--qkey") qkey = number(v);
        else if (k == "--target") target_text = v;
        else if (k == "--first") first_text = v;
        else if (k == "--count") count = number(v);
        else if (k == "--batch") batch = number(v);
        else if (k == "--pause-ms") pause_ms = number(v);
        else if (k == "--distinct-gids") distinct_gids = number(v);
    }
    const auto addr = parse_socket_address(fabric);
    const auto target = ipoibd::parse_ipv4(target_text);
    const auto first = ipoibd::parse_ipv4(first_text);
    if (!addr || !target || !first || dlid == 0 || dqpn == 0 || count == 0 || batch == 0) {
        std::fprintf(stderr,
                     "usage: bench_arp_fill --fabric ADDR:PORT --dlid LID --dqpn QPN --target IPV4 [--count N] "
                     "[--first IPV4] [--guid G] [--qkey Q] [--batch N] [--pause-ms MS] [--distinct-gids 0|1]\n");
        return 2;
    }
    SoftPortConfig config;
    config.fabric = *addr;
    config.port_guid = guid;
    config.node_description = "bench_arp_fill";
    auto opened = SoftPort::open(config);
    if (!opened) {
        std::fprintf(stderr, "bench_arp_fill: %s\n", opened.error().message().c_str());
        return 1;
    }
    SoftPort& port = **opened;
    const int ep = ::epoll_create1(EPOLL_CLOEXEC);
    epoll_event ev{};
    ev.events = EPOLLIN;
    ::epoll_ctl(ep, EPOLL_CTL_ADD, port.fd(), &ev);
    for (int i = 0; i < 1500 && port.attributes().state != PortState::active; ++i) {
        ::epoll_wait(ep, &ev, 1, 10);
        port.process();
    }
    if (port.attributes().state != PortState::active) {
        std::fprintf(stderr, "bench_arp_fill: port not ACTIVE after 15 s\n");
        return 1;
    }
    auto qp = port.create_ud_qp({.qkey = static_cast<std::uint32_t>(qkey), .send_depth = 256, .receive_depth = 256});
    if (!qp) {
        std::fprintf(stderr, "bench_arp_fill: %s\n", qp.error().message().c_str());
        return 1;
    }
    Filler f{.port = port, .qp = **qp, .epoll_fd = ep};
    f.buffers.resize(f.depth * f.buffer_size);
    for (std::size_t i = 0; i < f.depth; ++i) f.post_receive(i);
    f.first = v4_value(*first);
    f.answered.assign(count, false);

    const ipoib::HwAddress our_hw{.flags = 0, .qpn = (*qp)->qpn(), .gid = port.attributes().gid()};
    std::vector<std::vector<std::uint8_t>> frames(batch, std::vector<std::uint8_t>(4 + ipoib::ArpPacket::size));
    std::vector<SendRequest> requests(batch);
    std::size_t sent = 0;
    const int passes = distinct_gids ? 1 : 3;
    for (int pass = 0; pass < passes && f.answers < count; ++pass) {
        std::size_t k = 0;
        while (k < count) {
            std::size_t n = 0;
            for (; k < count && n < batch; ++k) {
                if (f.answered[k]) continue;
                ipoib::HwAddress sender = our_hw;
                if (distinct_gids) store_be64(sender.gid.data() + 8, 0x0002C90300F00000ULL + k);
                const auto arp =
                    ipoib::make_arp_request(sender, v4_of(f.first + static_cast<std::uint32_t>(k)), *target);
                (void)ipoib::write_encap_header(ipoib::EtherType::arp, frames[n]);
                (void)ipoib::encode_arp(arp, mutable_bytes(frames[n]).subspan(4));
                requests[n] = SendRequest{.wr_id = k,
                                          .ah = {.dlid = static_cast<std::uint16_t>(dlid)},
                                          .remote_qpn = static_cast<std::uint32_t>(dqpn),
                                          .remote_qkey = static_cast<std::uint32_t>(qkey),
                                          .payload = frames[n]};
                ++n;
            }
            std::size_t posted = 0;
            for (int tries = 0; posted < n && tries < 1000; ++tries) {
                auto r = (*qp)->post_send(std::span<const SendRequest>(requests).subspan(posted, n - posted));
                if (!r) {
                    std::fprintf(stderr, "bench_arp_fill: %s\n", r.error().message().c_str());
                    return 1;
                }
                posted += *r;
                f.pump(std::chrono::milliseconds(posted < n ? 1 : 0));
            }
            sent += posted;
            // Paced: the daemon's receive queue and socket buffer are finite.
            f.pump(std::chrono::milliseconds(pause_ms));
        }
        f.pump(std::chrono::milliseconds(500));
        std::fprintf(stderr, "pass %d: %zu of %llu answered\n", pass + 1, f.answers,
                     static_cast<unsigned long long>(count));
    }
    std::printf("sent %zu requests, %zu answered\n", sent, f.answers);
    if (distinct_gids) return sent == count ? 0 : 1;
    return f.answers == count ? 0 : 1;
}
