// A UD queue pair on a real HCA: transport::UdQp over libibverbs.
//
// Data flow:
//  1. post_send: validate each request against port.h's rules, look the
//     AddressHandle up in the AH cache, copy the payload into a free slot of
//     the QP's registered send ring (SendRequest::payload is only valid
//     during the call), link the work requests and post them with one
//     ibv_post_send().
//  2. post_receive: remember the user's buffer, post a free slot of the
//     registered receive ring of the same length (capped at GRH slot + MTU)
//     so the HCA sees exactly the buffer the user gave.
//  3. the HCA fills the slot: GRH (if the packet had one) in the first 40
//     bytes, payload after it; a completion lands in the QP's CQ and the
//     completion channel wakes the port's fd.
//  4. poll: ibv_poll_cq() in batches; a receive slot's bytes are copied into
//     the user's buffer (the price of port.h's ownership model: users' buffers
//     are not registered memory), slots and AH references are released, and
//     the work completion becomes a transport::Completion.
//
// One CQ serves both queues (ibv_qp_init_attr send_cq == recv_cq): poll()
// returns completions "oldest first" across sends and receives, which two
// CQs could not order. It holds send_depth + receive_depth entries, the most
// that can be outstanding, so it never overflows.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "transport/port.h"
#include "transport/verbs/verbs_device.h"

namespace ipoibd::transport::verbs {

// Page-aligned memory registered with the PD for local writes, cut into
// equal slots; send payloads and incoming packets pass through it.
class RegisteredRing {
public:
    static expected<RegisteredRing, Error> create(ibv_pd* pd, std::uint32_t slots, std::size_t slot_size,
                                                  const std::string& what);

    std::uint8_t* slot(std::uint32_t i) const { return memory_.get() + std::size_t{i} * slot_size_; }
    std::size_t slot_size() const { return slot_size_; }
    std::uint32_t lkey() const { return mr_->lkey; }

private:
    struct Free {
        void operator()(std::uint8_t* p) const noexcept;
    };
    std::unique_ptr<std::uint8_t, Free> memory_;
    MrPtr mr_;  // deregistered before the memory is freed
    std::size_t slot_size_ = 0;
};

// A UD QP through INIT (P_Key index, the device's port, Q_Key), RTR and
// RTS; each failure names the transition and the QP.
expected<void, Error> bring_ud_to_rts(const DeviceState& dev, ibv_qp* qp, std::uint16_t pkey_index, std::uint32_t qkey);

// The work request for a UD send of `req` whose payload is already in
// `slot` of a ring registered with `lkey`: signalled, SEND or SEND with
// immediate, a controlled remote Q_Key replaced by `qp_qkey`. `next` is
// left null for the caller to link.
void fill_ud_send(ibv_send_wr& wr, ibv_sge& sge, std::uint64_t wr_id, const SendRequest& req, std::uint8_t* slot,
                  std::uint32_t lkey, ibv_ah* ah, std::uint32_t qp_qkey);

class VerbsUdQp final : public UdQp {
public:
    // Creates the CQ, rings and QP and moves the QP through INIT (P_Key
    // index, port, Q_Key) -> RTR -> RTS. The caller checked that
    // config.pkey_index holds a P_Key.
    static expected<std::unique_ptr<UdQp>, Error> create(std::shared_ptr<DeviceState> device, const UdQpConfig& config);
    ~VerbsUdQp() override;
    VerbsUdQp(const VerbsUdQp&) = delete;
    VerbsUdQp& operator=(const VerbsUdQp&) = delete;

    std::uint32_t qpn() const override { return qp_->qp_num; }
    std::uint32_t qkey() const override { return config_.qkey; }
    // The P_Key at the QP's index in the table as last queried (the HCA
    // sends with whatever the index holds now): a change that leaves the
    // index alone, a membership flip say, keeps the QP (ipoib/engine.cpp)
    // and shows here once the engine has queried the port for it.
    std::uint16_t pkey() const override;
    std::uint16_t pkey_index() const override { return config_.pkey_index; }

    // port.h's contract. Refused up front (error if first, else the batch
    // stops): port not ACTIVE, payload over the active MTU, multicast DLID
    // without a GRH or with a remote QPN other than 0xFFFFFF, QPN over 24
    // bits, ibv_create_ah failure. A remote Q_Key with the high bit set is
    // replaced by the QP's own here, as the HCA would (IBA 10.2.4, controlled Q_Keys). One
    // ibv_post_send() per call; if the driver refuses part of the chain, the
    // part before it counts as accepted.
    expected<std::size_t, Error> post_send(std::span<const SendRequest> requests) override;
    // port.h's contract; buffers shorter than the GRH slot are refused. The
    // user's buffer is filled by a copy when its packet is polled.
    expected<std::size_t, Error> post_receive(std::span<const ReceiveBuffer> buffers) override;
    // port.h's contract. Send completions carry byte_len 0 (verbs does not
    // define it for sends); failed receives carry only wr_id and status.
    // Filling `out` completely re-arms the port's fd (see wake_up()).
    std::size_t poll(std::span<Completion> out) override;
    // ibv_attach_mcast(); attaching to a group twice is a no-op; an MLID
    // outside 0xC000-0xFFFE is invalid_argument; ENOMEM/ENOSPC from the
    // driver is resource_exhausted.
    expected<void, Error> attach_multicast(const ib::Gid& mgid, std::uint16_t mlid) override;
    // ibv_detach_mcast(); not_attached for a group this QP did not attach.
    expected<void, Error> detach_multicast(const ib::Gid& mgid, std::uint16_t mlid) override;

private:
    struct SendSlot {
        std::uint64_t wr_id = 0;
        AhPtr ah;  // keeps the AH alive until the send completes
    };
    struct ReceiveSlot {
        std::uint64_t wr_id = 0;
        mutable_bytes buffer;
    };

    VerbsUdQp(std::shared_ptr<DeviceState> device, const UdQpConfig& config);
    expected<void, Error> init();
    expected<QpPtr, Error> create_qp_with_fresh_qpn();
    expected<void, Error> bring_to_rts(ibv_qp* qp) const;
    std::optional<Error> check_send(const SendRequest& req) const;
    Completion complete(const ibv_wc& wc);
    std::string where() const;

    // Declared in creation order; destroyed in reverse (see verbs_device.h).
    std::shared_ptr<DeviceState> device_;
    UdQpConfig config_;
    CqPtr cq_;
    RegisteredRing send_ring_;
    RegisteredRing receive_ring_;
    std::vector<SendSlot> send_slots_;
    std::vector<std::uint32_t> free_send_slots_;
    std::vector<ReceiveSlot> receive_slots_;
    std::vector<std::uint32_t> free_receive_slots_;
    // Scratch for batched posting and polling, sized once.
    std::vector<ibv_send_wr> send_wrs_;
    std::vector<ibv_recv_wr> recv_wrs_;
    std::vector<ibv_sge> sges_;
    std::vector<ibv_wc> wcs_;
    QpPtr qp_;
    std::vector<std::pair<ib::Gid, std::uint16_t>> attachments_;
};

}  // namespace ipoibd::transport::verbs
