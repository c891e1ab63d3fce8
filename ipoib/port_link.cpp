#include "ipoib/port_link.h"

#include <algorithm>

namespace ipoibd::ipoib {

void visit(const PortLinkCounters& c, CounterSink& out) {
    out.counter("tx_posted", c.tx_posted);
    out.counter("tx_queue_full", c.tx_queue_full);
    out.counter("tx_refused", c.tx_refused);
    out.counter("tx_errors", c.tx_errors);
    out.counter("rx_completions", c.rx_completions);
    out.counter("rx_errors", c.rx_errors);
    out.counter("rx_repost_failures", c.rx_repost_failures);
    out.counter("attach_failures", c.attach_failures);
}

std::optional<std::uint16_t> find_pkey_index(const std::vector<std::uint16_t>& table, std::uint16_t pkey) {
    auto it = std::find(table.begin(), table.end(), static_cast<std::uint16_t>(pkey | 0x8000));
    if (it == table.end())
        it = std::find_if(table.begin(), table.end(),
                          [&](std::uint16_t k) { return (k & 0x7FFF) == (pkey & 0x7FFF) && (k & 0x7FFF) != 0; });
    if (it == table.end()) return std::nullopt;
    return static_cast<std::uint16_t>(it - table.begin());
}

expected<std::uint32_t, std::string> PortLink::open_qp(std::uint32_t qkey, std::uint16_t pkey) {
    const transport::PortAttributes attrs = port_.attributes();
    const auto index = find_pkey_index(attrs.pkey_table, pkey);
    if (!index) return unexpected("P_Key " + std::to_string(pkey) + " is not in the port's P_Key table");
    transport::UdQpConfig cfg;
    cfg.qkey = qkey;
    cfg.pkey_index = *index;
    cfg.send_depth = config_.send_depth;
    cfg.receive_depth = config_.receive_depth;
    auto qp = port_.create_ud_qp(cfg);
    if (!qp) return unexpected("create_ud_qp: " + qp.error().message());
    // The old QP goes first: its flushed completions are never polled, and
    // its buffers are ours to reuse.
    qp_.reset();
    qp_ = std::move(*qp);
    buffer_size_ = transport::kGrhSlotSize + ib::mtu_bytes(attrs.active_mtu);
    // One allocation for every receive buffer, carved by wr_id.
    buffers_ = std::make_unique<std::uint8_t[]>(buffer_size_ * config_.receive_depth);
    completions_.resize(64);
    post_receives();
    for (const auto& [mgid, mlid] : attached_) {
        if (!qp_->attach_multicast(mgid, mlid)) ++counters_.attach_failures;
    }
    return qp_->qpn();
}

void PortLink::close_qp() { qp_.reset(); }

void PortLink::post_receives() {
    std::vector<transport::ReceiveBuffer> bufs;
    bufs.reserve(config_.receive_depth);
    for (std::size_t i = 0; i < config_.receive_depth; ++i) bufs.push_back({.wr_id = i, .buffer = buffer(i)});
    auto posted = qp_->post_receive(bufs);
    if (!posted || *posted < bufs.size()) ++counters_.rx_repost_failures;
}

void PortLink::send(const transport::AddressHandle& ah, std::uint32_t remote_qpn, bytes frame) {
    if (!qp_) {
        ++counters_.tx_refused;
        return;
    }
    request_.wr_id = 0;
    request_.ah = ah;
    request_.remote_qpn = remote_qpn;
    request_.remote_qkey = qp_->qkey();
    request_.payload = frame;
    auto r = qp_->post_send(std::span<const transport::SendRequest>(&request_, 1));
    if (!r) {
        ++counters_.tx_refused;
        last_error_ = r.error();
        return;
    }
    if (*r == 1)
        ++counters_.tx_posted;
    else
        ++counters_.tx_queue_full;  // the owner polls completions each loop turn
}

void PortLink::attach(const ib::Gid& mgid, std::uint16_t mlid) {
    attached_.insert({mgid, mlid});
    if (qp_ && !qp_->attach_multicast(mgid, mlid)) ++counters_.attach_failures;
}

void PortLink::detach(const ib::Gid& mgid, std::uint16_t mlid) {
    attached_.erase({mgid, mlid});
    if (qp_) (void)qp_->detach_multicast(mgid, mlid);
}

std::size_t PortLink::poll(const ReceiveCallback& on_receive, std::size_t max) {
    if (!qp_) return 0;
    std::size_t handled = 0;
    const std::size_t limit = max;
    while (handled < limit) {
        const std::size_t want = std::min(completions_.size(), limit - handled);
        const std::size_t n = qp_->poll(std::span(completions_.data(), want));
        if (n == 0) break;
        for (std::size_t i = 0; i < n; ++i) {
            const transport::Completion& c = completions_[i];
            if (c.kind == transport::CompletionKind::send) {
                if (c.status != transport::CompletionStatus::success) ++counters_.tx_errors;
                continue;
            }
            ++counters_.rx_completions;
            if (c.wr_id >= config_.receive_depth) continue;
            const mutable_bytes buf = buffer(c.wr_id);
            if (c.status == transport::CompletionStatus::success && c.byte_len >= transport::kGrhSlotSize &&
                c.byte_len <= buf.size()) {
                on_receive(ReceivedDatagram{
                    .payload = bytes(buf.data() + transport::kGrhSlotSize, c.byte_len - transport::kGrhSlotSize),
                    .src_qp = c.src_qp,
                    .slid = c.slid});
            } else if (c.status != transport::CompletionStatus::flushed) {
                ++counters_.rx_errors;
            }
            if (!qp_) return handled + i + 1;  // the callback closed the QP
            const transport::ReceiveBuffer rb{.wr_id = c.wr_id, .buffer = buf};
            auto posted = qp_->post_receive(std::span(&rb, 1));
            if (!posted || *posted != 1) ++counters_.rx_repost_failures;
        }
        handled += n;
    }
    return handled;
}

}  // namespace ipoibd::ipoib
