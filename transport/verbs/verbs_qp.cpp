#include "transport/verbs/verbs_qp.h"

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ipoibd::transport::verbs {

namespace {

// wr_id of our own work requests: which ring slot, and which queue (the
// opcode of a failed work completion is undefined, so the kind rides here).
constexpr std::uint64_t kReceiveTag = std::uint64_t{1} << 63;
constexpr std::size_t kPageSize = 4096;
constexpr std::size_t kPollBatch = 32;
// How many QPs to create before giving up on getting a QPN this port has
// not handed out before (only an HCA that reuses QPNs at once needs a retry).
constexpr int kFreshQpnAttempts = 8;

std::uint64_t send_wr_id(std::uint32_t slot) { return slot; }
std::uint64_t receive_wr_id(std::uint32_t slot) { return kReceiveTag | slot; }
bool is_receive(std::uint64_t wr_id) { return (wr_id & kReceiveTag) != 0; }
std::uint32_t slot_of(std::uint64_t wr_id) { return static_cast<std::uint32_t>(wr_id & ~kReceiveTag); }

std::vector<std::uint32_t> all_slots(std::uint32_t n) {
    std::vector<std::uint32_t> v(n);
    // Popped from the back: slot 0 first.
    for (std::uint32_t i = 0; i < n; ++i) v[i] = n - 1 - i;
    return v;
}

}  // namespace

// ---------------------------------------------------------------------------
// RegisteredRing

void RegisteredRing::Free::operator()(std::uint8_t* p) const noexcept { std::free(p); }

expected<RegisteredRing, Error> RegisteredRing::create(ibv_pd* pd, std::uint32_t slots, std::size_t slot_size,
                                                       const std::string& what) {
    RegisteredRing ring;
    ring.slot_size_ = slot_size;
    const std::size_t bytes = (std::size_t{slots} * slot_size + kPageSize - 1) / kPageSize * kPageSize;
    ring.memory_.reset(static_cast<std::uint8_t*>(std::aligned_alloc(kPageSize, bytes)));
    if (!ring.memory_) return unexpected(Error{Errc::resource_exhausted, "allocating " + what, ENOMEM});
    std::memset(ring.memory_.get(), 0, bytes);
    // The function, not verbs.h's ibv_reg_mr macro: the macro mixes two enum
    // types in one expression, which C++20 deprecates (clang warns). For
    // plain access flags the macro calls this same function.
    ring.mr_.reset((ibv_reg_mr)(pd, ring.memory_.get(), bytes, IBV_ACCESS_LOCAL_WRITE));
    if (!ring.mr_)
        return unexpected(verbs_error("ibv_reg_mr " + what + " (" + std::to_string(bytes) +
                                          " bytes; locked memory is limited by ulimit -l / LimitMEMLOCK=)",
                                      errno));
    return ring;
}

std::uint16_t VerbsUdQp::pkey() const {
    const auto& table = device_->pkey_table;
    return config_.pkey_index < table.size() ? table[config_.pkey_index] : 0;
}

// ---------------------------------------------------------------------------
// Creation and teardown

VerbsUdQp::VerbsUdQp(std::shared_ptr<DeviceState> device, const UdQpConfig& config)
    : device_(std::move(device)), config_(config) {}

expected<std::unique_ptr<UdQp>, Error> VerbsUdQp::create(std::shared_ptr<DeviceState> device, const UdQpConfig& config) {
    std::unique_ptr<VerbsUdQp> qp(new VerbsUdQp(std::move(device), config));
    if (auto ok = qp->init(); !ok) return unexpected(ok.error());
    return std::unique_ptr<UdQp>(std::move(qp));
}

VerbsUdQp::~VerbsUdQp() {
    // Destroying the QP would detach it too; detaching first keeps the
    // teardown explicit and in the order it was built.
    if (qp_) {
        for (auto& [mgid, mlid] : attachments_) {
            ibv_gid gid{};
            std::memcpy(gid.raw, mgid.data(), mgid.size());
            ibv_detach_mcast(qp_.get(), &gid, mlid);
        }
    }
}

std::string VerbsUdQp::where() const {
    return device_->where() + (qp_ ? " QP " + std::to_string(qp_->qp_num) : std::string());
}

expected<void, Error> VerbsUdQp::init() {
    const DeviceState& dev = *device_;
    if (config_.send_depth == 0 || config_.receive_depth == 0)
        return unexpected(Error{Errc::invalid_argument, "queue depths must be at least 1"});
    if (config_.send_depth > dev.max_qp_wr || config_.receive_depth > dev.max_qp_wr)
        return unexpected(Error{Errc::invalid_argument, "queue depth " +
                                                            std::to_string(std::max(config_.send_depth, config_.receive_depth)) +
                                                            " over the device's max_qp_wr " + std::to_string(dev.max_qp_wr)});
    const std::uint64_t cqe = std::uint64_t{config_.send_depth} + config_.receive_depth;
    if (cqe > dev.max_cqe)
        return unexpected(Error{Errc::invalid_argument, "send + receive depth " + std::to_string(cqe) +
                                                            " over the device's max_cqe " + std::to_string(dev.max_cqe)});

    cq_.reset(ibv_create_cq(dev.context.get(), static_cast<int>(cqe), nullptr, dev.channel.get(), 0));
    if (!cq_) return unexpected(verbs_error("ibv_create_cq (" + std::to_string(cqe) + " entries) on " + dev.where(), errno));
    if (int rc = ibv_req_notify_cq(cq_.get(), 0); rc != 0)
        return unexpected(verbs_error("ibv_req_notify_cq on " + dev.where(), rc));

    const std::size_t mtu = ib::mtu_bytes(dev.max_mtu);
    auto send_ring = RegisteredRing::create(dev.pd.get(), config_.send_depth, mtu, "send ring");
    if (!send_ring) return unexpected(send_ring.error());
    send_ring_ = std::move(*send_ring);
    auto receive_ring = RegisteredRing::create(dev.pd.get(), config_.receive_depth, kGrhSlotSize + mtu, "receive ring");
    if (!receive_ring) return unexpected(receive_ring.error());
    receive_ring_ = std::move(*receive_ring);

    send_slots_.resize(config_.send_depth);
    free_send_slots_ = all_slots(config_.send_depth);
    receive_slots_.resize(config_.receive_depth);
    free_receive_slots_ = all_slots(config_.receive_depth);
    send_wrs_.resize(config_.send_depth);
    recv_wrs_.resize(config_.receive_depth);
    sges_.resize(std::max(config_.send_depth, config_.receive_depth));
    wcs_.resize(kPollBatch);

    auto qp = create_qp_with_fresh_qpn();
    if (!qp) return unexpected(qp.error());
    qp_ = std::move(*qp);
    return {};
}

expected<QpPtr, Error> VerbsUdQp::create_qp_with_fresh_qpn() {
    DeviceState& dev = *device_;
    ibv_qp_init_attr init{};
    init.send_cq = cq_.get();
    init.recv_cq = cq_.get();
    init.cap.max_send_wr = config_.send_depth;
    init.cap.max_recv_wr = config_.receive_depth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    init.qp_type = IBV_QPT_UD;
    init.sq_sig_all = 1;  // every accepted send yields one completion (port.h)

    // A QP whose QPN this port already handed out is held, not destroyed,
    // until a fresh one is found, so the HCA cannot give the same QPN back.
    std::vector<QpPtr> reused;
    for (int attempt = 0; attempt < kFreshQpnAttempts; ++attempt) {
        QpPtr qp(ibv_create_qp(dev.pd.get(), &init));
        if (!qp) return unexpected(verbs_error("ibv_create_qp (UD) on " + dev.where(), errno));
        if (dev.issued_qpns.contains(qp->qp_num)) {
            reused.push_back(std::move(qp));
            continue;
        }
        if (auto ok = bring_to_rts(qp.get()); !ok) return unexpected(ok.error());
        dev.issued_qpns.insert(qp->qp_num);
        return qp;
    }
    return unexpected(Error{Errc::resource_exhausted, "the HCA handed out only QPNs this port already used"});
}

expected<void, Error> VerbsUdQp::bring_to_rts(ibv_qp* qp) const {
    return bring_ud_to_rts(*device_, qp, config_.pkey_index, config_.qkey);
}

expected<void, Error> bring_ud_to_rts(const DeviceState& dev, ibv_qp* qp, std::uint16_t pkey_index, std::uint32_t qkey) {
    const std::string what = " (QP " + std::to_string(qp->qp_num) + " on " + dev.where() + ")";
    ibv_qp_attr attr{};
    attr.qp_state = IBV_QPS_INIT;
    attr.pkey_index = pkey_index;
    attr.port_num = dev.port_num;
    attr.qkey = qkey;
    // A Q_Key with the high bit set is a controlled one: Linux lets only
    // CAP_NET_RAW set it on a QP, so EPERM here means "not privileged".
    if (int rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY); rc != 0)
        return unexpected(verbs_error("ibv_modify_qp to INIT" + what, rc));

    attr = ibv_qp_attr{};
    attr.qp_state = IBV_QPS_RTR;
    if (int rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE); rc != 0)
        return unexpected(verbs_error("ibv_modify_qp to RTR" + what, rc));

    attr = ibv_qp_attr{};
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = 0;  // UD ignores PSNs on receive; any start value works
    if (int rc = ibv_modify_qp(qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN); rc != 0)
        return unexpected(verbs_error("ibv_modify_qp to RTS" + what, rc));
    return {};
}

// ---------------------------------------------------------------------------
// Sends

void fill_ud_send(ibv_send_wr& wr, ibv_sge& sge, std::uint64_t wr_id, const SendRequest& req, std::uint8_t* slot,
                  std::uint32_t lkey, ibv_ah* ah, std::uint32_t qp_qkey) {
    sge.addr = reinterpret_cast<std::uintptr_t>(slot);
    sge.length = static_cast<std::uint32_t>(req.payload.size());
    sge.lkey = lkey;
    wr = ibv_send_wr{};
    wr.wr_id = wr_id;
    wr.sg_list = &sge;
    wr.num_sge = req.payload.empty() ? 0 : 1;
    wr.opcode = req.immediate ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
    if (req.immediate) wr.imm_data = host_to_be32(*req.immediate);
    unsigned int flags = IBV_SEND_SIGNALED;
    if (req.solicited) flags |= IBV_SEND_SOLICITED;
    wr.send_flags = flags;
    wr.wr.ud.ah = ah;
    wr.wr.ud.remote_qpn = req.remote_qpn;
    wr.wr.ud.remote_qkey = effective_qkey(req.remote_qkey, qp_qkey);
}

std::optional<Error> VerbsUdQp::check_send(const SendRequest& req) const {
    const DeviceState& dev = *device_;
    if (const PortState s = dev.state; s != PortState::active)
        return Error{Errc::port_not_active, "port is " + std::string(to_string(s))};
    const std::uint32_t mtu = ib::mtu_bytes(dev.active_mtu);
    if (req.payload.size() > mtu || req.payload.size() > send_ring_.slot_size())
        return Error{Errc::payload_too_long, std::to_string(req.payload.size()) + " bytes over the MTU of " +
                                                 std::to_string(mtu)};
    if (ib::is_multicast_lid(req.ah.dlid) && (!req.ah.grh || req.remote_qpn != ib::kQpnMulticast))
        return Error{Errc::invalid_argument, "multicast needs a GRH and remote QPN 0xFFFFFF"};
    if (req.remote_qpn > ib::kQpnMask) return Error{Errc::invalid_argument, "remote QPN over 24 bits"};
    return std::nullopt;
}

expected<std::size_t, Error> VerbsUdQp::post_send(std::span<const SendRequest> requests) {
    std::optional<Error> refusal;
    std::size_t built = 0;
    for (const SendRequest& req : requests) {
        if (free_send_slots_.empty()) break;  // queue full: the caller retries after polling
        if ((refusal = check_send(req))) break;
        auto ah = device_->address_handle(req.ah);
        if (!ah) {
            refusal = ah.error();
            break;
        }
        const std::uint32_t slot = free_send_slots_.back();
        free_send_slots_.pop_back();
        send_slots_[slot] = SendSlot{req.wr_id, std::move(*ah)};
        if (!req.payload.empty()) std::memcpy(send_ring_.slot(slot), req.payload.data(), req.payload.size());

        ibv_send_wr& wr = send_wrs_[built];
        fill_ud_send(wr, sges_[built], send_wr_id(slot), req, send_ring_.slot(slot), send_ring_.lkey(),
                     send_slots_[slot].ah.get(), config_.qkey);
        if (built > 0) send_wrs_[built - 1].next = &wr;
        ++built;
    }

    std::size_t posted = built;
    if (built > 0) {
        ibv_send_wr* bad = nullptr;
        if (int rc = ibv_post_send(qp_.get(), send_wrs_.data(), &bad); rc != 0) {
            // Everything before `bad` is posted; give the rest back.
            posted = bad ? static_cast<std::size_t>(bad - send_wrs_.data()) : 0;
            for (std::size_t i = posted; i < built; ++i) {
                const std::uint32_t slot = slot_of(send_wrs_[i].wr_id);
                send_slots_[slot] = SendSlot{};
                free_send_slots_.push_back(slot);
            }
            if (posted == 0) return unexpected(verbs_error("ibv_post_send on " + where(), rc));
        }
    }
    if (posted == 0 && refusal) return unexpected(std::move(*refusal));
    return posted;
}

// ---------------------------------------------------------------------------
// Receives

expected<std::size_t, Error> VerbsUdQp::post_receive(std::span<const ReceiveBuffer> buffers) {
    std::optional<Error> refusal;
    std::size_t built = 0;
    for (const ReceiveBuffer& b : buffers) {
        if (free_receive_slots_.empty()) break;
        if (b.buffer.size() < kGrhSlotSize) {
            refusal = Error{Errc::invalid_argument, "receive buffer smaller than the 40-byte GRH slot"};
            break;
        }
        const std::uint32_t slot = free_receive_slots_.back();
        free_receive_slots_.pop_back();
        receive_slots_[slot] = ReceiveSlot{b.wr_id, b.buffer};

        // The slot is posted with the user's length, so a packet too big for
        // the user's buffer fails (local length error) as it would in place.
        ibv_sge& sge = sges_[built];
        sge.addr = reinterpret_cast<std::uintptr_t>(receive_ring_.slot(slot));
        sge.length = static_cast<std::uint32_t>(std::min(b.buffer.size(), receive_ring_.slot_size()));
        sge.lkey = receive_ring_.lkey();
        ibv_recv_wr& wr = recv_wrs_[built];
        wr = ibv_recv_wr{};
        wr.wr_id = receive_wr_id(slot);
        wr.sg_list = &sge;
        wr.num_sge = 1;
        if (built > 0) recv_wrs_[built - 1].next = &wr;
        ++built;
    }

    std::size_t posted = built;
    if (built > 0) {
        ibv_recv_wr* bad = nullptr;
        if (int rc = ibv_post_recv(qp_.get(), recv_wrs_.data(), &bad); rc != 0) {
            posted = bad ? static_cast<std::size_t>(bad - recv_wrs_.data()) : 0;
            for (std::size_t i = posted; i < built; ++i) {
                const std::uint32_t slot = slot_of(recv_wrs_[i].wr_id);
                receive_slots_[slot] = ReceiveSlot{};
                free_receive_slots_.push_back(slot);
            }
            if (posted == 0) return unexpected(verbs_error("ibv_post_recv on " + where(), rc));
        }
    }
    if (posted == 0 && refusal) return unexpected(std::move(*refusal));
    return posted;
}

// ---------------------------------------------------------------------------
// Completions

std::size_t VerbsUdQp::poll(std::span<Completion> out) {
    std::size_t n = 0;
    while (n < out.size()) {
        const int want = static_cast<int>(std::min(out.size() - n, wcs_.size()));
        const int got = ibv_poll_cq(cq_.get(), want, wcs_.data());
        if (got <= 0) break;  // empty, or a CQ error there is nothing to do about
        for (int i = 0; i < got; ++i) out[n++] = complete(wcs_[static_cast<std::size_t>(i)]);
        if (got < want) break;
    }
    // A full `out` may have left completions behind; keep the port's fd
    // readable so the event loop comes back for them.
    if (n > 0 && n == out.size()) device_->wake_up();
    return n;
}

Completion VerbsUdQp::complete(const ibv_wc& wc) {
    const std::uint32_t slot = slot_of(wc.wr_id);
    if (!is_receive(wc.wr_id)) {
        Completion c;
        c.kind = CompletionKind::send;
        c.qp_num = wc.qp_num;
        c.status = status_from_verbs(wc.status);
        c.wr_id = send_slots_[slot].wr_id;
        send_slots_[slot] = SendSlot{};  // drops this send's AH reference
        free_send_slots_.push_back(slot);
        return c;
    }
    Completion c = receive_completion_from_wc(wc, config_.pkey_index);
    ReceiveSlot& r = receive_slots_[slot];
    c.wr_id = r.wr_id;
    if (c.status == CompletionStatus::success) {
        // The one copy per received packet (see the flow comment in the header).
        const std::size_t len = std::min<std::size_t>(wc.byte_len, r.buffer.size());
        std::memcpy(r.buffer.data(), receive_ring_.slot(slot), len);
    } else {
        c.byte_len = 0;  // only wr_id, status and qp_num are valid in a failed wc
        c.src_qp = 0;
        c.slid = 0;
        c.sl = 0;
        c.grh_present = false;
        c.immediate.reset();
    }
    r = ReceiveSlot{};
    free_receive_slots_.push_back(slot);
    return c;
}

// ---------------------------------------------------------------------------
// Multicast

expected<void, Error> VerbsUdQp::attach_multicast(const ib::Gid& mgid, std::uint16_t mlid) {
    if (!ib::is_multicast_lid(mlid)) return unexpected(Error{Errc::invalid_argument, "MLID not in the multicast range"});
    const auto group = std::make_pair(mgid, mlid);
    if (std::find(attachments_.begin(), attachments_.end(), group) != attachments_.end()) return {};
    ibv_gid gid{};
    std::memcpy(gid.raw, mgid.data(), mgid.size());
    if (int rc = ibv_attach_mcast(qp_.get(), &gid, mlid); rc != 0) {
        if (rc == ENOMEM || rc == ENOSPC)
            return unexpected(Error{Errc::resource_exhausted, "ibv_attach_mcast on " + where(), rc});
        return unexpected(verbs_error("ibv_attach_mcast on " + where(), rc));
    }
    attachments_.push_back(group);
    return {};
}

expected<void, Error> VerbsUdQp::detach_multicast(const ib::Gid& mgid, std::uint16_t mlid) {
    auto it = std::find(attachments_.begin(), attachments_.end(), std::make_pair(mgid, mlid));
    if (it == attachments_.end()) return unexpected(Error{Errc::not_attached, "QP is not attached to that group"});
    ibv_gid gid{};
    std::memcpy(gid.raw, mgid.data(), mgid.size());
    if (int rc = ibv_detach_mcast(qp_.get(), &gid, mlid); rc != 0)
        return unexpected(verbs_error("ibv_detach_mcast on " + where(), rc));
    attachments_.erase(it);
    return {};
}

}  // namespace ipoibd::transport::verbs
