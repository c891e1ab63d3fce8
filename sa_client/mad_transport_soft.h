// The MAD transport over a transport::Port's GSI QP (QP1): the soft fabric
// (SoftPort::create_gsi_qp), or the in-memory fabric in tests.
//
// 1. send(): one UD send to the port's SM LID, QP1, Q_Key 0x80010000, on
//    the GSI QP (P_Key index 0), SL = the SM's SL
// 2. receive buffers are 40-byte GRH slot + 256 bytes, kept posted: each
//    completion is copied out and its buffer posted again at once
// 3. receive(): Port::process() (unless the owner does), then the
//    completions of the GSI QP: send
//    completions counted (errors in send_errors), receives queued and handed
//    over in order
#pragma once

#include <array>
#include <deque>
#include <memory>
#include <vector>

#include "sa_client/mad_transport.h"
#include "transport/port.h"

namespace ipoibd::sa {

struct SoftMadTransportConfig {
    std::uint32_t receive_buffers = 32;  // posted at once on QP1
    std::size_t max_pending = 256;       // received, not yet handed over; beyond: dropped
    // receive() runs Port::process() first; false when the owner processes
    // the port itself (ipoibd's loop), which saves a pass on every wake-up.
    // Then wait() is no use (the port's fd stays readable until the owner
    // processes it): the owner waits on the port's fd itself.
    bool process_port = true;
};

class SoftMadTransport final : public MadTransport {
public:
    // `gsi` is the port's QP1 (create_gsi_qp of SoftPort or MemoryPort);
    // `port` must outlive the transport.
    static expected<std::unique_ptr<SoftMadTransport>, MadTransportError> open(
        transport::Port& port, std::unique_ptr<transport::UdQp> gsi, SoftMadTransportConfig config = {});

    MadPortInfo port_info() const override;
    void refresh_port() override {}  // port_info() reads the port live
    expected<void, MadTransportError> send(const SaMad& mad) override;
    std::size_t receive(const MadCallback& on_mad, std::size_t max) override;
    std::size_t receive_from(const SourcedMadCallback& on_mad, std::size_t max = 64) override;
    expected<void, MadTransportError> send_to(bytes mad, const MadAddress& to) override;
    bool can_address_peers() const override { return true; }
    MadWaitSource wait_source() const override { return {port_.fd(), true}; }
    bool wait(std::chrono::milliseconds timeout) override;
    const MadTransportCounters& counters() const override { return counters_; }

private:
    using Mad = std::array<std::uint8_t, kSaMadSize>;
    struct Received {
        Mad mad;
        MadAddress from;
    };
    SoftMadTransport(transport::Port& port, std::unique_ptr<transport::UdQp> gsi, SoftMadTransportConfig config);
    expected<void, MadTransportError> post(bytes mad, const transport::AddressHandle& ah);
    void drain_completions();
    bool post_receive(std::uint64_t index);

    transport::Port& port_;
    std::unique_ptr<transport::UdQp> gsi_;
    SoftMadTransportConfig config_;
    std::vector<std::vector<std::uint8_t>> buffers_;
    std::deque<Received> pending_;
    std::uint64_t next_wr_id_ = 0;
    MadTransportCounters counters_;
};

}  // namespace ipoibd::sa
