#include "transport/verbs/verbs_rc.h"

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace ipoibd::transport::verbs {

namespace {

constexpr std::size_t kMinBufferClass = 4096;
constexpr std::size_t kPooledPerClass = 64;          // free buffers kept per size class
constexpr std::size_t kMaxPooledBuffer = 1u << 20;   // larger ones are registered per use
constexpr std::size_t kPooledBytes = 32u << 20;      // at most this much pinned in the pool
constexpr int kPollBatch = 32;

// The pool's size class of a message: the next power of two, at least 4 KiB.
std::size_t size_class(std::size_t n) { return std::max(kMinBufferClass, std::bit_ceil(std::max<std::size_t>(n, 1))); }

ibv_mtu mtu_to_verbs(std::uint32_t bytes) {
    switch (bytes) {
        case 256: return IBV_MTU_256;
        case 512: return IBV_MTU_512;
        case 1024: return IBV_MTU_1024;
        case 2048: return IBV_MTU_2048;
        default: return IBV_MTU_4096;
    }
}

}  // namespace

int access_to_verbs(std::uint32_t access) {
    int flags = 0;
    if (access & (rc::access::local_write | rc::access::remote_write)) flags |= IBV_ACCESS_LOCAL_WRITE;
    if (access & rc::access::remote_write) flags |= IBV_ACCESS_REMOTE_WRITE;
    if (access & rc::access::remote_read) flags |= IBV_ACCESS_REMOTE_READ;
    return flags;
}

rc::Status rc_status_from_verbs(ibv_wc_status s) {
    switch (s) {
        case IBV_WC_SUCCESS: return rc::Status::success;
        case IBV_WC_LOC_LEN_ERR: return rc::Status::local_length_error;
        case IBV_WC_RETRY_EXC_ERR: return rc::Status::retry_exceeded;
        case IBV_WC_RNR_RETRY_EXC_ERR: return rc::Status::rnr_retry_exceeded;
        case IBV_WC_REM_INV_REQ_ERR: return rc::Status::remote_invalid_request;
        case IBV_WC_REM_ACCESS_ERR: return rc::Status::remote_access_error;
        case IBV_WC_REM_OP_ERR: return rc::Status::remote_operational_error;
        case IBV_WC_WR_FLUSH_ERR: return rc::Status::flushed;
        case IBV_WC_LOC_PROT_ERR: return rc::Status::local_protection_error;
        default: return rc::Status::local_error;
    }
}

VerbsRcQp::VerbsRcQp(std::shared_ptr<DeviceState> device, std::uint16_t pkey_index)
    : device_(std::move(device)), pkey_index_(pkey_index) {}

expected<std::unique_ptr<RcQueuePair>, Error> VerbsRcQp::create(std::shared_ptr<DeviceState> device,
                                                                std::uint16_t pkey_index) {
    std::unique_ptr<VerbsRcQp> qp(new VerbsRcQp(std::move(device), pkey_index));
    if (auto ok = qp->init(); !ok) return unexpected(ok.error());
    return std::unique_ptr<RcQueuePair>(std::move(qp));
}

VerbsRcQp::~VerbsRcQp() {
    // The QP first: its posted receives and sends hold the buffers' MRs.
    qp_.reset();
    pending_.clear();
    pool_.clear();
}

std::string VerbsRcQp::where() const {
    return "RC QP" + (qp_ ? " 0x" + [&] {
        char b[16];
        std::snprintf(b, sizeof b, "%06x", qp_->qp_num);
        return std::string(b);
    }() : std::string()) + " on " + device_->where();
}

expected<void, Error> VerbsRcQp::init() {
    DeviceState& dev = *device_;
    const std::uint32_t cqe = kSendDepth + kReceiveDepth;
    if ((dev.max_qp_wr && std::max(kSendDepth, kReceiveDepth) > dev.max_qp_wr) || (dev.max_cqe && cqe > dev.max_cqe))
        return unexpected(Error{Errc::invalid_argument, "RC queue depths over the limits of " + dev.where()});
    cq_.reset(ibv_create_cq(dev.context.get(), static_cast<int>(cqe), nullptr, dev.channel.get(), 0));
    if (!cq_) return unexpected(verbs_error("ibv_create_cq for an RC QP on " + dev.where(), errno));
    if (int rc = ibv_req_notify_cq(cq_.get(), 0); rc != 0)
        return unexpected(verbs_error("ibv_req_notify_cq on " + dev.where(), rc));
    ibv_qp_init_attr init{};
    init.send_cq = cq_.get();
    init.recv_cq = cq_.get();
    init.qp_type = IBV_QPT_RC;
    init.sq_sig_all = 1;
    init.cap.max_send_wr = kSendDepth;
    init.cap.max_recv_wr = kReceiveDepth;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    qp_.reset(ibv_create_qp(dev.pd.get(), &init));
    if (!qp_) return unexpected(verbs_error("ibv_create_qp (RC) on " + dev.where(), errno));
    dev.issued_qpns.insert(qp_->qp_num);
    // INIT at once, so that receives may be posted before connect().
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = pkey_index_;
    a.port_num = dev.port_num;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (int rc = ibv_modify_qp(qp_.get(), &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
        rc != 0)
        return unexpected(verbs_error("ibv_modify_qp INIT on " + where(), rc));
    state_ = rc::QpState::init;
    return {};
}

expected<void, std::string> VerbsRcQp::connect(std::uint16_t remote_lid, const rc::RtrAttributes& rtr,
                                               const rc::RtsAttributes& rts) {
    if (state_ != rc::QpState::init) return unexpected("the QP is " + std::string(rc::to_string(state_)) + ", not INIT");
    if (rtr.pmtu != 256 && rtr.pmtu != 512 && rtr.pmtu != 1024 && rtr.pmtu != 2048 && rtr.pmtu != 4096)
        return unexpected("path MTU " + std::to_string(rtr.pmtu) + ": must be 256, 512, 1024, 2048 or 4096");
    if (!ib::is_unicast_lid(remote_lid)) return unexpected("remote LID " + std::to_string(remote_lid) + ": not unicast");
    if (rts.retry_count > 7 || rts.rnr_retry > 7 || rts.timeout > 31 || rtr.min_rnr_timer > 31)
        return unexpected(std::string("retry counts are 0..7, timer codes 0..31"));
    DeviceState& dev = *device_;
    // Responder resources and initiator depth, within what the HCA has
    // (max_qp_rd_atom and max_qp_init_rd_atom).
    const auto within = [](std::uint8_t n, std::uint32_t limit) {
        return static_cast<std::uint8_t>(std::clamp<std::uint32_t>(n, 1, std::max<std::uint32_t>(limit, 1)));
    };

    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_RTR;
    const std::uint32_t pmtu = std::min(rtr.pmtu, ib::mtu_bytes(dev.active_mtu));
    a.path_mtu = mtu_to_verbs(pmtu);
    a.dest_qp_num = rtr.dest_qpn;
    a.rq_psn = rtr.rq_psn & 0xFFFFFF;
    a.max_dest_rd_atomic = within(rtr.max_dest_rd_atomic, dev.max_rd_atomic);
    a.min_rnr_timer = rtr.min_rnr_timer;
    a.ah_attr.dlid = remote_lid;
    a.ah_attr.sl = 0;
    a.ah_attr.src_path_bits = 0;
    a.ah_attr.is_global = 0;
    a.ah_attr.port_num = dev.port_num;
    if (int rc = ibv_modify_qp(qp_.get(), &a,
                               IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                   IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER);
        rc != 0)
        return unexpected(verbs_error("ibv_modify_qp RTR on " + where(), rc).message());
    state_ = rc::QpState::rtr;

    a = ibv_qp_attr{};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = rts.sq_psn & 0xFFFFFF;
    a.timeout = rts.timeout;
    a.retry_cnt = rts.retry_count;
    a.rnr_retry = rts.rnr_retry;
    a.max_rd_atomic = within(rts.max_rd_atomic, dev.max_init_rd_atomic);
    if (int rc = ibv_modify_qp(qp_.get(), &a,
                               IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                   IBV_QP_MAX_QP_RD_ATOMIC);
        rc != 0)
        return unexpected(verbs_error("ibv_modify_qp RTS on " + where(), rc).message());
    state_ = rc::QpState::rts;
    return {};
}

expected<std::unique_ptr<VerbsRcQp::Buffer>, std::string> VerbsRcQp::take_buffer(std::size_t size) {
    const std::size_t cls = size_class(size);
    if (auto it = pool_.find(cls); it != pool_.end() && !it->second.empty()) {
        auto b = std::move(it->second.back());
        it->second.pop_back();
        pooled_bytes_ -= b->size;
        return b;
    }
    auto b = std::make_unique<Buffer>();
    b->memory = {static_cast<std::uint8_t*>(std::aligned_alloc(4096, cls)), std::free};
    if (!b->memory) return unexpected("no memory for a " + std::to_string(cls) + "-byte buffer");
    b->size = cls;
    b->mr.reset((ibv_reg_mr)(device_->pd.get(), b->memory.get(), cls, IBV_ACCESS_LOCAL_WRITE));
    if (!b->mr)
        return unexpected(verbs_error("ibv_reg_mr of a " + std::to_string(cls) +
                                          "-byte buffer (locked memory is limited by ulimit -l / LimitMEMLOCK=)",
                                      errno)
                              .message());
    return b;
}

void VerbsRcQp::give_back(std::unique_ptr<Buffer> b) {
    if (!b) return;
    // Pinned memory is scarce (ulimit -l): at most kPooledBytes kept, large
    // buffers never.
    if (b->size > kMaxPooledBuffer || pooled_bytes_ + b->size > kPooledBytes) return;
    auto& free = pool_[b->size];
    if (free.size() >= kPooledPerClass) return;
    pooled_bytes_ += b->size;
    free.push_back(std::move(b));
}

expected<void, std::string> VerbsRcQp::post_send(rc::SendWr wr) {
    if (state_ != rc::QpState::rts) return unexpected("the QP is " + std::string(rc::to_string(state_)) + ", not RTS");
    if (sends_posted_ >= kSendDepth) return unexpected(std::string("send queue full"));
    if (wr.payload.size() > rc::RcQp::kMaxMessage) return unexpected(std::string("message too long"));
    ibv_sge sge{};
    ibv_send_wr swr{};
    Pending p{.user_wr_id = wr.wr_id, .opcode = wr.opcode};
    if (wr.opcode == rc::WrOpcode::rdma_read) {
        const ibv_mr* mr = device_->find_region(wr.read_into.data(), wr.read_into.size(), IBV_ACCESS_LOCAL_WRITE);
        if (!wr.read_into.empty() && mr == nullptr)
            return unexpected(std::string("the READ's buffer is not in a region registered for local write"));
        sge.addr = reinterpret_cast<std::uintptr_t>(wr.read_into.data());
        sge.length = static_cast<std::uint32_t>(wr.read_into.size());
        sge.lkey = mr ? mr->lkey : 0;
        swr.opcode = IBV_WR_RDMA_READ;
    } else {
        auto b = take_buffer(wr.payload.size());
        if (!b) return unexpected(b.error());
        if (!wr.payload.empty()) std::memcpy((*b)->memory.get(), wr.payload.data(), wr.payload.size());
        sge.addr = reinterpret_cast<std::uintptr_t>((*b)->memory.get());
        sge.length = static_cast<std::uint32_t>(wr.payload.size());
        sge.lkey = (*b)->mr->lkey;
        p.buffer = std::move(*b);
        if (wr.opcode == rc::WrOpcode::send) {
            swr.opcode = wr.imm ? IBV_WR_SEND_WITH_IMM : IBV_WR_SEND;
        } else {
            swr.opcode = wr.imm ? IBV_WR_RDMA_WRITE_WITH_IMM : IBV_WR_RDMA_WRITE;
        }
        if (wr.imm) swr.imm_data = host_to_be32(*wr.imm);
    }
    if (wr.opcode != rc::WrOpcode::send) {
        swr.wr.rdma.remote_addr = wr.remote_va;
        swr.wr.rdma.rkey = wr.rkey;
    }
    const std::uint64_t id = next_wr_id_++;
    swr.wr_id = id;
    swr.sg_list = &sge;
    swr.num_sge = sge.length > 0 ? 1 : 0;
    swr.send_flags = IBV_SEND_SIGNALED;
    ibv_send_wr* bad = nullptr;
    if (int rc = ibv_post_send(qp_.get(), &swr, &bad); rc != 0) {
        give_back(std::move(p.buffer));
        return unexpected(verbs_error("ibv_post_send on " + where(), rc).message());
    }
    pending_.emplace(id, std::move(p));
    ++sends_posted_;
    return {};
}

expected<void, std::string> VerbsRcQp::post_recv(rc::RecvWr wr) {
    if (state_ == rc::QpState::reset) return unexpected(std::string("the QP is RESET"));
    if (receives_posted_ >= kReceiveDepth) return unexpected(std::string("receive queue full"));
    if (wr.capacity > rc::RcQp::kMaxMessage) return unexpected(std::string("receive buffer too large"));
    auto b = take_buffer(wr.capacity);
    if (!b) return unexpected(b.error());
    ibv_sge sge{};
    sge.addr = reinterpret_cast<std::uintptr_t>((*b)->memory.get());
    sge.length = wr.capacity;
    sge.lkey = (*b)->mr->lkey;
    const std::uint64_t id = next_wr_id_++;
    ibv_recv_wr rwr{};
    rwr.wr_id = id;
    rwr.sg_list = &sge;
    rwr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (int rc = ibv_post_recv(qp_.get(), &rwr, &bad); rc != 0) {
        give_back(std::move(*b));
        return unexpected(verbs_error("ibv_post_recv on " + where(), rc).message());
    }
    pending_.emplace(id, Pending{.user_wr_id = wr.wr_id, .receive = true, .buffer = std::move(*b)});
    ++receives_posted_;
    return {};
}

std::vector<rc::Completion> VerbsRcQp::poll() {
    std::vector<rc::Completion> out;
    ibv_wc wcs[kPollBatch];
    int n = 0;
    do {
        n = ibv_poll_cq(cq_.get(), kPollBatch, wcs);
        for (int i = 0; i < n; ++i) {
            const ibv_wc& wc = wcs[i];
            auto it = pending_.find(wc.wr_id);
            if (it == pending_.end()) continue;  // not ours: cannot happen, nothing to report it to
            Pending p = std::move(it->second);
            pending_.erase(it);
            rc::Completion c;
            c.wr_id = p.user_wr_id;
            c.receive = p.receive;
            c.status = rc_status_from_verbs(wc.status);
            (p.receive ? receives_posted_ : sends_posted_)--;
            if (c.status != rc::Status::success) {
                // Verbs moved the QP to ERR; what follows completes flushed.
                state_ = rc::QpState::err;
            } else if (p.receive) {
                c.byte_len = wc.byte_len;
                if (wc.wc_flags & IBV_WC_WITH_IMM) c.imm = be32_to_host(wc.imm_data);
                // A WRITE with immediate data puts nothing in the buffer.
                if (wc.opcode == IBV_WC_RECV && p.buffer)
                    c.data.assign(p.buffer->memory.get(), p.buffer->memory.get() + std::min<std::size_t>(wc.byte_len, p.buffer->size));
                ++counters_.messages_received;
            } else {
                ++counters_.messages_sent;
            }
            give_back(std::move(p.buffer));
            out.push_back(std::move(c));
        }
    } while (n == kPollBatch);
    return out;
}

}  // namespace ipoibd::transport::verbs
