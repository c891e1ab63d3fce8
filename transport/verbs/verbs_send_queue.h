// A send queue for a data thread on an HCA (port.h, UdSendQueue): a UD QP
// of its own in the port's protection domain, used only to send, by the
// one thread that owns the queue.
//
//  1. The port's thread creates it (VerbsPort::create_send_queue): a CQ of
//     its own (no completion channel: nothing waits for it), a registered
//     send ring of kDepth slots of the port's largest MTU. No QP yet.
//  2. The first send() makes the QP, in the port's PD, on `as.pkey_index`
//     (the index of the QP it sends as) with `as.qkey`, and brings it to
//     RTS. A send as another QP (the port's QP was made again: a P_Key
//     table change, a new QPN) makes it again: the old one is destroyed,
//     its slots and AHs released; so does a send error (it leaves a UD QP
//     in SQE, where every later send would be flushed). A QP that could not
//     be made is tried again after kRetryAfter, or at once for another `as`.
//  3. send(): each request checked as the port's QP checks it (port ACTIVE,
//     payload within the active MTU, unicast only), its AH taken from the
//     queue's own cache (ibv_create_ah on this thread; the port's cache is
//     the port thread's), its payload copied into a free slot, and the
//     batch posted with one ibv_post_send(). Every send is signalled; the
//     completions are reaped at the next send() or flush(), which frees
//     their slots and AH references. No free slot: dropped and counted.
//     send() returns how many it took (posted, or dropped for want of a
//     slot), as the soft port's does.
//
// What differs from the port's own QP: the packets' source QPN is this
// QP's, not `as.qpn` (an HCA sends as the QP it is posted on). Peers do not
// care: they learn our address from ARP/ND, not from a datagram's source,
// and multicast (which our own-multicast filter matches by QPN) never
// leaves from a data thread. The QPN is not entered in the port's list of
// issued QPNs (that list is the port thread's); the queue receives nothing
// on it (one receive slot, never posted).
// Counters (SendQueueCounters), as the soft port's: `packets` and `bytes`
// (whole packets, headers and CRCs included) taken; `dropped`: taken but
// not sent (no free slot, the driver refused the post, the send completed
// with an error); `refused`: port not ACTIVE, over the MTU, multicast;
// `failed`: what it sends with could not be made (the QP, an AH).
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "transport/port.h"
#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_qp.h"

namespace ipoibd::transport::verbs {

class VerbsSendQueue final : public UdSendQueue {
public:
    using Clock = std::chrono::steady_clock;
    // Slots in the send ring, and the QP's send queue depth (capped at the
    // device's max_qp_wr): what the soft port's second sender holds too.
    static constexpr std::uint32_t kDepth = 256;
    // How long after a QP could not be made the queue tries again.
    static constexpr std::chrono::milliseconds kRetryAfter{100};

    // On the port's thread.
    static expected<std::unique_ptr<UdSendQueue>, Error> create(std::shared_ptr<DeviceState> device);
    ~VerbsSendQueue() override;
    VerbsSendQueue(const VerbsSendQueue&) = delete;
    VerbsSendQueue& operator=(const VerbsSendQueue&) = delete;

    std::size_t send(const SendAs& as, std::span<const SendRequest> requests) override;
    void flush() override { reap(); }
    const SendQueueCounters& counters() const override { return counters_; }

private:
    explicit VerbsSendQueue(std::shared_ptr<DeviceState> device) : device_(std::move(device)) {}
    expected<void, Error> init();
    // Makes the QP for `as` (destroying the one before); false when it
    // could not be made.
    bool become(const SendAs& as);
    void release_all();  // after the QP is gone: every slot free
    void reap();
    expected<AhPtr, Error> address_handle(const AddressHandle& ah);
    bool acceptable(const SendRequest& req) const;

    // Declared in creation order; destroyed in reverse (verbs_device.h).
    std::shared_ptr<DeviceState> device_;
    std::uint32_t depth_ = 0;
    CqPtr cq_;
    RegisteredRing ring_;
    std::vector<AhPtr> slots_;  // by slot: the AH its send uses, held until the completion is reaped
    std::vector<std::uint32_t> free_;
    std::vector<ibv_send_wr> wrs_;
    std::vector<ibv_sge> sges_;
    std::vector<ibv_wc> wcs_;
    LruCache<AddressHandle, AhPtr, AddressHandleHash> ahs_{kAddressHandleCacheSize};
    SendAs as_{};
    bool tried_ = false;  // become(as_) was called (and qp_ is its outcome); false: make it again
    Clock::time_point retry_at_{};  // when to try again if qp_ could not be made
    QpPtr qp_;
    SendQueueCounters counters_;
};

}  // namespace ipoibd::transport::verbs
