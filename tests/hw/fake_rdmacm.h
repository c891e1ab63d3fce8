// A fake librdmacm for the node-over-fake-HCA test: the rdma_* entry points
// connected mode's active side calls (cm/rdma_cm_access.h), defined in the
// test executable in place of the real library's, over the fake libibverbs
// (fake_verbs.h). Events go through an event channel whose fd is readable
// while any wait, as the kernel's.
//
// A connection goes to a peer the test added for (GID, ServiceID): a
// simulated kernel ipoib_cm passive side with an RC QP of its own on the
// fake device (at RTS towards our QP, receives posted), which answers
// rdma_connect() with CONNECT_RESPONSE and the REP's IPoIB private data
// (its UD QPN, receive size 65524). For a ServiceID nobody listens on the
// answer is REJECTED with status 8, as ib_cm's. rdma_init_qp_attr() gives
// what the kernel would: the peer's QPN and Starting PSN, our receive PSN,
// the port's LID and active MTU. Only AF_IB and RDMA_PS_IB are modelled.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace fake_rdmacm {

struct Peer {
    std::array<std::uint8_t, 16> gid{};
    std::uint64_t service_id = 0;
    std::uint32_t ud_qpn = 0;
    std::uint32_t receive_size = 65524;
};

struct Stats {
    int live_channels = 0, live_ids = 0;
    int connects = 0, established = 0, disconnects = 0, rejected = 0;
    std::uint32_t last_req_qpn = 0;      // conn_param.qp_num of the last rdma_connect
    std::uint8_t last_retry_count = 0, last_rnr_retry = 0;
    std::vector<std::uint8_t> last_private_data;  // of the last rdma_connect
    std::vector<std::string> violations;
};

// Forgets peers and state; the peers' verbs objects are destroyed (call
// before checking fake_verbs' violations).
void reset();
void add_peer(const Peer& peer);
const Stats& stats();
// The messages the peers' RC QPs received since the last call (their
// receives posted again).
std::vector<std::vector<std::uint8_t>> peer_messages();

}  // namespace fake_rdmacm
