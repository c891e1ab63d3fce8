// The fake librdmacm (fake_rdmacm.h).
#include "tests/hw/fake_rdmacm.h"

#include <infiniband/ib.h>
#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <map>
#include <memory>

#include "tests/hw/fake_verbs.h"

namespace fake_rdmacm {
namespace {

constexpr std::uint32_t kReqPsn = 0x0A1B2C;   // "the kernel's" Starting PSN in our REQ
constexpr std::uint32_t kPeerPsn = 0x3C2B1A;  // the peer's, in its REP
constexpr int kPeerReceives = 16;
constexpr std::size_t kPeerBuffer = 65536;

struct PeerQp {
    Peer peer;
    ibv_context* ctx = nullptr;
    ibv_pd* pd = nullptr;
    ibv_cq* cq = nullptr;
    ibv_qp* qp = nullptr;
    ibv_mr* mr = nullptr;
    std::vector<std::uint8_t> memory;
};

struct Event {
    rdma_cm_event ev{};
    std::array<std::uint8_t, 196> private_data{};
};

struct Id {
    rdma_cm_id* id = nullptr;
    sockaddr_ib dst{};
    PeerQp* peer = nullptr;
    bool connected = false;
};

struct World {
    std::vector<Peer> peers;
    std::vector<std::unique_ptr<PeerQp>> peer_qps;
    std::map<rdma_event_channel*, std::deque<Event*>> channels;
    std::map<rdma_cm_id*, Id> ids;
    Stats stats;
};

World& world() {
    static World w;
    return w;
}

void post_receive(PeerQp& p, std::size_t slot) {
    ibv_sge sge{};
    sge.addr = reinterpret_cast<std::uintptr_t>(p.memory.data() + slot * kPeerBuffer);
    sge.length = static_cast<std::uint32_t>(kPeerBuffer);
    sge.lkey = p.mr->lkey;
    ibv_recv_wr wr{};
    wr.wr_id = slot;
    wr.sg_list = &sge;
    wr.num_sge = 1;
    ibv_recv_wr* bad = nullptr;
    if (ibv_post_recv(p.qp, &wr, &bad) != 0) world().stats.violations.push_back("the peer could not post a receive");
}

// The simulated passive side: an RC QP on the fake device, at RTS towards
// `our_qpn`, with its receives posted.
PeerQp* make_peer_qp(const Peer& peer, std::uint32_t our_qpn) {
    auto p = std::make_unique<PeerQp>();
    p->peer = peer;
    int n = 0;
    ibv_device** list = ibv_get_device_list(&n);
    if (!list || n == 0) return nullptr;
    p->ctx = ibv_open_device(list[0]);
    ibv_free_device_list(list);
    if (!p->ctx) return nullptr;
    p->pd = ibv_alloc_pd(p->ctx);
    p->cq = ibv_create_cq(p->ctx, 64, nullptr, nullptr, 0);
    ibv_qp_init_attr init{};
    init.send_cq = init.recv_cq = p->cq;
    init.qp_type = IBV_QPT_RC;
    init.cap.max_send_wr = 16;
    init.cap.max_recv_wr = kPeerReceives;
    init.cap.max_send_sge = init.cap.max_recv_sge = 1;
    p->qp = ibv_create_qp(p->pd, &init);
    p->memory.resize(kPeerBuffer * kPeerReceives);
    p->mr = (ibv_reg_mr)(p->pd, p->memory.data(), p->memory.size(), IBV_ACCESS_LOCAL_WRITE);  // the function: the macro mixes enums
    if (!p->pd || !p->cq || !p->qp || !p->mr) return nullptr;
    ibv_qp_attr a{};
    a.qp_state = IBV_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_LOCAL_WRITE;
    if (ibv_modify_qp(p->qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS) != 0)
        return nullptr;
    for (int i = 0; i < kPeerReceives; ++i) post_receive(*p, static_cast<std::size_t>(i));
    a = {};
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = fake_verbs::config().active_mtu;
    a.dest_qp_num = our_qpn;
    a.rq_psn = kReqPsn;
    a.ah_attr.dlid = fake_verbs::config().lid;
    a.ah_attr.port_num = 1;
    a.min_rnr_timer = 12;
    if (ibv_modify_qp(p->qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                                     IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER) != 0)
        return nullptr;
    a = {};
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = kPeerPsn;
    a.timeout = 14;
    a.retry_cnt = 0;
    a.rnr_retry = 0;
    if (ibv_modify_qp(p->qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                                     IBV_QP_MAX_QP_RD_ATOMIC) != 0)
        return nullptr;
    world().peer_qps.push_back(std::move(p));
    return world().peer_qps.back().get();
}

void destroy_peer(PeerQp& p) {
    if (p.qp) ibv_destroy_qp(p.qp);
    if (p.mr) ibv_dereg_mr(p.mr);
    if (p.cq) ibv_destroy_cq(p.cq);
    if (p.pd) ibv_dealloc_pd(p.pd);
    if (p.ctx) ibv_close_device(p.ctx);
}

void queue(rdma_cm_id* id, rdma_cm_event_type type, int status = 0) {
    auto* e = new Event;
    e->ev.id = id;
    e->ev.event = type;
    e->ev.status = status;
    auto& q = world().channels[id->channel];
    q.push_back(e);
    const std::uint64_t one = 1;
    (void)!::write(id->channel->fd, &one, sizeof one);
}

Id* find(rdma_cm_id* id) {
    auto it = world().ids.find(id);
    if (it == world().ids.end()) {
        world().stats.violations.push_back("a call on an rdma_cm_id that does not exist");
        return nullptr;
    }
    return &it->second;
}

}  // namespace

void reset() {
    World& w = world();
    for (auto& p : w.peer_qps) destroy_peer(*p);
    w.peer_qps.clear();
    w.peers.clear();
    for (auto& [c, q] : w.channels)
        for (Event* e : q) delete e;
    w.channels.clear();
    w.ids.clear();
    w.stats = Stats{};
}

void add_peer(const Peer& peer) { world().peers.push_back(peer); }
const Stats& stats() { return world().stats; }

std::vector<std::vector<std::uint8_t>> peer_messages() {
    std::vector<std::vector<std::uint8_t>> out;
    for (auto& p : world().peer_qps) {
        ibv_wc wc[8];
        for (int n; (n = ibv_poll_cq(p->cq, 8, wc)) > 0;) {
            for (int i = 0; i < n; ++i) {
                if (wc[i].status != IBV_WC_SUCCESS || !(wc[i].opcode & IBV_WC_RECV)) continue;
                const std::uint8_t* data = p->memory.data() + wc[i].wr_id * kPeerBuffer;
                out.emplace_back(data, data + wc[i].byte_len);
                post_receive(*p, wc[i].wr_id);
            }
        }
    }
    return out;
}

}  // namespace fake_rdmacm

using fake_rdmacm::world;

rdma_event_channel* rdma_create_event_channel(void) {
    auto* c = new rdma_event_channel;
    c->fd = ::eventfd(0, EFD_CLOEXEC);
    world().channels[c];
    ++world().stats.live_channels;
    return c;
}

void rdma_destroy_event_channel(rdma_event_channel* channel) {
    auto& w = world();
    for (auto& [id, s] : w.ids)
        if (id->channel == channel) w.stats.violations.push_back("an event channel destroyed with ids on it");
    if (auto it = w.channels.find(channel); it != w.channels.end()) {
        for (auto* e : it->second) delete e;
        w.channels.erase(it);
    }
    ::close(channel->fd);
    delete channel;
    --w.stats.live_channels;
}

int rdma_create_id(rdma_event_channel* channel, rdma_cm_id** id, void* context, rdma_port_space ps) {
    if (ps != RDMA_PS_IB) {
        errno = EPROTONOSUPPORT;
        return -1;
    }
    auto* i = new rdma_cm_id{};
    i->channel = channel;
    i->context = context;
    i->ps = ps;
    i->qp_type = IBV_QPT_RC;
    world().ids[i].id = i;
    ++world().stats.live_ids;
    *id = i;
    return 0;
}

int rdma_destroy_id(rdma_cm_id* id) {
    auto& w = world();
    for (auto* e : w.channels[id->channel])
        if (e->ev.id == id) w.stats.violations.push_back("an id destroyed with an event not yet acknowledged");
    w.ids.erase(id);
    delete id;
    --w.stats.live_ids;
    return 0;
}

int rdma_bind_addr(rdma_cm_id* id, sockaddr* addr) {
    if (!fake_rdmacm::find(id)) return -1;
    if (addr->sa_family != AF_IB) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    return 0;
}

int rdma_resolve_addr(rdma_cm_id* id, sockaddr* src, sockaddr* dst, int) {
    auto* s = fake_rdmacm::find(id);
    if (!s) return -1;
    if (dst->sa_family != AF_IB || (src && src->sa_family != AF_IB)) {
        errno = EAFNOSUPPORT;
        return -1;
    }
    std::memcpy(&s->dst, dst, sizeof s->dst);
    fake_rdmacm::queue(id, RDMA_CM_EVENT_ADDR_RESOLVED);
    return 0;
}

int rdma_resolve_route(rdma_cm_id* id, int) {
    if (!fake_rdmacm::find(id)) return -1;
    fake_rdmacm::queue(id, RDMA_CM_EVENT_ROUTE_RESOLVED);
    return 0;
}

int rdma_connect(rdma_cm_id* id, rdma_conn_param* param) {
    auto* s = fake_rdmacm::find(id);
    if (!s) return -1;
    auto& st = world().stats;
    ++st.connects;
    st.last_req_qpn = param->qp_num;
    st.last_retry_count = param->retry_count;
    st.last_rnr_retry = param->rnr_retry_count;
    const auto* pd = static_cast<const std::uint8_t*>(param->private_data);
    st.last_private_data.assign(pd, pd + param->private_data_len);
    const std::uint64_t sid = be64toh(s->dst.sib_sid);
    const fake_rdmacm::Peer* peer = nullptr;
    for (const auto& p : world().peers)
        if (p.service_id == sid && std::memcmp(p.gid.data(), &s->dst.sib_addr, 16) == 0) peer = &p;
    if (!peer) {
        ++st.rejected;
        fake_rdmacm::queue(id, RDMA_CM_EVENT_REJECTED, 8);  // ib_cm: no listener
        return 0;
    }
    s->peer = fake_rdmacm::make_peer_qp(*peer, param->qp_num);
    if (!s->peer) {
        st.violations.push_back("the fake peer's QP could not be set up");
        errno = EINVAL;
        return -1;
    }
    s->connected = true;
    auto* e = new fake_rdmacm::Event;
    e->ev.id = id;
    e->ev.event = RDMA_CM_EVENT_CONNECT_RESPONSE;
    e->private_data[1] = static_cast<std::uint8_t>(peer->ud_qpn >> 16);
    e->private_data[2] = static_cast<std::uint8_t>(peer->ud_qpn >> 8);
    e->private_data[3] = static_cast<std::uint8_t>(peer->ud_qpn);
    e->private_data[4] = static_cast<std::uint8_t>(peer->receive_size >> 24);
    e->private_data[5] = static_cast<std::uint8_t>(peer->receive_size >> 16);
    e->private_data[6] = static_cast<std::uint8_t>(peer->receive_size >> 8);
    e->private_data[7] = static_cast<std::uint8_t>(peer->receive_size);
    e->ev.param.conn.private_data = e->private_data.data();
    e->ev.param.conn.private_data_len = static_cast<std::uint8_t>(e->private_data.size());
    e->ev.param.conn.qp_num = s->peer->qp->qp_num;
    world().channels[id->channel].push_back(e);
    const std::uint64_t one = 1;
    (void)!::write(id->channel->fd, &one, sizeof one);
    return 0;
}

int rdma_init_qp_attr(rdma_cm_id* id, ibv_qp_attr* attr, int* mask) {
    auto* s = fake_rdmacm::find(id);
    if (!s || !s->peer) {
        errno = EINVAL;
        return -1;
    }
    const auto state = attr->qp_state;
    *attr = {};
    attr->qp_state = state;
    if (state == IBV_QPS_RTR) {
        attr->dest_qp_num = s->peer->qp->qp_num;
        attr->rq_psn = fake_rdmacm::kReqPsn;
        attr->path_mtu = fake_verbs::config().active_mtu;
        attr->ah_attr.dlid = fake_verbs::config().lid;
        attr->min_rnr_timer = 0;
        *mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    } else if (state == IBV_QPS_RTS) {
        attr->sq_psn = fake_rdmacm::kPeerPsn;
        attr->timeout = 18;
        attr->retry_cnt = world().stats.last_retry_count;
        attr->rnr_retry = world().stats.last_rnr_retry;
        *mask = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                IBV_QP_MAX_QP_RD_ATOMIC;
    } else {
        errno = EINVAL;
        return -1;
    }
    return 0;
}

int rdma_establish(rdma_cm_id* id) {
    auto* s = fake_rdmacm::find(id);
    if (!s || !s->connected) {
        world().stats.violations.push_back("rdma_establish without a CONNECT_RESPONSE");
        errno = EINVAL;
        return -1;
    }
    ++world().stats.established;
    fake_rdmacm::queue(id, RDMA_CM_EVENT_ESTABLISHED);
    return 0;
}

int rdma_disconnect(rdma_cm_id* id) {
    if (!fake_rdmacm::find(id)) return -1;
    ++world().stats.disconnects;
    return 0;
}

int rdma_get_cm_event(rdma_event_channel* channel, rdma_cm_event** event) {
    auto& q = world().channels[channel];
    if (q.empty()) {
        errno = EAGAIN;
        return -1;
    }
    *event = &q.front()->ev;
    // Handed out: off the queue, owned by the caller until acknowledged.
    q.pop_front();
    if (q.empty()) {
        std::uint64_t n = 0;
        (void)!::read(channel->fd, &n, sizeof n);
    }
    return 0;
}

int rdma_ack_cm_event(rdma_cm_event* event) {
    delete reinterpret_cast<fake_rdmacm::Event*>(event);  // `ev` is the Event's first member
    return 0;
}
