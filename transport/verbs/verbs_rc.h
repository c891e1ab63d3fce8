// An RC queue pair on a real HCA: transport::RcQueuePair over libibverbs
// (IBV_QPT_RC). The HCA carries out IBA 9.7 (PSNs, ACKs, retries, RNR); this
// class moves work requests and completions between rc_port.h's shapes and
// verbs':
//
//  - create(): RESET -> INIT at once (P_Key index, port, remote read and
//    write allowed: the memory regions' own rights decide), so receives
//    may be posted before connecting; connect(): INIT -> RTR
//    (path MTU, destination QPN and LID, receive PSN, min RNR timer,
//    responder resources) -> RTS (send PSN, timeout, retry count, RNR
//    retry, initiator depth);
//  - post_send(): SEND and WRITE payloads are copied into registered
//    buffers of this QP (rc::SendWr owns its payload as a vector, not as
//    registered memory); a READ lands straight in the caller's
//    read_into, which must lie in memory registered with the port
//    (Port::register_memory, access::local_write): its lkey is looked up;
//  - post_recv(): a registered buffer of the capacity asked for, whose
//    bytes become Completion::data when the message arrives;
//  - poll(): ibv_poll_cq, the work completion's status mapped to
//    rc::Status; an error completion means the QP is in ERR (verbs moves
//    it there), and what was posted after it completes flushed.
//
// Buffers are pooled by size class (powers of two from 4 KiB, up to 1 MiB,
// at most 32 MiB pinned) so that a steady stream does not register memory
// per message. One CQ serves both
// queues, on the port's completion channel, so the port's fd wakes for RC
// completions as for UD ones.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "transport/port.h"
#include "transport/verbs/verbs_device.h"

namespace ipoibd::transport::verbs {

// rc::access flags -> IBV_ACCESS_* (remote write needs local write in verbs).
int access_to_verbs(std::uint32_t access);
// A failed work completion's status -> rc::Status.
rc::Status rc_status_from_verbs(ibv_wc_status s);

class VerbsRcQp final : public RcQueuePair {
public:
    static constexpr std::uint32_t kSendDepth = 256;
    static constexpr std::uint32_t kReceiveDepth = 256;

    static expected<std::unique_ptr<RcQueuePair>, Error> create(std::shared_ptr<DeviceState> device,
                                                                std::uint16_t pkey_index);
    ~VerbsRcQp() override;
    VerbsRcQp(const VerbsRcQp&) = delete;
    VerbsRcQp& operator=(const VerbsRcQp&) = delete;

    std::uint32_t qpn() const override { return qp_->qp_num; }
    expected<void, std::string> connect(std::uint16_t remote_lid, const rc::RtrAttributes& rtr,
                                        const rc::RtsAttributes& rts) override;
    expected<void, std::string> post_send(rc::SendWr wr) override;
    expected<void, std::string> post_recv(rc::RecvWr wr) override;
    std::vector<rc::Completion> poll() override;
    rc::QpState state() const override { return state_; }
    rc::RcCounters counters() const override { return counters_; }

private:
    struct Buffer {
        std::unique_ptr<std::uint8_t, void (*)(void*)> memory{nullptr, nullptr};
        std::size_t size = 0;
        MrPtr mr;
    };
    struct Pending {
        std::uint64_t user_wr_id = 0;
        bool receive = false;
        rc::WrOpcode opcode = rc::WrOpcode::send;
        std::unique_ptr<Buffer> buffer;  // SEND/WRITE payload, receive buffer; none for a READ
    };

    VerbsRcQp(std::shared_ptr<DeviceState> device, std::uint16_t pkey_index);
    expected<void, Error> init();
    expected<std::unique_ptr<Buffer>, std::string> take_buffer(std::size_t size);
    void give_back(std::unique_ptr<Buffer> b);
    std::string where() const;

    // Declared in creation order; destroyed in reverse (see verbs_device.h).
    std::shared_ptr<DeviceState> device_;
    std::uint16_t pkey_index_;
    CqPtr cq_;
    QpPtr qp_;
    std::map<std::uint64_t, Pending> pending_;  // by our wr_id
    std::map<std::size_t, std::vector<std::unique_ptr<Buffer>>> pool_;  // free buffers by size class
    std::uint64_t next_wr_id_ = 1;
    std::size_t pooled_bytes_ = 0;
    std::uint32_t sends_posted_ = 0, receives_posted_ = 0;
    rc::QpState state_ = rc::QpState::reset;
    rc::RcCounters counters_;
};

}  // namespace ipoibd::transport::verbs
