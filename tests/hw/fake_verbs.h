// A fake libibverbs: a one-device loopback "HCA" for testing the verbs
// backend's own code (rings, slots, work request chains, CQ events, async
// events, AH cache, teardown order) on machines without one.
//
// fake_verbs.cpp defines the libibverbs entry points the backend calls
// (ibv_open_device, ibv_create_qp, ...) and the ibv_context ops that the
// inline ibv_post_send/ibv_post_recv/ibv_poll_cq/ibv_req_notify_cq call
// through. Linked into a test executable, these definitions take the place
// of the real library's. It is a model of verbs' rules, not of any HCA:
//   - UD QPs go RESET -> INIT (exactly STATE|PKEY_INDEX|PORT|QKEY) -> RTR
//     (STATE) -> RTS (STATE|SQ_PSN); a controlled Q_Key is EPERM, as for a
//     process without CAP_NET_RAW
//   - RC QPs go through INIT, RTR, RTS with the masks ibv_rc_pingpong uses
//     (fake_verbs.cpp, modify_rc) and talk to the RC QP of this device that
//     RTR named (DLID the port's own, each QP the other's destination);
//     SEND, RDMA WRITE (with immediate) and READ execute at once, checked
//     against the remote MR's rkey, range and access and the peer QP's
//     access flags; no peer is "retry exceeded", no posted receive "RNR
//     retry exceeded" (this model's retries run out at once), an error
//     completion moves the QP to ERR and flushes what follows
//   - a send to the port's own LID reaches the QP named by remote_qpn if its
//     Q_Key matches and the two QPs' P_Keys (config.pkeys at their INIT
//     index) are of one partition, not both limited; a send to a multicast LID with a GRH reaches every QP
//     attached to (MGID, MLID), the sender included; the receive buffer gets
//     the 40-byte GRH slot (filled when the send had a GRH) then the payload
//   - every sge must lie inside a registered MR with that lkey
//   - CQ events go through a pipe like the kernel's completion channel
//   - every entry point takes one lock: QPs may be used from several threads
// and it records every breach of verbs' lifetime rules (destroying a PD
// with objects on it, a CQ with unacked events, an AH with a send in
// flight, a CQ overrun, ...) as a violation the tests check is empty.
#pragma once

#include <infiniband/verbs.h>

#include <cstdint>
#include <string>
#include <vector>

namespace fake_verbs {

struct Config {
    bool kernel_support = true;  // false: ibv_get_device_list fails with ENOSYS
    int devices = 1;             // named fake_ib0, fake_ib1, ...
    int ports = 1;
    ibv_port_state state = IBV_PORT_ACTIVE;
    std::uint8_t link_layer = IBV_LINK_LAYER_INFINIBAND;
    std::uint16_t lid = 0x0011;
    std::uint16_t sm_lid = 0x0001;
    ibv_mtu active_mtu = IBV_MTU_2048;
    ibv_mtu max_mtu = IBV_MTU_4096;
    std::vector<std::uint16_t> pkeys{0xFFFF, 0x8001, 0, 0};
    std::uint64_t port_guid = 0x0002C90300001234ULL;
    std::uint64_t node_guid = 0x0002C90300001230ULL;
    bool reuse_qpns = false;  // hand out the lowest free QPN (as some HCAs may)
    // UD sends: their completions wait for complete_sends(); and a status
    // other than success for every one (the QP then goes to SQE, where
    // later sends complete flushed).
    bool defer_send_completions = false;
    ibv_wc_status ud_send_status = IBV_WC_SUCCESS;
    int fail_create_qp = 0;  // this many ibv_create_qp calls fail (ENOMEM)
};

struct Stats {
    int live_device_lists = 0, live_contexts = 0, live_pds = 0, live_channels = 0, live_cqs = 0, live_qps = 0,
        live_mrs = 0, live_ahs = 0;
    int qps_created = 0, ahs_created = 0;
    std::uint64_t cq_events_got = 0, cq_events_acked = 0;
    std::uint64_t async_events_got = 0, async_events_acked = 0;
    int dropped_no_receive = 0, dropped_qkey = 0, dropped_no_target = 0, dropped_pkey = 0;
    std::uint16_t last_pkey = 0;  // the P_Key of the last UD packet delivered
    int attachments_left_at_destroy = 0;
    int rc_retry_exceeded = 0, rc_rnr = 0;  // RC sends with no peer, with no receive posted
    std::vector<std::string> violations;
};

// Starts afresh with `config`; objects still alive count as violations.
void reset(const Config& config = Config{});
// Puts the held-back UD send completions in their CQs.
void complete_sends();
// The configuration in force, to change between calls: it is read and
// written without the library's lock, so only while no other thread is in
// the library.
Config& config();
// A copy of the counters, taken under the lock (a data thread may be
// sending meanwhile).
Stats stats();

// Queues an asynchronous event on every open context (port events name
// `port`), as the kernel does for an SM or link change.
void raise_async_event(ibv_event_type type, std::uint8_t port);

}  // namespace fake_verbs
