// The fake libibverbs described in fake_verbs.h. The entry points at the
// bottom have the exact C signatures of <infiniband/verbs.h>, so the
// compiler checks them against the real declarations.
#include "tests/hw/fake_verbs.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>

#include "transport/wire/headers.h"

namespace fake_verbs {

namespace ib = ipoibd::ib;
using ipoibd::store_be16;
using ipoibd::store_be64;

namespace {

using MgidKey = std::pair<std::array<std::uint8_t, 16>, std::uint16_t>;

struct Context {
    ibv_context ctx{};
    int async_pipe[2]{-1, -1};
    std::deque<ibv_async_event> async_queue;
};
struct Channel {
    ibv_comp_channel ch{};
    int pipe[2]{-1, -1};
    std::deque<ibv_cq*> events;
};
struct Qp;
struct Ah {
    ibv_ah ah{};
    ibv_ah_attr attr{};
    int in_flight = 0;  // sends whose completion has not been polled
};
struct CqEntry {
    ibv_wc wc{};
    Ah* ah = nullptr;  // sends: released when polled
    Qp* qp = nullptr;
};
struct Cq {
    ibv_cq cq{};
    std::deque<CqEntry> entries;
    bool armed = false;
    std::uint64_t got = 0, acked = 0;
};
struct RecvEntry {
    std::uint64_t wr_id = 0;
    ibv_sge sge{};
};
struct Qp {
    ibv_qp qp{};
    // RC: the connection (RTR's destination), the remote access INIT allowed
    std::uint32_t dest_qpn = 0;
    std::uint16_t dlid = 0;
    unsigned access = 0;
    std::uint32_t qkey = 0;
    std::uint16_t pkey_index = 0;  // UD: set at INIT
    std::uint32_t max_send = 0, max_recv = 0;
    std::uint32_t sends_in_flight = 0;
    std::deque<RecvEntry> rq;
    std::set<MgidKey> mcast;
};
struct Mr {
    ibv_mr mr{};
    unsigned access = 0;
};

struct World {
    Config config;
    Stats stats;
    std::vector<std::unique_ptr<ibv_device>> devices;
    std::map<ibv_context*, std::unique_ptr<Context>> contexts;
    std::map<ibv_pd*, std::unique_ptr<ibv_pd>> pds;
    std::map<ibv_comp_channel*, std::unique_ptr<Channel>> channels;
    std::map<ibv_cq*, std::unique_ptr<Cq>> cqs;
    std::map<ibv_qp*, std::unique_ptr<Qp>> qps;
    std::map<ibv_mr*, std::unique_ptr<Mr>> mrs;
    std::map<ibv_ah*, std::unique_ptr<Ah>> ahs;
    std::set<std::uint32_t> qpns;
    std::deque<CqEntry> deferred;  // UD send completions held back (Config::defer_send_completions)
    std::uint32_t next_qpn = 0x100;
    std::uint32_t next_key = 0x1000;
};

World& world() {
    static World w;
    return w;
}

// Every entry point holds it: a daemon's data threads post sends on their
// own QPs while its loop uses the port's (libibverbs is thread-safe).
// Recursive: entry points call one another (ibv_reg_mr, modify_rc).
std::recursive_mutex& world_mutex() {
    static std::recursive_mutex m;
    return m;
}
using Guard = std::lock_guard<std::recursive_mutex>;

void violation(std::string what) { world().stats.violations.push_back(std::move(what)); }

template <class Map, class Key>
auto* find_in(Map& map, Key* key) {
    auto it = map.find(key);
    return it == map.end() ? nullptr : it->second.get();
}

// For objects the caller must know: an unknown one is a bug in the test.
template <class Map, class Key>
auto& get(Map& map, Key* key) {
    auto it = map.find(key);
    if (it == map.end()) {
        std::fprintf(stderr, "fake_verbs: unknown object %p\n", static_cast<const void*>(key));
        std::abort();
    }
    return *it->second;
}

ib::Gid port_gid() {
    ib::Gid g{};
    store_be64(g.data(), 0xFE80000000000000ULL);
    store_be64(g.data() + 8, world().config.port_guid);
    return g;
}

void signal_fd(int fd) {
    const char x = 'x';
    if (::write(fd, &x, 1) != 1) violation("pipe write failed");
}

bool consume_fd(int fd) {
    char x;
    return ::read(fd, &x, 1) == 1;  // errno EAGAIN when empty and non-blocking
}

void push_entry(ibv_cq* cq_ptr, const CqEntry& e) {
    Cq* cq = find_in(world().cqs, cq_ptr);
    if (cq == nullptr) return violation("completion for an unknown CQ");
    if (cq->entries.size() >= static_cast<std::size_t>(cq->cq.cqe)) return violation("CQ overrun");
    cq->entries.push_back(e);
    if (cq->armed && cq->cq.channel != nullptr) {
        cq->armed = false;
        Channel* ch = &get(world().channels, cq->cq.channel);
        ch->events.push_back(cq_ptr);
        signal_fd(ch->pipe[1]);
    }
}

Mr* find_mr(const ibv_sge& sge) {
    for (auto& [ptr, mr] : world().mrs) {
        const auto base = reinterpret_cast<std::uintptr_t>(mr->mr.addr);
        if (mr->mr.lkey == sge.lkey && sge.addr >= base && sge.addr + sge.length <= base + mr->mr.length)
            return mr.get();
    }
    return nullptr;
}

void receive_one(Qp& dst, const Qp& src, const Ah& ah, const ibv_send_wr& wr, const std::vector<std::uint8_t>& payload,
                 std::uint32_t qkey) {
    World& w = world();
    if (dst.qkey != qkey) {
        ++w.stats.dropped_qkey;
        return;
    }
    // IBA 10.9.3: the packet's P_Key (the sender's, at its QP's index) must
    // match the receiver's: same partition, not both limited members.
    const std::uint16_t sp = w.config.pkeys.at(src.pkey_index), dp = w.config.pkeys.at(dst.pkey_index);
    if ((sp & 0x7FFF) == 0 || (sp & 0x7FFF) != (dp & 0x7FFF) || ((sp | dp) & 0x8000) == 0) {
        ++w.stats.dropped_pkey;
        return;
    }
    w.stats.last_pkey = sp;
    if (dst.rq.empty()) {
        ++w.stats.dropped_no_receive;
        return;
    }
    const RecvEntry r = dst.rq.front();
    dst.rq.pop_front();
    CqEntry e;
    e.wc.wr_id = r.wr_id;
    e.wc.opcode = IBV_WC_RECV;
    e.wc.qp_num = dst.qp.qp_num;
    if (find_mr(r.sge) == nullptr) {
        e.wc.status = IBV_WC_LOC_PROT_ERR;
    } else if (ib::Grh::size + payload.size() > r.sge.length) {
        e.wc.status = IBV_WC_LOC_LEN_ERR;
    } else {
        auto* buf = reinterpret_cast<std::uint8_t*>(r.sge.addr);
        if (ah.attr.is_global) {
            ib::Grh grh;
            grh.tclass = ah.attr.grh.traffic_class;
            grh.flow_label = ah.attr.grh.flow_label;
            grh.hop_limit = ah.attr.grh.hop_limit;
            grh.pay_len = static_cast<std::uint16_t>(payload.size() + 12 + 8 + 4);  // BTH, DETH, ICRC
            grh.sgid = port_gid();
            std::memcpy(grh.dgid.data(), ah.attr.grh.dgid.raw, 16);
            grh.write_to(buf);
            e.wc.wc_flags |= IBV_WC_GRH;
        }
        if (!payload.empty()) std::memcpy(buf + ib::Grh::size, payload.data(), payload.size());
        e.wc.status = IBV_WC_SUCCESS;
        e.wc.byte_len = static_cast<std::uint32_t>(ib::Grh::size + payload.size());
        e.wc.src_qp = src.qp.qp_num;
        e.wc.slid = static_cast<std::uint16_t>(w.config.lid | ah.attr.src_path_bits);
        e.wc.sl = ah.attr.sl;
        e.wc.pkey_index = 0xBEEF;  // verbs defines it for the GSI QP only
        if (wr.opcode == IBV_WR_SEND_WITH_IMM) {
            e.wc.wc_flags |= IBV_WC_WITH_IMM;
            e.wc.imm_data = wr.imm_data;
        }
    }
    push_entry(dst.qp.recv_cq, e);
}

void deliver(const Qp& src, const Ah& ah, const ibv_send_wr& wr, const std::vector<std::uint8_t>& payload) {
    World& w = world();
    std::uint32_t qkey = wr.wr.ud.remote_qkey;
    if (qkey & 0x80000000u) qkey = src.qkey;  // controlled Q_Key: the QP's own
    const std::uint16_t dlid = ah.attr.dlid;
    int delivered = 0;
    if (dlid >= 0xC000 && dlid != 0xFFFF) {
        MgidKey group;
        std::memcpy(group.first.data(), ah.attr.grh.dgid.raw, 16);
        group.second = dlid;
        if (ah.attr.is_global && wr.wr.ud.remote_qpn == 0xFFFFFF) {
            for (auto& [ptr, qp] : w.qps) {
                if (qp->mcast.contains(group)) {
                    receive_one(*qp, src, ah, wr, payload, qkey);
                    ++delivered;
                }
            }
        }
    } else if (dlid == w.config.lid) {
        for (auto& [ptr, qp] : w.qps) {
            if (qp->qp.qp_type == IBV_QPT_UD && qp->qp.qp_num == wr.wr.ud.remote_qpn && qp->qp.state >= IBV_QPS_RTR) {
                receive_one(*qp, src, ah, wr, payload, qkey);
                ++delivered;
            }
        }
    }
    if (delivered == 0) ++w.stats.dropped_no_target;
}

// --- the ibv_context ops the inline verbs call through ---

int fake_poll_cq(ibv_cq* cq_ptr, int num_entries, ibv_wc* wc) {
    const Guard guard(world_mutex());
    Cq* cq = find_in(world().cqs, cq_ptr);
    if (cq == nullptr) return -1;
    int n = 0;
    while (n < num_entries && !cq->entries.empty()) {
        const CqEntry e = cq->entries.front();
        cq->entries.pop_front();
        if (e.ah != nullptr) --e.ah->in_flight;
        if (e.qp != nullptr) --e.qp->sends_in_flight;
        wc[n++] = e.wc;
    }
    return n;
}

int fake_req_notify_cq(ibv_cq* cq_ptr, int) {
    const Guard guard(world_mutex());
    Cq* cq = find_in(world().cqs, cq_ptr);
    if (cq == nullptr) return EINVAL;
    cq->armed = true;
    return 0;
}

// --- RC: the connected QP on this device, executed at once ---

// Verbs moves a QP to ERR on an error completion: its posted receives
// complete flushed.
void rc_to_error(Qp& qp) {
    qp.qp.state = IBV_QPS_ERR;
    while (!qp.rq.empty()) {
        CqEntry e;
        e.wc.wr_id = qp.rq.front().wr_id;
        e.wc.qp_num = qp.qp.qp_num;
        e.wc.status = IBV_WC_WR_FLUSH_ERR;
        qp.rq.pop_front();
        push_entry(qp.qp.recv_cq, e);
    }
}

Qp* rc_peer(const Qp& qp) {
    World& w = world();
    if (qp.dlid != w.config.lid) return nullptr;
    for (auto& [ptr, other] : w.qps)
        if (other->qp.qp_type == IBV_QPT_RC && other->qp.qp_num == qp.dest_qpn && other->dest_qpn == qp.qp.qp_num &&
            (other->qp.state == IBV_QPS_RTR || other->qp.state == IBV_QPS_RTS))
            return other.get();
    return nullptr;
}

std::uint8_t* remote_memory(std::uint32_t rkey, std::uint64_t addr, std::size_t len, unsigned access) {
    for (auto& [ptr, mr] : world().mrs) {
        const auto base = reinterpret_cast<std::uintptr_t>(mr->mr.addr);
        if (mr->mr.rkey == rkey && addr >= base && addr + len <= base + mr->mr.length && (mr->access & access) == access)
            return reinterpret_cast<std::uint8_t*>(addr);
    }
    return nullptr;
}

// A receive WQE of `peer` for an incoming message; nullopt: RNR (this
// model's RNR retry always runs out at once).
std::optional<RecvEntry> take_receive(Qp& peer) {
    if (peer.rq.empty()) return std::nullopt;
    RecvEntry r = peer.rq.front();
    peer.rq.pop_front();
    return r;
}

ibv_wc_status execute_rc(Qp& qp, const ibv_send_wr& wr) {
    World& w = world();
    const ibv_sge* sge = wr.num_sge == 1 ? &wr.sg_list[0] : nullptr;
    const std::size_t len = sge ? sge->length : 0;
    if (sge != nullptr) {
        Mr* local = find_mr(*sge);
        if (local == nullptr) return IBV_WC_LOC_PROT_ERR;
        if (wr.opcode == IBV_WR_RDMA_READ && !(local->access & IBV_ACCESS_LOCAL_WRITE)) return IBV_WC_LOC_PROT_ERR;
    }
    Qp* peer = rc_peer(qp);
    if (peer == nullptr) {
        ++w.stats.rc_retry_exceeded;
        return IBV_WC_RETRY_EXC_ERR;  // nobody answers: the retries run out
    }
    const auto* src = sge ? reinterpret_cast<const std::uint8_t*>(sge->addr) : nullptr;
    const bool imm = wr.opcode == IBV_WR_SEND_WITH_IMM || wr.opcode == IBV_WR_RDMA_WRITE_WITH_IMM;
    CqEntry r;
    r.wc.qp_num = peer->qp.qp_num;
    r.wc.status = IBV_WC_SUCCESS;
    r.wc.src_qp = qp.qp.qp_num;
    r.wc.slid = w.config.lid;
    if (imm) {
        r.wc.wc_flags |= IBV_WC_WITH_IMM;
        r.wc.imm_data = wr.imm_data;
    }
    switch (wr.opcode) {
        case IBV_WR_SEND:
        case IBV_WR_SEND_WITH_IMM: {
            auto recv = take_receive(*peer);
            if (!recv) {
                ++w.stats.rc_rnr;
                return IBV_WC_RNR_RETRY_EXC_ERR;
            }
            r.wc.wr_id = recv->wr_id;
            r.wc.opcode = IBV_WC_RECV;
            if (len > recv->sge.length) {
                r.wc.status = IBV_WC_LOC_LEN_ERR;
                push_entry(peer->qp.recv_cq, r);
                rc_to_error(*peer);
                return IBV_WC_REM_INV_REQ_ERR;
            }
            if (len) std::memcpy(reinterpret_cast<std::uint8_t*>(recv->sge.addr), src, len);
            r.wc.byte_len = static_cast<std::uint32_t>(len);
            push_entry(peer->qp.recv_cq, r);
            return IBV_WC_SUCCESS;
        }
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM: {
            std::uint8_t* dst = len ? remote_memory(wr.wr.rdma.rkey, wr.wr.rdma.remote_addr, len, IBV_ACCESS_REMOTE_WRITE)
                                    : nullptr;
            if ((len && dst == nullptr) || !(peer->access & IBV_ACCESS_REMOTE_WRITE)) {
                rc_to_error(*peer);
                return IBV_WC_REM_ACCESS_ERR;
            }
            std::optional<RecvEntry> recv;
            if (imm && !(recv = take_receive(*peer))) {
                ++w.stats.rc_rnr;
                return IBV_WC_RNR_RETRY_EXC_ERR;
            }
            if (len) std::memcpy(dst, src, len);
            if (recv) {
                r.wc.wr_id = recv->wr_id;
                r.wc.opcode = IBV_WC_RECV_RDMA_WITH_IMM;
                r.wc.byte_len = static_cast<std::uint32_t>(len);
                push_entry(peer->qp.recv_cq, r);
            }
            return IBV_WC_SUCCESS;
        }
        case IBV_WR_RDMA_READ: {
            const std::uint8_t* from =
                len ? remote_memory(wr.wr.rdma.rkey, wr.wr.rdma.remote_addr, len, IBV_ACCESS_REMOTE_READ) : nullptr;
            if ((len && from == nullptr) || !(peer->access & IBV_ACCESS_REMOTE_READ)) {
                rc_to_error(*peer);
                return IBV_WC_REM_ACCESS_ERR;
            }
            if (len) std::memcpy(reinterpret_cast<std::uint8_t*>(sge->addr), from, len);
            return IBV_WC_SUCCESS;
        }
        default: return IBV_WC_LOC_QP_OP_ERR;
    }
}

ibv_wc_opcode wc_opcode_of(ibv_wr_opcode op) {
    switch (op) {
        case IBV_WR_RDMA_WRITE:
        case IBV_WR_RDMA_WRITE_WITH_IMM: return IBV_WC_RDMA_WRITE;
        case IBV_WR_RDMA_READ: return IBV_WC_RDMA_READ;
        default: return IBV_WC_SEND;
    }
}

int fake_post_send_rc(Qp* qp, ibv_send_wr* wr, ibv_send_wr** bad) {
    for (; wr != nullptr; wr = wr->next) {
        int err = 0;
        const bool known = wr->opcode == IBV_WR_SEND || wr->opcode == IBV_WR_SEND_WITH_IMM ||
                           wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM ||
                           wr->opcode == IBV_WR_RDMA_READ;
        if (qp->qp.state != IBV_QPS_RTS && qp->qp.state != IBV_QPS_ERR) err = EINVAL;
        else if (qp->sends_in_flight >= qp->max_send) err = ENOMEM;
        else if (!known || wr->num_sge > 1) err = EINVAL;
        if (err != 0) {
            *bad = wr;
            return err;
        }
        CqEntry e;
        e.wc.wr_id = wr->wr_id;
        e.wc.opcode = wc_opcode_of(wr->opcode);
        e.wc.qp_num = qp->qp.qp_num;
        // Posted to a QP in ERR: flushed, as verbs does.
        e.wc.status = qp->qp.state == IBV_QPS_ERR ? IBV_WC_WR_FLUSH_ERR : execute_rc(*qp, *wr);
        if (e.wc.status != IBV_WC_SUCCESS) rc_to_error(*qp);
        e.qp = qp;
        ++qp->sends_in_flight;
        push_entry(qp->qp.send_cq, e);
    }
    return 0;
}

int fake_post_send(ibv_qp* qp_ptr, ibv_send_wr* wr, ibv_send_wr** bad) {
    const Guard guard(world_mutex());
    World& w = world();
    Qp* qp = find_in(w.qps, qp_ptr);
    if (qp == nullptr) return EINVAL;
    if (qp->qp.qp_type == IBV_QPT_RC) return fake_post_send_rc(qp, wr, bad);
    for (; wr != nullptr; wr = wr->next) {
        Ah* ah = find_in(w.ahs, wr->wr.ud.ah);
        int err = 0;
        if (qp->qp.state != IBV_QPS_RTS && qp->qp.state != IBV_QPS_SQE) err = EINVAL;
        else if (qp->sends_in_flight >= qp->max_send) err = ENOMEM;
        else if ((wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM) || wr->num_sge > 1) err = EINVAL;
        else if (ah == nullptr) err = EINVAL;
        if (err != 0) {
            *bad = wr;
            return err;
        }
        CqEntry e;
        e.wc.wr_id = wr->wr_id;
        e.wc.opcode = IBV_WC_SEND;
        e.wc.qp_num = qp->qp.qp_num;
        e.wc.status = IBV_WC_SUCCESS;
        std::vector<std::uint8_t> payload;
        if (wr->num_sge == 1) {
            if (find_mr(wr->sg_list[0]) == nullptr) {
                e.wc.status = IBV_WC_LOC_PROT_ERR;
                violation("send sge outside any MR");
            } else {
                const auto* p = reinterpret_cast<const std::uint8_t*>(wr->sg_list[0].addr);
                payload.assign(p, p + wr->sg_list[0].length);
            }
        }
        if (payload.size() > (128u << w.config.active_mtu)) e.wc.status = IBV_WC_LOC_LEN_ERR;
        if (e.wc.status == IBV_WC_SUCCESS && w.config.ud_send_status != IBV_WC_SUCCESS)
            e.wc.status = w.config.ud_send_status;
        // A UD send error moves the QP to SQE; there, sends are flushed.
        if (qp->qp.state == IBV_QPS_SQE) e.wc.status = IBV_WC_WR_FLUSH_ERR;
        else if (e.wc.status != IBV_WC_SUCCESS) qp->qp.state = IBV_QPS_SQE;
        if (e.wc.status == IBV_WC_SUCCESS) deliver(*qp, *ah, *wr, payload);
        e.ah = ah;
        e.qp = qp;
        ++ah->in_flight;
        ++qp->sends_in_flight;
        if (w.config.defer_send_completions)
            w.deferred.push_back(e);
        else
            push_entry(qp->qp.send_cq, e);
    }
    return 0;
}

int fake_post_recv(ibv_qp* qp_ptr, ibv_recv_wr* wr, ibv_recv_wr** bad) {
    const Guard guard(world_mutex());
    Qp* qp = find_in(world().qps, qp_ptr);
    if (qp == nullptr) return EINVAL;
    for (; wr != nullptr; wr = wr->next) {
        int err = 0;
        if (qp->qp.state == IBV_QPS_RESET) err = EINVAL;
        else if (qp->rq.size() >= qp->max_recv) err = ENOMEM;
        else if (wr->num_sge != 1) err = EINVAL;
        if (err != 0) {
            *bad = wr;
            return err;
        }
        if (find_mr(wr->sg_list[0]) == nullptr) violation("receive sge outside any MR");
        if (qp->qp.state == IBV_QPS_ERR) {  // flushed at once
            CqEntry e;
            e.wc.wr_id = wr->wr_id;
            e.wc.qp_num = qp->qp.qp_num;
            e.wc.status = IBV_WC_WR_FLUSH_ERR;
            push_entry(qp->qp.recv_cq, e);
            continue;
        }
        qp->rq.push_back(RecvEntry{wr->wr_id, wr->sg_list[0]});
    }
    return 0;
}

bool is_port_event(ibv_event_type t) {
    switch (t) {
        case IBV_EVENT_PORT_ACTIVE:
        case IBV_EVENT_PORT_ERR:
        case IBV_EVENT_LID_CHANGE:
        case IBV_EVENT_PKEY_CHANGE:
        case IBV_EVENT_SM_CHANGE:
        case IBV_EVENT_CLIENT_REREGISTER:
        case IBV_EVENT_GID_CHANGE: return true;
        default: return false;
    }
}

}  // namespace

void reset(const Config& config) {
    const Guard guard(world_mutex());
    World& w = world();
    const Stats& s = w.stats;
    if (s.live_contexts || s.live_pds || s.live_channels || s.live_cqs || s.live_qps || s.live_mrs || s.live_ahs ||
        s.live_device_lists)
        violation("reset with live objects");
    w.config = config;
    w.stats = Stats{};
    w.qpns.clear();
    w.deferred.clear();
    w.next_qpn = 0x100;
    w.devices.clear();
    for (int i = 0; i < config.devices; ++i) {
        auto d = std::make_unique<ibv_device>();
        std::snprintf(d->name, sizeof d->name, "fake_ib%d", i);
        d->node_type = IBV_NODE_CA;
        d->transport_type = IBV_TRANSPORT_IB;
        w.devices.push_back(std::move(d));
    }
}

Config& config() { return world().config; }

void complete_sends() {
    const Guard guard(world_mutex());
    World& w = world();
    while (!w.deferred.empty()) {
        const CqEntry e = w.deferred.front();
        w.deferred.pop_front();
        push_entry(e.qp->qp.send_cq, e);
    }
}
Stats stats() {
    const Guard guard(world_mutex());
    return world().stats;
}

void raise_async_event(ibv_event_type type, std::uint8_t port) {
    const Guard guard(world_mutex());
    for (auto& [ptr, c] : world().contexts) {
        ibv_async_event e{};
        e.event_type = type;
        if (is_port_event(type)) e.element.port_num = port;
        else if (type != IBV_EVENT_DEVICE_FATAL && !world().qps.empty()) e.element.qp = world().qps.begin()->first;
        c->async_queue.push_back(e);
        signal_fd(c->async_pipe[1]);
    }
}

}  // namespace fake_verbs

// ---------------------------------------------------------------------------
// The libibverbs entry points

using namespace fake_verbs;

extern "C" {

ibv_device**(ibv_get_device_list)(int* num_devices) {
    const Guard guard(world_mutex());
    World& w = world();
    if (!w.config.kernel_support) {
        if (num_devices != nullptr) *num_devices = 0;
        errno = ENOSYS;
        return nullptr;
    }
    auto** list = new ibv_device*[w.devices.size() + 1];
    for (std::size_t i = 0; i < w.devices.size(); ++i) list[i] = w.devices[i].get();
    list[w.devices.size()] = nullptr;
    if (num_devices != nullptr) *num_devices = static_cast<int>(w.devices.size());
    ++w.stats.live_device_lists;
    return list;
}

void ibv_free_device_list(ibv_device** list) {
    const Guard guard(world_mutex());
    delete[] list;
    --world().stats.live_device_lists;
}

const char* ibv_get_device_name(ibv_device* device) { return device->name; }

ibv_context* ibv_open_device(ibv_device* device) {
    const Guard guard(world_mutex());
    auto c = std::make_unique<Context>();
    c->ctx.device = device;
    c->ctx.ops.poll_cq = fake_poll_cq;
    c->ctx.ops.req_notify_cq = fake_req_notify_cq;
    c->ctx.ops.post_send = fake_post_send;
    c->ctx.ops.post_recv = fake_post_recv;
    c->ctx.cmd_fd = -1;
    c->ctx.num_comp_vectors = 1;
    if (::pipe2(c->async_pipe, O_CLOEXEC) != 0) return nullptr;
    c->ctx.async_fd = c->async_pipe[0];
    ibv_context* ptr = &c->ctx;
    world().contexts.emplace(ptr, std::move(c));
    ++world().stats.live_contexts;
    return ptr;
}

int ibv_close_device(ibv_context* context) {
    const Guard guard(world_mutex());
    World& w = world();
    for (auto& [p, pd] : w.pds)
        if (pd->context == context) return violation("ibv_close_device with a PD alive"), EBUSY;
    for (auto& [p, ch] : w.channels)
        if (ch->ch.context == context) return violation("ibv_close_device with a completion channel alive"), EBUSY;
    Context* c = &get(w.contexts, context);
    ::close(c->async_pipe[0]);
    ::close(c->async_pipe[1]);
    w.contexts.erase(context);
    --w.stats.live_contexts;
    return 0;
}

int ibv_query_device(ibv_context*, ibv_device_attr* attr) {
    const Guard guard(world_mutex());
    const Config& c = world().config;
    *attr = ibv_device_attr{};
    std::uint8_t guid[8];
    store_be64(guid, c.node_guid);
    std::memcpy(&attr->node_guid, guid, 8);
    attr->phys_port_cnt = static_cast<std::uint8_t>(c.ports);
    attr->max_qp_wr = 16384;
    attr->max_cqe = 65535;
    attr->max_qp = 1024;
    attr->max_cq = 1024;
    attr->max_ah = 65536;
    attr->max_qp_rd_atom = 16;
    attr->max_qp_init_rd_atom = 16;
    return 0;
}

// Parenthesised: verbs.h makes ibv_query_port and ibv_reg_mr function-like macros.
int(ibv_query_port)(ibv_context*, std::uint8_t port_num, _compat_ibv_port_attr* compat) {
    const Guard guard(world_mutex());
    const Config& c = world().config;
    if (port_num == 0 || port_num > c.ports) return EINVAL;
    auto* a = reinterpret_cast<ibv_port_attr*>(compat);
    a->state = c.state;
    a->max_mtu = c.max_mtu;
    a->active_mtu = c.active_mtu;
    a->gid_tbl_len = 1;
    a->pkey_tbl_len = static_cast<std::uint16_t>(c.pkeys.size());
    a->lid = c.lid;
    a->sm_lid = c.sm_lid;
    a->lmc = 0;
    a->sm_sl = 0;
    a->link_layer = c.link_layer;
    return 0;
}

int ibv_query_gid(ibv_context*, std::uint8_t, int index, ibv_gid* gid) {
    const Guard guard(world_mutex());
    if (index != 0) {
        errno = EINVAL;
        return -1;
    }
    const ib::Gid g = port_gid();
    std::memcpy(gid->raw, g.data(), 16);
    return 0;
}

int ibv_query_pkey(ibv_context*, std::uint8_t, int index, __be16* pkey) {
    const Guard guard(world_mutex());
    const auto& table = world().config.pkeys;
    if (index < 0 || static_cast<std::size_t>(index) >= table.size()) {
        errno = EINVAL;
        return -1;
    }
    std::uint8_t b[2];
    store_be16(b, table[static_cast<std::size_t>(index)]);
    std::memcpy(pkey, b, 2);
    return 0;
}

ibv_pd* ibv_alloc_pd(ibv_context* context) {
    const Guard guard(world_mutex());
    auto pd = std::make_unique<ibv_pd>();
    pd->context = context;
    ibv_pd* ptr = pd.get();
    world().pds.emplace(ptr, std::move(pd));
    ++world().stats.live_pds;
    return ptr;
}

int ibv_dealloc_pd(ibv_pd* pd) {
    const Guard guard(world_mutex());
    World& w = world();
    for (auto& [p, mr] : w.mrs)
        if (mr->mr.pd == pd) return violation("ibv_dealloc_pd with an MR alive"), EBUSY;
    for (auto& [p, qp] : w.qps)
        if (qp->qp.pd == pd) return violation("ibv_dealloc_pd with a QP alive"), EBUSY;
    for (auto& [p, ah] : w.ahs)
        if (ah->ah.pd == pd) return violation("ibv_dealloc_pd with an AH alive"), EBUSY;
    w.pds.erase(pd);
    --w.stats.live_pds;
    return 0;
}

ibv_comp_channel* ibv_create_comp_channel(ibv_context* context) {
    const Guard guard(world_mutex());
    auto ch = std::make_unique<Channel>();
    if (::pipe2(ch->pipe, O_CLOEXEC) != 0) return nullptr;
    ch->ch.context = context;
    ch->ch.fd = ch->pipe[0];
    ibv_comp_channel* ptr = &ch->ch;
    world().channels.emplace(ptr, std::move(ch));
    ++world().stats.live_channels;
    return ptr;
}

int ibv_destroy_comp_channel(ibv_comp_channel* channel) {
    const Guard guard(world_mutex());
    World& w = world();
    for (auto& [p, cq] : w.cqs)
        if (cq->cq.channel == channel) return violation("ibv_destroy_comp_channel with a CQ alive"), EBUSY;
    Channel* ch = &get(w.channels, channel);
    ::close(ch->pipe[0]);
    ::close(ch->pipe[1]);
    w.channels.erase(channel);
    --w.stats.live_channels;
    return 0;
}

ibv_cq* ibv_create_cq(ibv_context* context, int cqe, void* cq_context, ibv_comp_channel* channel, int) {
    const Guard guard(world_mutex());
    if (cqe < 1 || cqe > 65535) {
        errno = EINVAL;
        return nullptr;
    }
    auto cq = std::make_unique<Cq>();
    cq->cq.context = context;
    cq->cq.channel = channel;
    cq->cq.cq_context = cq_context;
    cq->cq.cqe = cqe;
    ibv_cq* ptr = &cq->cq;
    world().cqs.emplace(ptr, std::move(cq));
    ++world().stats.live_cqs;
    return ptr;
}

int ibv_destroy_cq(ibv_cq* cq_ptr) {
    const Guard guard(world_mutex());
    World& w = world();
    for (auto& [p, qp] : w.qps)
        if (qp->qp.send_cq == cq_ptr || qp->qp.recv_cq == cq_ptr) return violation("ibv_destroy_cq with a QP alive"), EBUSY;
    Cq* cq = &get(w.cqs, cq_ptr);
    if (cq->got != cq->acked) violation("ibv_destroy_cq with unacked events (it would wait forever)");
    if (Channel* ch = cq->cq.channel ? find_in(w.channels, cq->cq.channel) : nullptr) {
        // The kernel drops the destroyed CQ's queued events.
        for (auto it = ch->events.begin(); it != ch->events.end();) {
            if (*it == cq_ptr) {
                it = ch->events.erase(it);
                consume_fd(ch->pipe[0]);
            } else {
                ++it;
            }
        }
    }
    w.cqs.erase(cq_ptr);
    --w.stats.live_cqs;
    return 0;
}

int ibv_get_cq_event(ibv_comp_channel* channel, ibv_cq** cq, void** cq_context) {
    const Guard guard(world_mutex());
    World& w = world();
    Channel* ch = &get(w.channels, channel);
    if (!consume_fd(ch->pipe[0])) return -1;
    ibv_cq* c = ch->events.front();
    ch->events.pop_front();
    *cq = c;
    *cq_context = c->cq_context;
    ++get(w.cqs, c).got;
    ++w.stats.cq_events_got;
    return 0;
}

void ibv_ack_cq_events(ibv_cq* cq, unsigned int nevents) {
    const Guard guard(world_mutex());
    get(world().cqs, cq).acked += nevents;
    world().stats.cq_events_acked += nevents;
}

ibv_qp* ibv_create_qp(ibv_pd* pd, ibv_qp_init_attr* init) {
    const Guard guard(world_mutex());
    World& w = world();
    if ((init->qp_type != IBV_QPT_UD && init->qp_type != IBV_QPT_RC) || init->cap.max_send_wr == 0 || init->cap.max_recv_wr == 0 ||
        init->cap.max_send_wr > 16384 || init->cap.max_recv_wr > 16384 || !find_in(w.cqs, init->send_cq) ||
        !find_in(w.cqs, init->recv_cq)) {
        errno = EINVAL;
        return nullptr;
    }
    if (w.config.fail_create_qp > 0) {
        --w.config.fail_create_qp;
        errno = ENOMEM;
        return nullptr;
    }
    auto qp = std::make_unique<Qp>();
    std::uint32_t qpn = w.config.reuse_qpns ? 0x100 : w.next_qpn++;
    while (w.qpns.contains(qpn)) ++qpn;
    w.qpns.insert(qpn);
    qp->qp.context = pd->context;
    qp->qp.pd = pd;
    qp->qp.send_cq = init->send_cq;
    qp->qp.recv_cq = init->recv_cq;
    qp->qp.qp_num = qpn;
    qp->qp.state = IBV_QPS_RESET;
    qp->qp.qp_type = init->qp_type;
    qp->max_send = init->cap.max_send_wr;
    qp->max_recv = init->cap.max_recv_wr;
    ibv_qp* ptr = &qp->qp;
    w.qps.emplace(ptr, std::move(qp));
    ++w.stats.live_qps;
    ++w.stats.qps_created;
    return ptr;
}

// RC: RESET -> INIT (exactly STATE|PKEY_INDEX|PORT|ACCESS_FLAGS) -> RTR
// (STATE|AV|PATH_MTU|DEST_QPN|RQ_PSN|MAX_DEST_RD_ATOMIC|MIN_RNR_TIMER) ->
// RTS (STATE|SQ_PSN|TIMEOUT|RETRY_CNT|RNR_RETRY|MAX_QP_RD_ATOMIC), as
// ibv_rc_pingpong does; any state -> ERR (STATE).
int modify_rc(Qp* qp, const ibv_qp_attr* attr, int mask) {
    const Guard guard(world_mutex());
    World& w = world();
    if (attr->qp_state == IBV_QPS_ERR && mask == IBV_QP_STATE) {
        rc_to_error(*qp);
        return 0;
    }
    switch (qp->qp.state) {
        case IBV_QPS_RESET:
            if (attr->qp_state != IBV_QPS_INIT ||
                mask != (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
                return EINVAL;
            if (attr->port_num == 0 || attr->port_num > w.config.ports || attr->pkey_index >= w.config.pkeys.size())
                return EINVAL;
            qp->access = attr->qp_access_flags;
            break;
        case IBV_QPS_INIT:
            if (attr->qp_state != IBV_QPS_RTR ||
                mask != (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                         IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
                return EINVAL;
            if (attr->path_mtu > w.config.active_mtu || attr->ah_attr.dlid == 0 || attr->ah_attr.dlid >= 0xC000 ||
                attr->dest_qp_num > 0xFFFFFF || attr->rq_psn > 0xFFFFFF || attr->max_dest_rd_atomic > 16 ||
                attr->min_rnr_timer > 31)
                return EINVAL;
            qp->dest_qpn = attr->dest_qp_num;
            qp->dlid = attr->ah_attr.dlid;
            break;
        case IBV_QPS_RTR:
            if (attr->qp_state != IBV_QPS_RTS ||
                mask != (IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                         IBV_QP_MAX_QP_RD_ATOMIC))
                return EINVAL;
            if (attr->sq_psn > 0xFFFFFF || attr->retry_cnt > 7 || attr->rnr_retry > 7 || attr->timeout > 31 ||
                attr->max_rd_atomic > 16)
                return EINVAL;
            break;
        default: return EINVAL;
    }
    qp->qp.state = attr->qp_state;
    return 0;
}

int ibv_modify_qp(ibv_qp* qp_ptr, ibv_qp_attr* attr, int mask) {
    const Guard guard(world_mutex());
    World& w = world();
    Qp* qp = &get(w.qps, qp_ptr);
    if (qp->qp.qp_type == IBV_QPT_RC) return modify_rc(qp, attr, mask);
    switch (qp->qp.state) {
        case IBV_QPS_RESET:
            if (attr->qp_state != IBV_QPS_INIT || mask != (IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
                return EINVAL;
            if (attr->port_num == 0 || attr->port_num > w.config.ports || attr->pkey_index >= w.config.pkeys.size())
                return EINVAL;
            if (attr->qkey & 0x80000000u) return EPERM;  // controlled Q_Key, no CAP_NET_RAW
            qp->qkey = attr->qkey;
            qp->pkey_index = attr->pkey_index;
            break;
        case IBV_QPS_INIT:
            if (attr->qp_state != IBV_QPS_RTR || mask != IBV_QP_STATE) return EINVAL;
            break;
        case IBV_QPS_RTR:
            if (attr->qp_state != IBV_QPS_RTS || mask != (IBV_QP_STATE | IBV_QP_SQ_PSN)) return EINVAL;
            break;
        default: return EINVAL;
    }
    qp->qp.state = attr->qp_state;
    return 0;
}

int ibv_destroy_qp(ibv_qp* qp_ptr) {
    const Guard guard(world_mutex());
    World& w = world();
    Qp* qp = &get(w.qps, qp_ptr);
    w.stats.attachments_left_at_destroy += static_cast<int>(qp->mcast.size());
    // Held-back completions of a destroyed QP never come (the HCA cleans
    // the CQ of them): their AHs are free.
    for (auto it = w.deferred.begin(); it != w.deferred.end();) {
        if (it->qp != qp) {
            ++it;
            continue;
        }
        if (it->ah != nullptr) --it->ah->in_flight;
        it = w.deferred.erase(it);
    }
    // Its unpolled completions no longer hold AHs (the QP is gone).
    for (auto& [p, cq] : w.cqs) {
        for (CqEntry& e : cq->entries) {
            if (e.qp != qp) continue;
            if (e.ah != nullptr) --e.ah->in_flight;
            e.ah = nullptr;
            e.qp = nullptr;
        }
    }
    w.qpns.erase(qp->qp.qp_num);
    w.qps.erase(qp_ptr);
    --w.stats.live_qps;
    return 0;
}

ibv_mr* ibv_reg_mr_iova2(ibv_pd* pd, void* addr, std::size_t length, std::uint64_t, unsigned int access) {
    const Guard guard(world_mutex());
    World& w = world();
    // Verbs: remote write needs local write.
    if ((access & IBV_ACCESS_REMOTE_WRITE) && !(access & IBV_ACCESS_LOCAL_WRITE)) {
        errno = EINVAL;
        return nullptr;
    }
    auto mr = std::make_unique<Mr>();
    mr->access = access;
    mr->mr.context = pd->context;
    mr->mr.pd = pd;
    mr->mr.addr = addr;
    mr->mr.length = length;
    mr->mr.lkey = w.next_key++;
    mr->mr.rkey = mr->mr.lkey;
    ibv_mr* ptr = &mr->mr;
    w.mrs.emplace(ptr, std::move(mr));
    ++w.stats.live_mrs;
    return ptr;
}

ibv_mr*(ibv_reg_mr)(ibv_pd* pd, void* addr, std::size_t length, int access) {
    const Guard guard(world_mutex());
    return ibv_reg_mr_iova2(pd, addr, length, reinterpret_cast<std::uintptr_t>(addr), static_cast<unsigned>(access));
}

int ibv_dereg_mr(ibv_mr* mr) {
    const Guard guard(world_mutex());
    World& w = world();
    for (auto& [p, qp] : w.qps)
        for (const RecvEntry& r : qp->rq)
            if (r.sge.lkey == mr->lkey) violation("ibv_dereg_mr under a posted receive");
    w.mrs.erase(mr);
    --w.stats.live_mrs;
    return 0;
}

ibv_ah* ibv_create_ah(ibv_pd* pd, ibv_ah_attr* attr) {
    const Guard guard(world_mutex());
    World& w = world();
    if (attr->dlid >= 0xC000 && attr->dlid != 0xFFFF && !attr->is_global) {
        errno = EINVAL;
        return nullptr;
    }
    auto ah = std::make_unique<Ah>();
    ah->ah.context = pd->context;
    ah->ah.pd = pd;
    ah->attr = *attr;
    ibv_ah* ptr = &ah->ah;
    w.ahs.emplace(ptr, std::move(ah));
    ++w.stats.live_ahs;
    ++w.stats.ahs_created;
    return ptr;
}

int ibv_destroy_ah(ibv_ah* ah_ptr) {
    const Guard guard(world_mutex());
    World& w = world();
    if (get(w.ahs, ah_ptr).in_flight > 0) violation("ibv_destroy_ah with a send in flight");
    w.ahs.erase(ah_ptr);
    --w.stats.live_ahs;
    return 0;
}

int ibv_attach_mcast(ibv_qp* qp_ptr, const ibv_gid* gid, std::uint16_t lid) {
    const Guard guard(world_mutex());
    Qp* qp = &get(world().qps, qp_ptr);
    MgidKey key;
    std::memcpy(key.first.data(), gid->raw, 16);
    key.second = lid;
    qp->mcast.insert(key);
    return 0;
}

int ibv_detach_mcast(ibv_qp* qp_ptr, const ibv_gid* gid, std::uint16_t lid) {
    const Guard guard(world_mutex());
    Qp* qp = &get(world().qps, qp_ptr);
    MgidKey key;
    std::memcpy(key.first.data(), gid->raw, 16);
    key.second = lid;
    return qp->mcast.erase(key) == 1 ? 0 : EINVAL;
}

int ibv_get_async_event(ibv_context* context, ibv_async_event* event) {
    const Guard guard(world_mutex());
    World& w = world();
    Context* c = &get(w.contexts, context);
    if (!consume_fd(c->async_pipe[0])) return -1;
    *event = c->async_queue.front();
    c->async_queue.pop_front();
    ++w.stats.async_events_got;
    return 0;
}

void ibv_ack_async_event(ibv_async_event*) {
    const Guard guard(world_mutex());
    ++world().stats.async_events_acked;
}

}  // extern "C"
