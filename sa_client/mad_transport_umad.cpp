// The MAD transport over libibumad: /dev/infiniband/umadN on real HCAs, or
// ibsim's simulated fabric under LD_PRELOAD=libumad2sim.so.
//
// 1. open: umad_init, umad_get_port (LID, SM LID and SL, GID), umad_open_port,
//    umad_register for SubnAdm class version 2 with RMPP version 0: the
//    SaClient does RMPP itself (reassembly and ACKs), which the kernel MAD
//    layer allows for an agent that did not ask it to ("user RMPP"); with
//    the Report method in its mask for a subscriber (take_reports)
// 2. send: umad_set_addr(SM LID, QP1, SM SL, Q_Key 0x80010000), P_Key
//    index 0; requests with a kernel timeout (response_window), since the
//    kernel delivers only responses that match an open send
// 3. receive: umad_recv without blocking until the queue is empty; a MAD
//    with a umad status (the kernel's send timeout) is counted, not handed on;
//    receive_from() adds the sender's address (umad_get_mad_addr: LID, SL,
//    GRH)
// 4. other classes (register_class): one more agent each, with a method
//    mask for the requests peers send (the CM's Send); the kernel refuses
//    a class and method another agent holds, as its ib_cm holds the CM's:
//    then the connection manager is not ours to run (the node falls back to
//    librdmacm). send_to() sends a MAD through its class's agent to QP1 of
//    any LID (GRH when a GID is given)
//
// libumad2sim (tests/opensm/README.md) is detected by its fake fd, which
// epoll refuses; then:
//  - wait_source() says the fd is not epoll-capable: poll() it alone;
//  - only bytes 0..223 of a 256-byte MAD are valid: the rest is zeroed and
//    valid_bytes() says 224; shorter MADs (len 112) are padded with zeros;
//  - RMPP is not carried: a table comes whole in one MAD whose RMPP header
//    OpenSM left Active with RMPPVersion 0; the Active flag is cleared so
//    the SaClient takes it as the single response it is;
//  - nothing is unregistered or closed on destruction: a response arriving
//    for an unregistered agent crashes libumad2sim's receiver thread.
#include <infiniband/umad.h>
#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <vector>

#include "common/unique_fd.h"
#include "sa_client/mad_transport.h"

namespace ipoibd::sa {
namespace {

constexpr int kGsiQp = 1;
constexpr int kGsiQKey = static_cast<int>(ib::kGsiQKey);  // umad_set_addr takes an int
constexpr std::size_t kSimulatorValidBytes = 224;
constexpr std::size_t kMinMad = kSaHeaderSize;

std::string umad_error(const char* what, int negative_errno) {
    return std::string(what) + ": " + std::strerror(negative_errno < 0 ? -negative_errno : errno);
}

// A request the SM answers (so the kernel must keep the send open for the
// response): not a response, not an RMPP ACK/STOP/ABORT.
bool expects_response(const SaMad& mad) {
    if (mad.header.is_response()) return false;
    return !(mad.rmpp.active() && mad.rmpp.rmpp_type != rmpp_type::data);
}

// True if the kernel knows `fd`: real umad fds work with epoll,
// libumad2sim's fake ones (>= 1024) do not.
bool epoll_accepts(int fd) {
    UniqueFd ep(::epoll_create1(EPOLL_CLOEXEC));
    if (!ep) return false;
    epoll_event ev{};
    ev.events = EPOLLIN;
    return ::epoll_ctl(ep.get(), EPOLL_CTL_ADD, fd, &ev) == 0;
}

class UmadTransport final : public MadTransport {
public:
    UmadTransport(const UmadTransportConfig& config, umad_port_t port, int portid, int agent)
        : config_(config), port_(port), portid_(portid), agent_(agent), agents_{{ib::mgmt_class::subn_adm, agent}},
          simulated_(!epoll_accepts(umad_get_fd(portid))),
          send_buf_(umad_size() + kSaMadSize), recv_buf_(umad_size() + kSaMadSize) {}

    ~UmadTransport() override {
        if (!simulated_) umad_close_port(portid_);  // the kernel unregisters the agent
        umad_release_port(&port_);
    }

    MadPortInfo port_info() const override {
        MadPortInfo info;
        info.name = std::string(port_.ca_name) + " port " + std::to_string(port_.portnum);
        info.lid = static_cast<std::uint16_t>(port_.base_lid);
        info.sm_lid = static_cast<std::uint16_t>(port_.sm_lid);
        info.sm_sl = static_cast<std::uint8_t>(port_.sm_sl);
        std::memcpy(info.gid.data(), &port_.gid_prefix, 8);  // both in network order
        std::memcpy(info.gid.data() + 8, &port_.port_guid, 8);
        info.active = port_.state == 4;
        return info;
    }

    void refresh_port() override {
        umad_port_t fresh;
        if (umad_get_port(port_.ca_name, port_.portnum, &fresh) < 0) return;  // keep what we had
        umad_release_port(&port_);
        port_ = fresh;
    }

    expected<void, MadTransportError> send(const SaMad& mad) override {
        if (port_.sm_lid == 0) {
            ++counters_.send_errors;
            return unexpected(MadTransportError{MadTransportErrc::no_sm, port_info().name + " has no SM LID"});
        }
        std::fill(send_buf_.begin(), send_buf_.end(), 0);
        mad.write_to(static_cast<std::uint8_t*>(umad_get_mad(send_buf_.data())));
        umad_set_addr(send_buf_.data(), static_cast<int>(port_.sm_lid), kGsiQp, static_cast<int>(port_.sm_sl), kGsiQKey);
        umad_set_pkey(send_buf_.data(), 0);
        const int timeout_ms = expects_response(mad) ? static_cast<int>(config_.response_window.count()) : 0;
        const int r = umad_send(portid_, agent_, send_buf_.data(), static_cast<int>(kSaMadSize), timeout_ms, 0);
        if (r < 0) {
            ++counters_.send_errors;
            return unexpected(MadTransportError{MadTransportErrc::send_failed, umad_error("umad_send", r)});
        }
        ++counters_.sent;
        return {};
    }

    std::size_t receive(const MadCallback& on_mad, std::size_t max) override {
        return receive_from([&](bytes mad, const MadAddress&) { on_mad(mad); }, max);
    }

    std::size_t receive_from(const SourcedMadCallback& on_mad, std::size_t max) override {
        std::size_t n = 0;
        // Every MAD read counts against the bound, handed over or not.
        for (std::size_t reads = 0; n < max && reads < 2 * max; ++reads) {
            const std::size_t room = recv_buf_.size() - umad_size();
            int len = static_cast<int>(room);
            const int r = umad_recv(portid_, recv_buf_.data(), &len, 0);
            if (r == -ENOSPC && len > 0 && static_cast<std::size_t>(len) > room) {
                // Longer than a MAD (a kernel-reassembled transfer, which this
                // agent did not ask for): read it off the queue and drop it.
                recv_buf_.resize(umad_size() + static_cast<std::size_t>(len));
                continue;
            }
            if (r < 0) break;  // nothing queued (libumad2sim: -EWOULDBLOCK as the value)
            if (std::none_of(agents_.begin(), agents_.end(), [&](const auto& a) { return a.second == r; })) {
                ++counters_.dropped;
                continue;
            }
            if (umad_status(recv_buf_.data()) != 0) {
                // A send the kernel gave up on (ETIMEDOUT): the SaClient
                // keeps its own timeouts and retries.
                ++counters_.receive_errors;
                continue;
            }
            const auto length = static_cast<std::size_t>(std::max(len, 0));
            if (length < kMinMad || length > kSaMadSize) {
                ++counters_.dropped;
                continue;
            }
            if (length < kSaMadSize) ++counters_.short_received;
            std::array<std::uint8_t, kSaMadSize> mad{};
            std::memcpy(mad.data(), umad_get_mad(recv_buf_.data()), std::min(length, valid_bytes()));
            if (simulated_) mad[sa_offset::rmpp + 2] &= static_cast<std::uint8_t>(~rmpp_flag::active);
            const ib_mad_addr_t* addr = umad_get_mad_addr(recv_buf_.data());
            MadAddress from;
            if (addr) {
                from.lid = be16toh(addr->lid);
                from.sl = addr->sl;
                if (addr->grh_present) {
                    ib::Gid gid{};
                    std::memcpy(gid.data(), addr->gid, gid.size());
                    from.gid = gid;
                }
            }
            ++counters_.received;
            ++n;
            on_mad(mad, from);
        }
        return n;
    }

    MadWaitSource wait_source() const override { return {umad_get_fd(portid_), !simulated_}; }

    bool wait(std::chrono::milliseconds timeout) override {
        pollfd p{.fd = umad_get_fd(portid_), .events = POLLIN, .revents = 0};
        const auto ms = std::clamp<std::chrono::milliseconds::rep>(timeout.count(), 0, 60000);
        return ::poll(&p, 1, static_cast<int>(ms)) > 0 && (p.revents & POLLIN) != 0;
    }

    std::size_t valid_bytes() const override { return simulated_ ? kSimulatorValidBytes : kSaMadSize; }
    const MadTransportCounters& counters() const override { return counters_; }

    expected<void, MadTransportError> register_class(std::uint8_t mgmt_class, std::uint8_t class_version,
                                                     std::span<const std::uint8_t> unsolicited_methods) override {
        // The kernel's method mask: 128 bits, one per method.
        long mask[16 / sizeof(long)] = {};
        for (std::uint8_t m : unsolicited_methods)
            mask[m / (8 * sizeof(long))] |= 1L << (m % (8 * sizeof(long)));
        const int agent =
            umad_register(portid_, mgmt_class, class_version, 0, unsolicited_methods.empty() ? nullptr : mask);
        if (agent < 0)
            return unexpected(MadTransportError{
                MadTransportErrc::open_failed,
                umad_error(("umad_register (class " + std::to_string(mgmt_class) + " version " +
                            std::to_string(class_version) + ")").c_str(),
                           agent)});
        agents_.emplace_back(mgmt_class, agent);
        return {};
    }

    // Peers' QP1s: not under libumad2sim (its simulator routes the SM's
    // MADs only).
    bool can_address_peers() const override { return !simulated_; }

    expected<void, MadTransportError> send_to(bytes mad, const MadAddress& to) override {
        if (mad.size() != kSaMadSize || simulated_)
            return unexpected(MadTransportError{MadTransportErrc::send_failed, "not a MAD this path sends to peers"});
        const auto a = std::find_if(agents_.begin(), agents_.end(), [&](const auto& e) { return e.first == mad[1]; });
        if (a == agents_.end()) {
            ++counters_.send_errors;
            return unexpected(MadTransportError{MadTransportErrc::send_failed,
                                                "no agent for class " + std::to_string(mad[1])});
        }
        std::fill(send_buf_.begin(), send_buf_.end(), 0);
        std::memcpy(umad_get_mad(send_buf_.data()), mad.data(), mad.size());
        umad_set_addr(send_buf_.data(), to.lid, kGsiQp, to.sl, kGsiQKey);
        umad_set_pkey(send_buf_.data(), 0);
        if (to.gid) {
            ib_mad_addr_t grh{};
            grh.grh_present = 1;
            std::memcpy(grh.gid, to.gid->data(), to.gid->size());
            grh.hop_limit = 255;
            umad_set_grh(send_buf_.data(), &grh);
        }
        const int r = umad_send(portid_, a->second, send_buf_.data(), static_cast<int>(kSaMadSize), 0, 0);
        if (r < 0) {
            ++counters_.send_errors;
            return unexpected(MadTransportError{MadTransportErrc::send_failed, umad_error("umad_send", r)});
        }
        ++counters_.sent;
        return {};
    }

private:
    UmadTransportConfig config_;
    umad_port_t port_;
    int portid_;
    int agent_;                // SubnAdm's, which send() uses
    std::vector<std::pair<std::uint8_t, int>> agents_;  // (class, agent) of every class registered
    bool simulated_;
    std::vector<std::uint8_t> send_buf_;
    std::vector<std::uint8_t> recv_buf_;
    MadTransportCounters counters_;
};

}  // namespace

bool umad_transport_built() { return true; }

expected<std::unique_ptr<MadTransport>, MadTransportError> open_umad_transport(const UmadTransportConfig& config) {
    auto fail = [](std::string detail) { return unexpected(MadTransportError{MadTransportErrc::open_failed, std::move(detail)}); };
    if (umad_init() < 0) return fail("umad_init failed");
    umad_port_t port;
    const char* ca = config.ca.empty() ? nullptr : config.ca.c_str();
    int r = umad_get_port(ca, static_cast<int>(config.port_num), &port);
    if (r < 0) {
        return fail(umad_error(("umad_get_port " + (config.ca.empty() ? std::string("(first CA)") : config.ca) + " port " +
                                std::to_string(config.port_num)).c_str(), r));
    }
    const int portid = umad_open_port(port.ca_name, port.portnum);
    if (portid < 0) {
        umad_release_port(&port);
        return fail(umad_error("umad_open_port", portid));
    }
    // SubnAdm, class version 2, RMPP version 0 (the SaClient does RMPP).
    // Without a method mask only responses to our own requests come in; a
    // subscriber asks for Reports as well.
    long mask[16 / sizeof(long)] = {};
    constexpr unsigned kReport = ib::method::report;
    mask[kReport / (8 * sizeof(long))] |= 1L << (kReport % (8 * sizeof(long)));
    const int agent = umad_register(portid, ib::mgmt_class::subn_adm, ib::class_version::subn_adm, 0,
                                    config.take_reports ? mask : nullptr);
    if (agent < 0) {
        umad_close_port(portid);
        umad_release_port(&port);
        return fail(umad_error(config.take_reports
                                   ? "umad_register (SubnAdm class version 2, with its Report method: another "
                                     "agent on this port may hold it)"
                                   : "umad_register (SubnAdm class version 2)",
                               agent));
    }
    return std::unique_ptr<MadTransport>(new UmadTransport(config, port, portid, agent));
}

}  // namespace ipoibd::sa
