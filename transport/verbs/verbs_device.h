// RAII owners for libibverbs objects, and the device state a verbs port
// shares with its QPs.
//
// Ownership: a VerbsPort and each of its VerbsUdQps hold a
// shared_ptr<DeviceState>, so the device context, protection domain and
// completion channel outlive every QP, CQ, MR and AH made from them, in
// whatever order the user drops the port and its QPs. Inside each owner,
// members are declared in creation order so that they are destroyed in
// reverse: AHs before the PD, QPs before their CQs and MRs, CQs before the
// completion channel, everything before ibv_close_device().
#pragma once

#include <infiniband/verbs.h>

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "common/unique_fd.h"
#include "transport/port.h"
#include "transport/verbs/lru_cache.h"
#include "transport/verbs/verbs_convert.h"

namespace ipoibd::transport::verbs {

// Destroy calls return an errno that a destructor cannot report; by the
// time they run every user of the object is gone, so they do not fail in
// practice (ibv_destroy_cq waits for its events to be acked, which
// VerbsPort::process() does as it reads them).
struct FreeDeviceList {
    void operator()(ibv_device** list) const noexcept { ibv_free_device_list(list); }
};
struct CloseDevice {
    void operator()(ibv_context* c) const noexcept { ibv_close_device(c); }
};
struct DeallocPd {
    void operator()(ibv_pd* pd) const noexcept { ibv_dealloc_pd(pd); }
};
struct DestroyCompChannel {
    void operator()(ibv_comp_channel* ch) const noexcept { ibv_destroy_comp_channel(ch); }
};
struct DestroyCq {
    void operator()(ibv_cq* cq) const noexcept { ibv_destroy_cq(cq); }
};
struct DestroyQp {
    void operator()(ibv_qp* qp) const noexcept { ibv_destroy_qp(qp); }
};
struct DeregMr {
    void operator()(ibv_mr* mr) const noexcept { ibv_dereg_mr(mr); }
};
struct DestroyAh {
    void operator()(ibv_ah* ah) const noexcept { ibv_destroy_ah(ah); }
};

using DeviceListPtr = std::unique_ptr<ibv_device*, FreeDeviceList>;
using ContextPtr = std::unique_ptr<ibv_context, CloseDevice>;
using PdPtr = std::unique_ptr<ibv_pd, DeallocPd>;
using CompChannelPtr = std::unique_ptr<ibv_comp_channel, DestroyCompChannel>;
using CqPtr = std::unique_ptr<ibv_cq, DestroyCq>;
using QpPtr = std::unique_ptr<ibv_qp, DestroyQp>;
using MrPtr = std::unique_ptr<ibv_mr, DeregMr>;
// Shared: the AH cache holds one reference, every in-flight send another.
using AhPtr = std::shared_ptr<ibv_ah>;

// The AH cache's capacity: more than the neighbours and groups an IPoIB
// interface talks to at once on most fabrics; beyond it, the least recently
// used AH is recreated when next needed.
inline constexpr std::size_t kAddressHandleCacheSize = 1024;

// What a port and its QPs share. One thread uses it (port.h threading
// rule), but for what a send queue (verbs_send_queue.h), on another
// thread, reads: the immutable fields (names, limits, max_mtu, context,
// PD) and the atomic state and active_mtu. It keeps its own AH cache.
struct DeviceState {
    std::string device_name;  // "mlx5_0"
    std::uint8_t port_num = 1;
    std::uint64_t node_guid = 0;
    // Device limits checked before creating queues, so a too-deep queue is
    // refused with a clear message rather than the driver's EINVAL.
    std::uint32_t max_qp_wr = 0;
    std::uint32_t max_cqe = 0;
    std::uint32_t max_rd_atomic = 0;       // READs a responder holds for one QP (max_qp_rd_atom)
    std::uint32_t max_init_rd_atomic = 0;  // READs a requester has outstanding (max_qp_init_rd_atom)
    // The largest MTU the port can ever run at (ibv_port_attr::max_mtu):
    // registered rings are sized for it, so they stay big enough when the
    // link retrains to a larger active MTU.
    ib::Mtu max_mtu = ib::Mtu::mtu4096;

    // The data path's view of the port, refreshed on every port event and
    // every attributes() query: sends need ACTIVE and fit the active MTU.
    // Atomic: the data threads' send queues (verbs_send_queue.h) read them.
    std::atomic<PortState> state{PortState::down};
    std::atomic<ib::Mtu> active_mtu{ib::Mtu::mtu256};
    // The P_Key table as last queried (every attributes() query, so every
    // pkey_change the engine handles): what a UD QP reports as its P_Key.
    // The event loop's only.
    std::vector<std::uint16_t> pkey_table;

    // QPNs handed out on this port, so a QPN the HCA reuses is never handed
    // out twice (port.h: QPNs are not reused while the port lives).
    std::set<std::uint32_t> issued_qpns;

    // Declared in creation order; destroyed in reverse.
    ContextPtr context;
    PdPtr pd;
    // Memory the user registered (Port::register_memory), by R_Key:
    // deregistered before the PD goes.
    struct UserRegion {
        MrPtr mr;
        int access = 0;  // IBV_ACCESS_*
    };
    std::map<std::uint32_t, UserRegion> regions;
    CompChannelPtr channel;
    UniqueFd wake;  // eventfd: "a QP may have more completions"
    LruCache<AddressHandle, AhPtr, AddressHandleHash> ah_cache{kAddressHandleCacheSize};

    // The user region holding [data, data + length) with all of `access`
    // (IBV_ACCESS_*), for a work request's lkey; nullptr when none does.
    const ibv_mr* find_region(const void* data, std::size_t length, int access) const;

    // "device mlx5_0 port 1", for error details.
    std::string where() const;

    // The AH for `ah`, from the cache or newly created (ibv_create_ah).
    expected<AhPtr, Error> address_handle(const AddressHandle& ah);

    // Makes the port's fd readable until the next process(), for a QP whose
    // poll() stopped with completions possibly left in its CQ (CQ events
    // fire once per arm, so they alone would not wake the loop again).
    void wake_up() const;
};

}  // namespace ipoibd::transport::verbs
