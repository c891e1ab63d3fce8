// The engine's UD QP on a transport::Port: the port-facing half of
// EngineIo, shared by the daemon and the in-process tests.
//
//  1. open_qp(): a UD QP with the broadcast group's Q_Key on the P_Key's
//     table index; receive_depth buffers (40-byte GRH slot + the port MTU)
//     posted at once; groups attached to a previous QP are attached again.
//  2. send(): one SendRequest, Q_Key from the QP. When the send queue is
//     full the frame is dropped and counted (tx_queue_full), never waited
//     for; the owner polls completions every loop turn.
//  3. poll(): completions, oldest first: sends are counted (errors by
//     status), receives handed to the callback as ReceivedDatagram and their
//     buffer posted again at once, so the receive queue stays full.
// Threading: the Port's (one thread).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "common/counters.h"
#include "common/byte_io.h"
#include "common/expected.h"
#include "ipoib/engine.h"
#include "transport/port.h"

namespace ipoibd::ipoib {

struct PortLinkCounters {
    std::uint64_t tx_posted = 0;
    std::uint64_t tx_queue_full = 0;     // dropped: send queue full after one poll
    std::uint64_t tx_refused = 0;        // post_send refused the request (too long, port down)
    std::uint64_t tx_errors = 0;         // send completions with an error status
    std::uint64_t rx_completions = 0;
    std::uint64_t rx_errors = 0;         // receive completions with an error status
    std::uint64_t rx_repost_failures = 0;
    std::uint64_t attach_failures = 0;
};
void visit(const PortLinkCounters& c, CounterSink& out);

// The index of `pkey` in a port's P_Key table: the full-member entry if
// there is one (as the kernel driver prefers), else a limited one.
std::optional<std::uint16_t> find_pkey_index(const std::vector<std::uint16_t>& table, std::uint16_t pkey);

class PortLink final : public EngineLink {
public:
    struct Config {
        std::uint32_t send_depth = 256;
        std::uint32_t receive_depth = 256;
    };
    using ReceiveCallback = std::function<void(const ReceivedDatagram&)>;

    PortLink(transport::Port& port, Config config) : port_(port), config_(config) {}
    PortLink(const PortLink&) = delete;
    PortLink& operator=(const PortLink&) = delete;

    // EngineLink
    expected<std::uint32_t, std::string> open_qp(std::uint32_t qkey, std::uint16_t pkey) override;
    void send_datagram(const transport::AddressHandle& ah, std::uint32_t remote_qpn, bytes frame) override {
        send(ah, remote_qpn, frame);
    }
    void attach(const ib::Gid& mgid, std::uint16_t mlid) override;
    void detach(const ib::Gid& mgid, std::uint16_t mlid) override;

    void close_qp();
    bool has_qp() const { return qp_ != nullptr; }
    const transport::UdQp* qp() const { return qp_.get(); }
    std::uint32_t qpn() const { return qp_ ? qp_->qpn() : 0; }
    void send(const transport::AddressHandle& ah, std::uint32_t remote_qpn, bytes frame);

    // Handles up to `max` completions; returns how many.
    std::size_t poll(const ReceiveCallback& on_receive, std::size_t max = 64);

    const PortLinkCounters& counters() const { return counters_; }
    const transport::Error& last_error() const { return last_error_; }

private:
    void post_receives();

    transport::Port& port_;
    Config config_;
    std::unique_ptr<transport::UdQp> qp_;
    mutable_bytes buffer(std::size_t wr_id) { return {buffers_.get() + wr_id * buffer_size_, buffer_size_}; }

    std::unique_ptr<std::uint8_t[]> buffers_;  // receive_depth buffers of buffer_size_, by wr_id
    std::size_t buffer_size_ = 0;
    std::set<std::pair<ib::Gid, std::uint16_t>> attached_;
    std::vector<transport::Completion> completions_;
    transport::SendRequest request_;
    PortLinkCounters counters_;
    transport::Error last_error_;
};

}  // namespace ipoibd::ipoib
