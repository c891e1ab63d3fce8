#include "transport/verbs/verbs_send_queue.h"

#include "transport/wire/opcodes.h"
#include "transport/wire/packet.h"

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace ipoibd::transport::verbs {

namespace {

constexpr std::size_t kReapBatch = 32;

// What a UD packet of `req` weighs on the wire (what the soft port counts
// in `bytes`): the size of the packet it would build, headers, padding and
// CRCs included.
std::uint64_t wire_size(const SendRequest& req) {
    ib::PacketSpec spec;
    if (req.ah.grh) spec.grh.emplace();
    spec.bth.opcode = req.immediate ? ib::op::ud_send_only_imm : ib::op::ud_send_only;
    spec.payload = req.payload;
    return ib::packet_size(spec);
}

}  // namespace

expected<std::unique_ptr<UdSendQueue>, Error> VerbsSendQueue::create(std::shared_ptr<DeviceState> device) {
    std::unique_ptr<VerbsSendQueue> q(new VerbsSendQueue(std::move(device)));
    if (auto ok = q->init(); !ok) return unexpected(ok.error());
    return std::unique_ptr<UdSendQueue>(std::move(q));
}

expected<void, Error> VerbsSendQueue::init() {
    const DeviceState& dev = *device_;
    depth_ = std::min<std::uint32_t>(kDepth, std::max<std::uint32_t>(dev.max_qp_wr, 1));
    depth_ = std::min<std::uint32_t>(depth_, std::max<std::uint32_t>(dev.max_cqe, 1));
    cq_.reset(ibv_create_cq(dev.context.get(), static_cast<int>(depth_), nullptr, nullptr, 0));
    if (!cq_)
        return unexpected(verbs_error("ibv_create_cq (" + std::to_string(depth_) + " entries) for a send queue on " +
                                          dev.where(),
                                      errno));
    auto ring = RegisteredRing::create(dev.pd.get(), depth_, ib::mtu_bytes(dev.max_mtu), "send queue ring");
    if (!ring) return unexpected(ring.error());
    ring_ = std::move(*ring);
    slots_.resize(depth_);
    release_all();
    wrs_.resize(depth_);
    sges_.resize(depth_);
    wcs_.resize(kReapBatch);
    return {};
}

VerbsSendQueue::~VerbsSendQueue() {
    // The QP first (its sends are flushed and no longer use the ring or the
    // AHs), then the slots' AH references, the cache, the ring and the CQ.
    qp_.reset();
    release_all();
}

void VerbsSendQueue::release_all() {
    free_.clear();
    for (std::uint32_t i = depth_; i-- > 0;) {  // popped from the back: slot 0 first
        slots_[i].reset();
        free_.push_back(i);
    }
}

bool VerbsSendQueue::become(const SendAs& as) {
    as_ = as;
    tried_ = true;
    retry_at_ = Clock::now() + kRetryAfter;  // if it fails
    if (qp_) {
        qp_.reset();
        // The destroyed QP's completions, if the CQ still holds any, are
        // of no use; every slot is free again.
        while (ibv_poll_cq(cq_.get(), static_cast<int>(wcs_.size()), wcs_.data()) > 0) {
        }
        release_all();
    }
    const DeviceState& dev = *device_;
    ibv_qp_init_attr init{};
    init.send_cq = cq_.get();
    init.recv_cq = cq_.get();
    init.cap.max_send_wr = depth_;
    init.cap.max_recv_wr = 1;  // none is ever posted: the queue receives nothing
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.qp_type = IBV_QPT_UD;
    init.sq_sig_all = 1;
    QpPtr qp(ibv_create_qp(dev.pd.get(), &init));
    if (!qp || !bring_ud_to_rts(dev, qp.get(), as.pkey_index, as.qkey)) return false;
    qp_ = std::move(qp);
    return true;
}

void VerbsSendQueue::reap() {
    while (true) {
        const int got = ibv_poll_cq(cq_.get(), static_cast<int>(wcs_.size()), wcs_.data());
        if (got <= 0) return;
        for (int i = 0; i < got; ++i) {
            const ibv_wc& wc = wcs_[static_cast<std::size_t>(i)];
            if (wc.wr_id >= depth_) continue;
            const auto slot = static_cast<std::uint32_t>(wc.wr_id);
            // Posted (counted in packets) but failed: dropped as well, as
            // the soft port counts a datagram its socket would not take. A
            // send error leaves a UD QP in SQE (or ERR), where everything
            // after it is flushed: the next send makes the QP again.
            if (wc.status != IBV_WC_SUCCESS) {
                counters_.add(counters_.dropped);
                if (wc.status != IBV_WC_WR_FLUSH_ERR) tried_ = false;
            }
            slots_[slot].reset();  // drops the send's AH reference
            free_.push_back(slot);
        }
        if (static_cast<std::size_t>(got) < wcs_.size()) return;
    }
}

expected<AhPtr, Error> VerbsSendQueue::address_handle(const AddressHandle& ah) {
    if (AhPtr* cached = ahs_.find(ah)) return *cached;
    ibv_ah_attr attr = ah_attr_from(ah, device_->port_num);
    ibv_ah* raw = ibv_create_ah(device_->pd.get(), &attr);
    if (raw == nullptr) return unexpected(verbs_error("ibv_create_ah (DLID " + std::to_string(ah.dlid) + ")", errno));
    return ahs_.insert(ah, AhPtr(raw, DestroyAh{}));
}

// As the port's QP checks a request (VerbsUdQp::check_send), unicast only.
bool VerbsSendQueue::acceptable(const SendRequest& req) const {
    const DeviceState& dev = *device_;
    if (dev.state != PortState::active) return false;
    if (req.payload.size() > ib::mtu_bytes(dev.active_mtu) || req.payload.size() > ring_.slot_size()) return false;
    if (ib::is_multicast_lid(req.ah.dlid) || req.remote_qpn > ib::kQpnMask) return false;
    return true;
}

std::size_t VerbsSendQueue::send(const SendAs& as, std::span<const SendRequest> requests) {
    reap();
    if (!tried_ || !(as == as_) || (!qp_ && Clock::now() >= retry_at_)) (void)become(as);
    std::size_t built = 0, taken = 0;
    std::uint64_t bytes = 0;
    for (const SendRequest& req : requests) {
        if (!qp_) {
            counters_.add(counters_.failed);
            continue;
        }
        if (!acceptable(req)) {
            counters_.add(counters_.refused);
            continue;
        }
        auto ah = address_handle(req.ah);
        if (!ah) {
            counters_.add(counters_.failed);
            continue;
        }
        ++taken;
        bytes += wire_size(req);
        if (free_.empty()) {  // taken, but no room: dropped (the soft port's full ring)
            counters_.add(counters_.dropped);
            continue;
        }
        const std::uint32_t slot = free_.back();
        free_.pop_back();
        slots_[slot] = std::move(*ah);
        if (!req.payload.empty()) std::memcpy(ring_.slot(slot), req.payload.data(), req.payload.size());
        ibv_send_wr& wr = wrs_[built];
        fill_ud_send(wr, sges_[built], slot, req, ring_.slot(slot), ring_.lkey(), slots_[slot].get(), as.qkey);
        if (built > 0) wrs_[built - 1].next = &wr;
        ++built;
    }
    counters_.add(counters_.packets, taken);
    counters_.add(counters_.bytes, bytes);
    if (built == 0) return taken;
    ibv_send_wr* bad = nullptr;
    if (ibv_post_send(qp_.get(), wrs_.data(), &bad) != 0) {
        // Everything before `bad` is posted; the rest is dropped.
        const std::size_t posted = bad ? static_cast<std::size_t>(bad - wrs_.data()) : 0;
        for (std::size_t i = posted; i < built; ++i) {
            const auto slot = static_cast<std::uint32_t>(wrs_[i].wr_id);
            slots_[slot].reset();
            free_.push_back(slot);
        }
        counters_.add(counters_.dropped, built - posted);
    }
    return taken;
}

}  // namespace ipoibd::transport::verbs
