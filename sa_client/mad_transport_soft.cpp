#include "sa_client/mad_transport_soft.h"

#include <poll.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "transport/gid.h"

namespace ipoibd::sa {

using transport::Completion;
using transport::CompletionKind;
using transport::CompletionStatus;
using transport::kGrhSlotSize;

namespace {

// The smallest MAD worth handing over: the SA headers (a real GSI receive
// is always 256 bytes; anything shorter is padded).
constexpr std::size_t kMinMad = kSaHeaderSize;

}  // namespace

expected<std::unique_ptr<SoftMadTransport>, MadTransportError> SoftMadTransport::open(
    transport::Port& port, std::unique_ptr<transport::UdQp> gsi, SoftMadTransportConfig config) {
    if (!gsi || gsi->qpn() != ib::kQp1)
        return unexpected(MadTransportError{MadTransportErrc::open_failed, "the soft MAD transport needs the port's QP1"});
    if (config.receive_buffers == 0) config.receive_buffers = 1;
    std::unique_ptr<SoftMadTransport> t(new SoftMadTransport(port, std::move(gsi), config));
    for (std::uint64_t i = 0; i < t->buffers_.size(); ++i)
        if (!t->post_receive(i))
            return unexpected(MadTransportError{MadTransportErrc::open_failed,
                                                "QP1 took " + std::to_string(i) + " of " + std::to_string(t->buffers_.size()) +
                                                    " receive buffers (its receive queue is shallower)"});
    return t;
}

SoftMadTransport::SoftMadTransport(transport::Port& port, std::unique_ptr<transport::UdQp> gsi, SoftMadTransportConfig config)
    : port_(port),
      gsi_(std::move(gsi)),
      config_(config),
      buffers_(config.receive_buffers, std::vector<std::uint8_t>(kGrhSlotSize + kSaMadSize)) {}

MadPortInfo SoftMadTransport::port_info() const {
    const transport::PortAttributes a = port_.attributes();
    char name[64];
    std::snprintf(name, sizeof name, "soft port 0x%016llx", static_cast<unsigned long long>(a.port_guid));
    return MadPortInfo{.name = name,
                       .lid = a.lid,
                       .sm_lid = a.sm_lid,
                       .sm_sl = a.sm_sl,
                       .gid = a.gid(),
                       .active = a.state == transport::PortState::active};
}

bool SoftMadTransport::post_receive(std::uint64_t index) {
    const transport::ReceiveBuffer b{index, buffers_[index]};
    auto r = gsi_->post_receive({&b, 1});
    return r && *r == 1;
}

expected<void, MadTransportError> SoftMadTransport::send(const SaMad& mad) {
    const transport::PortAttributes a = port_.attributes();
    if (a.state != transport::PortState::active || a.sm_lid == 0) {
        ++counters_.send_errors;
        return unexpected(MadTransportError{MadTransportErrc::no_sm, std::string("port is ") + to_string(a.state) +
                                                                          (a.sm_lid == 0 ? ", no SM LID" : "")});
    }
    Mad wire{};
    mad.write_to(wire.data());
    return post(wire, {.dlid = a.sm_lid, .sl = a.sm_sl});
}

expected<void, MadTransportError> SoftMadTransport::send_to(bytes mad, const MadAddress& to) {
    if (mad.size() != kSaMadSize || !ib::is_unicast_lid(to.lid)) {
        ++counters_.send_errors;
        return unexpected(MadTransportError{MadTransportErrc::send_failed,
                                            mad.size() != kSaMadSize ? "a MAD is 256 bytes"
                                                                     : "LID " + std::to_string(to.lid) + " is not unicast"});
    }
    transport::AddressHandle ah{.dlid = to.lid, .sl = to.sl};
    if (to.gid) ah.grh = transport::GrhAttributes{.dgid = *to.gid, .hop_limit = 0xFF};
    return post(mad, ah);
}

expected<void, MadTransportError> SoftMadTransport::post(bytes mad, const transport::AddressHandle& ah) {
    const transport::SendRequest req{.wr_id = next_wr_id_++,
                                     .ah = ah,
                                     .remote_qpn = ib::kQp1,
                                     .remote_qkey = ib::kGsiQKey,
                                     .payload = mad};
    auto r = gsi_->post_send({&req, 1});
    if (r && *r == 0) {
        // The send queue is full of completed sends nobody polled yet.
        drain_completions();
        r = gsi_->post_send({&req, 1});
    }
    if (!r) {
        ++counters_.send_errors;
        return unexpected(MadTransportError{MadTransportErrc::send_failed, r.error().message()});
    }
    if (*r == 0) {
        ++counters_.send_errors;
        return unexpected(MadTransportError{MadTransportErrc::queue_full, "QP1 send queue"});
    }
    ++counters_.sent;
    return {};
}

void SoftMadTransport::drain_completions() {
    Completion wc[32];
    for (std::size_t n = gsi_->poll(wc); n > 0; n = gsi_->poll(wc)) {
        for (std::size_t i = 0; i < n; ++i) {
            const Completion& c = wc[i];
            if (c.kind == CompletionKind::send) {
                if (c.status != CompletionStatus::success) ++counters_.send_errors;
                continue;
            }
            if (c.wr_id >= buffers_.size()) continue;  // not ours
            if (c.status != CompletionStatus::success) {
                ++counters_.receive_errors;
            } else if (c.byte_len < kGrhSlotSize + kMinMad) {
                ++counters_.dropped;
            } else if (pending_.size() >= config_.max_pending) {
                ++counters_.dropped;
            } else {
                const std::size_t len = std::min<std::size_t>(c.byte_len - kGrhSlotSize, kSaMadSize);
                if (len < kSaMadSize) ++counters_.short_received;
                Received& r = pending_.emplace_back();
                r.mad.fill(0);
                std::memcpy(r.mad.data(), buffers_[c.wr_id].data() + kGrhSlotSize, len);
                r.from = MadAddress{.lid = c.slid, .sl = c.sl};
                if (c.grh_present) {  // the sender's GID: the GRH's SGID
                    ib::Gid g{};
                    std::memcpy(g.data(), buffers_[c.wr_id].data() + 8, g.size());
                    r.from.gid = g;
                }
            }
            if (c.status != CompletionStatus::flushed && !post_receive(c.wr_id)) ++counters_.receive_errors;
        }
    }
}

std::size_t SoftMadTransport::receive(const MadCallback& on_mad, std::size_t max) {
    return receive_from([&](bytes mad, const MadAddress&) { on_mad(mad); }, max);
}

std::size_t SoftMadTransport::receive_from(const SourcedMadCallback& on_mad, std::size_t max) {
    if (config_.process_port) port_.process();
    drain_completions();
    std::size_t n = 0;
    while (n < max && !pending_.empty()) {
        const Received r = pending_.front();
        pending_.pop_front();
        ++counters_.received;
        ++n;
        on_mad(r.mad, r.from);  // may send(), which may drain into pending_
    }
    return n;
}

bool SoftMadTransport::wait(std::chrono::milliseconds timeout) {
    if (!pending_.empty()) return true;
    const int fd = port_.fd();
    if (fd < 0) {
        // The in-memory fabric delivers at once: nothing to wait for.
        ::usleep(static_cast<useconds_t>(std::min<std::chrono::milliseconds::rep>(timeout.count(), 1)) * 1000);
        return true;
    }
    pollfd p{.fd = fd, .events = POLLIN, .revents = 0};
    return ::poll(&p, 1, static_cast<int>(std::clamp<std::chrono::milliseconds::rep>(timeout.count(), 0, 60000))) > 0;
}

}  // namespace ipoibd::sa
