#include "transport/port_core.h"
#include "transport/rc/rc_wire.h"
#include "transport/ring.h"

#include <random>

#include <algorithm>
#include <cstring>

namespace ipoibd::transport {

void visit(const PortCounters& c, CounterSink& out) {
    out.counter("rx_packets", c.rx_packets);
    out.counter("rx_bytes", c.rx_bytes);
    out.counter("tx_packets", c.tx_packets);
    out.counter("tx_bytes", c.tx_bytes);
    out.counter("events_dropped", c.events_dropped);
    visit_reasons<ib::DropReason>(out, "malformed_", c.malformed, [](ib::DropReason r) { return ib::to_string(r); });
    visit_reasons<DeliveryDrop>(out, "undelivered_", c.undelivered, [](DeliveryDrop d) { return to_string(d); });
}

struct PortCore::Qp {
    std::uint32_t qpn = 0;
    std::uint32_t qkey = 0;
    std::uint16_t pkey_index = 0;
    bool gsi = false;
    std::uint32_t send_depth = 0;
    std::uint32_t receive_depth = 0;
    std::uint32_t sends_outstanding = 0;  // accepted, completion not yet polled
    std::uint32_t psn = 0;
    // Sized at creation: receive_depth buffers; one completion per
    // accepted send (at most send_depth outstanding) or consumed buffer.
    Ring<ReceiveBuffer> receive_queue;
    Ring<Completion> completions;
};

struct PortCore::RcEntry {
    rc::RcQp engine;
    std::uint16_t pkey_index = 0;
    std::uint16_t remote_lid = 0;
    explicit RcEntry(std::uint32_t qpn, const rc::MemoryRegions* memory) : engine(qpn, memory) {}
};

class PortCore::QpHandle final : public UdQp {
public:
    QpHandle(PortCore& port, Qp* qp) : port_(port), qp_(qp) {}
    ~QpHandle() override { port_.destroy(qp_); }

    std::uint32_t qpn() const override { return qp_->qpn; }
    std::uint32_t qkey() const override { return qp_->qkey; }
    std::uint16_t pkey_index() const override { return qp_->pkey_index; }
    std::uint16_t pkey() const override {
        const auto& table = port_.attributes_.pkey_table;
        return qp_->pkey_index < table.size() ? table[qp_->pkey_index] : 0;
    }

    expected<std::size_t, Error> post_send(std::span<const SendRequest> requests) override {
        return port_.send(*qp_, requests);
    }

    expected<std::size_t, Error> post_receive(std::span<const ReceiveBuffer> buffers) override {
        std::size_t accepted = 0;
        for (const ReceiveBuffer& b : buffers) {
            if (b.buffer.size() < kGrhSlotSize) {
                if (accepted == 0)
                    return unexpected(Error{Errc::invalid_argument, "receive buffer smaller than the 40-byte GRH slot"});
                break;
            }
            if (qp_->receive_queue.size() >= qp_->receive_depth) break;
            qp_->receive_queue.push_back(b);
            ++accepted;
        }
        return accepted;
    }

    std::size_t poll(std::span<Completion> out) override {
        std::size_t n = 0;
        while (n < out.size() && !qp_->completions.empty()) {
            out[n] = qp_->completions.front();
            qp_->completions.pop_front();
            if (out[n].kind == CompletionKind::send) --qp_->sends_outstanding;
            ++n;
        }
        return n;
    }

    expected<void, Error> attach_multicast(const ib::Gid& mgid, std::uint16_t mlid) override {
        if (!ib::is_multicast_lid(mlid)) return unexpected(Error{Errc::invalid_argument, "MLID not in the multicast range"});
        auto& list = port_.attachments_;
        const bool present = std::any_of(list.begin(), list.end(), [&](const Attachment& a) {
            return a.qp == qp_ && a.mlid == mlid && a.mgid == mgid;
        });
        if (present) return {};
        if (list.size() >= kMaxMulticastAttachments)
            return unexpected(Error{Errc::resource_exhausted, "multicast attachment table full"});
        list.push_back({mlid, mgid, qp_});
        return {};
    }

    expected<void, Error> detach_multicast(const ib::Gid& mgid, std::uint16_t mlid) override {
        auto& list = port_.attachments_;
        auto it = std::find_if(list.begin(), list.end(), [&](const Attachment& a) {
            return a.qp == qp_ && a.mlid == mlid && a.mgid == mgid;
        });
        if (it == list.end()) return unexpected(Error{Errc::not_attached, "QP is not attached to that group"});
        list.erase(it);
        return {};
    }

private:
    PortCore& port_;
    Qp* qp_;
};

namespace {

// IBA 10.9.3: P_Keys match when their low 15 bits are equal and non-zero
// and at least one of the two is a full member.
bool pkeys_match(std::uint16_t a, std::uint16_t b) {
    const std::uint16_t base_a = a & ib::kPKeyBaseMask, base_b = b & ib::kPKeyBaseMask;
    return base_a != 0 && base_a == base_b && ((a | b) & ib::kPKeyFullMemberBit) != 0;
}

}  // namespace

PortCore::PortCore(PortAttributes initial, LinkSink& link)
    : attributes_(std::move(initial)), link_(link), tx_buffer_(ib::kMaxPacketSize) {
    std::random_device random;
    next_qpn_ = 0x48 + (random() & 0xFFFF);
}

PortCore::~PortCore() = default;

void PortCore::raise(PortEvent e) {
    if (events_.size() >= kMaxEvents) {
        events_.pop_front();
        ++counters_.events_dropped;
    }
    events_.push_back(e);
}

void PortCore::set_attributes(const PortAttributes& next) {
    const PortAttributes prev = attributes_;
    attributes_ = next;
    if (prev.lid != next.lid || prev.lmc != next.lmc) raise(PortEvent::lid_change);
    if (prev.sm_lid != next.sm_lid || prev.sm_sl != next.sm_sl) raise(PortEvent::sm_change);
    if (prev.pkey_table != next.pkey_table) raise(PortEvent::pkey_change);
    if (prev.state != PortState::active && next.state == PortState::active) raise(PortEvent::port_active);
    if (prev.state == PortState::active && next.state != PortState::active) raise(PortEvent::port_down);
}

std::size_t PortCore::poll_events(std::span<PortEvent> out) {
    std::size_t n = 0;
    for (; n < out.size() && !events_.empty(); ++n) {
        out[n] = events_.front();
        events_.pop_front();
    }
    return n;
}

bool PortCore::lid_is_ours(std::uint16_t dlid) const {
    if (attributes_.lid == 0) return false;
    const auto mask = static_cast<std::uint16_t>(~((1u << attributes_.lmc) - 1));
    return (dlid & mask) == (attributes_.lid & mask);
}

std::optional<std::size_t> PortCore::pkey_index_matching(std::uint16_t pkey) const {
    for (std::size_t i = 0; i < attributes_.pkey_table.size(); ++i)
        if (pkeys_match(pkey, attributes_.pkey_table[i])) return i;
    return std::nullopt;
}

void PortCore::receive(bytes datagram, bool via_switch) {
    if (tap_) tap_(datagram, false);
    // FIRST and MIDDLE packets carry exactly the path MTU: the port's for
    // UD, the connection's for an RC QP (a peek at the BTH finds which).
    std::uint32_t pmtu = ib::mtu_bytes(attributes_.active_mtu);
    if (!rc_qps_.empty() && datagram.size() >= ib::Lrh::size + ib::Bth::size) {
        const std::size_t bth = ib::Lrh::size + ((datagram[1] & 3) == 3 ? ib::Grh::size : 0);
        if (datagram.size() >= bth + ib::Bth::size && ib::transport_of(datagram[bth]) == ib::Transport::rc)
            if (const auto it = rc_qps_.find(load_be24(datagram.data() + bth + 5)); it != rc_qps_.end())
                pmtu = std::min(pmtu, it->second->engine.path_mtu());
    }
    auto parsed = ib::parse_packet(datagram, {.pmtu = pmtu});
    if (!parsed) {
        ++counters_.malformed[static_cast<std::size_t>(parsed.error())];
        if (!rc_qps_.empty()) invalid_rc_request(datagram, parsed.error());
        return;
    }
    const ib::Packet& pkt = *parsed;
    if (!via_switch && (pkt.bth.dest_qp == ib::kQp0 || ib::is_multicast_lid(pkt.lrh.dlid))) {
        count(DeliveryDrop::not_via_switch);
        return;
    }
    if (pkt.bth.dest_qp == ib::kQp0) {
        if (smp_handler_ && smp_handler_(pkt)) {
            ++counters_.rx_packets;
            counters_.rx_bytes += datagram.size();
        } else {
            count(DeliveryDrop::smp_not_handled);
        }
        return;
    }
    if (attributes_.state != PortState::armed && attributes_.state != PortState::active) {
        count(DeliveryDrop::port_not_ready);
        return;
    }
    if (ib::transport_of(pkt.bth.opcode) == ib::Transport::rc && !ib::is_multicast_lid(pkt.lrh.dlid) &&
        rc_qps_.contains(pkt.bth.dest_qp)) {
        if (!lid_is_ours(pkt.lrh.dlid)) {
            count(DeliveryDrop::dlid_not_ours);
            return;
        }
        receive_rc(pkt, std::chrono::steady_clock::now());
        counters_.rx_bytes += datagram.size();
        return;
    }
    bool delivered = false;
    if (ib::is_multicast_lid(pkt.lrh.dlid)) {
        if (!pkt.grh) {
            count(DeliveryDrop::multicast_without_grh);
            return;
        }
        bool attached = false;
        for (const Attachment& a : attachments_) {
            if (a.mlid != pkt.lrh.dlid || a.mgid != pkt.grh->dgid) continue;
            attached = true;
            delivered = deliver(pkt, datagram, *a.qp) || delivered;
        }
        if (!attached) count(DeliveryDrop::multicast_not_attached);
    } else {
        if (!lid_is_ours(pkt.lrh.dlid)) {
            count(DeliveryDrop::dlid_not_ours);
            return;
        }
        auto it = qps_.find(pkt.bth.dest_qp);
        if (it == qps_.end()) {
            count(DeliveryDrop::unknown_qp);
            return;
        }
        delivered = deliver(pkt, datagram, *it->second);
    }
    if (delivered) {
        ++counters_.rx_packets;
        counters_.rx_bytes += datagram.size();
    }
}

bool PortCore::deliver(const ib::Packet& pkt, bytes datagram, Qp& qp) {
    if (ib::transport_of(pkt.bth.opcode) != ib::Transport::ud) {
        count(DeliveryDrop::opcode_not_for_qp);
        return false;
    }
    std::optional<std::size_t> pkey_index;
    if (qp.gsi) {
        pkey_index = pkey_index_matching(pkt.bth.pkey);
    } else if (qp.pkey_index < attributes_.pkey_table.size() &&
               pkeys_match(pkt.bth.pkey, attributes_.pkey_table[qp.pkey_index])) {
        pkey_index = qp.pkey_index;
    }
    if (!pkey_index) {
        count(DeliveryDrop::pkey_mismatch);
        return false;
    }
    if (pkt.ext.deth.qkey != qp.qkey) {
        count(DeliveryDrop::qkey_mismatch);
        return false;
    }
    if (qp.receive_queue.empty() || qp.completions.full()) {  // no buffer, or a CQ the owner does not poll
        count(DeliveryDrop::no_receive_buffer);
        return false;
    }
    const ReceiveBuffer buf = qp.receive_queue.front();
    qp.receive_queue.pop_front();
    Completion c;
    c.wr_id = buf.wr_id;
    c.kind = CompletionKind::receive;
    c.qp_num = qp.qpn;
    if (buf.buffer.size() < kGrhSlotSize + pkt.payload.size()) {
        c.status = CompletionStatus::local_length_error;
        qp.completions.push_back(c);
        count(DeliveryDrop::buffer_too_small);
        return false;
    }
    if (pkt.grh) std::memcpy(buf.buffer.data(), datagram.data() + ib::Lrh::size, kGrhSlotSize);
    if (!pkt.payload.empty()) std::memcpy(buf.buffer.data() + kGrhSlotSize, pkt.payload.data(), pkt.payload.size());
    c.byte_len = static_cast<std::uint32_t>(kGrhSlotSize + pkt.payload.size());
    c.src_qp = pkt.ext.deth.src_qp;
    c.slid = pkt.lrh.slid;
    c.sl = pkt.lrh.sl;
    c.grh_present = pkt.grh.has_value();
    c.pkey_index = static_cast<std::uint16_t>(*pkey_index);
    if (pkt.ext.present & ib::eth_immdt) c.immediate = pkt.ext.immdt.value;
    qp.completions.push_back(c);
    return true;
}

bool PortCore::transmit_raw(bytes packet) {
    if (tap_) tap_(packet, true);
    if (!link_.transmit(packet)) return false;
    ++counters_.tx_packets;
    counters_.tx_bytes += packet.size();
    return true;
}

expected<std::size_t, Error> PortCore::send(Qp& qp, std::span<const SendRequest> requests) {
    std::size_t accepted = 0;
    for (const SendRequest& req : requests) {
        auto refuse = [&](Errc code, std::string detail) -> expected<std::size_t, Error> {
            if (accepted == 0) return unexpected(Error{code, std::move(detail)});
            link_.flush();
            return accepted;
        };
        if (qp.sends_outstanding >= qp.send_depth) break;
        if (attributes_.state != PortState::active) return refuse(Errc::port_not_active, to_string(attributes_.state));
        if (req.payload.size() > ib::mtu_bytes(attributes_.active_mtu))
            return refuse(Errc::payload_too_long, std::to_string(req.payload.size()) + " bytes");
        const bool multicast = ib::is_multicast_lid(req.ah.dlid);
        if (multicast && (!req.ah.grh || req.remote_qpn != ib::kQpnMulticast))
            return refuse(Errc::invalid_argument, "multicast needs a GRH and remote QPN 0xFFFFFF");
        if (req.ah.grh && req.ah.grh->sgid_index != 0) return refuse(Errc::invalid_argument, "only GID index 0 exists");
        if (qp.pkey_index >= attributes_.pkey_table.size()) return refuse(Errc::bad_pkey_index, "P_Key table shrank");

        ib::PacketSpec spec;
        spec.lrh.vl = 0;
        spec.lrh.sl = req.ah.sl;
        spec.lrh.dlid = req.ah.dlid;
        spec.lrh.slid = static_cast<std::uint16_t>(attributes_.lid | req.ah.src_path_bits);
        if (req.ah.grh) {
            ib::Grh grh;
            grh.tclass = req.ah.grh->traffic_class;
            grh.flow_label = req.ah.grh->flow_label;
            grh.hop_limit = req.ah.grh->hop_limit;
            grh.sgid = attributes_.gid();
            grh.dgid = req.ah.grh->dgid;
            spec.grh = grh;
        }
        spec.bth.opcode = req.immediate ? ib::op::ud_send_only_imm : ib::op::ud_send_only;
        spec.bth.se = req.solicited;
        spec.bth.pkey = attributes_.pkey_table[qp.pkey_index];
        spec.bth.dest_qp = req.remote_qpn & ib::kQpnMask;
        spec.bth.psn = qp.psn;
        qp.psn = (qp.psn + 1) & ib::kPsnMask;
        // A Q_Key with the high bit set in a work request means "use the
        // QP's own Q_Key" (IBA 10.2.4, controlled Q_Keys).
        spec.ext.deth.qkey = (req.remote_qkey & ib::kQKeyControlledBit) ? qp.qkey : req.remote_qkey;
        spec.ext.deth.src_qp = qp.qpn;
        if (req.immediate) spec.ext.immdt.value = *req.immediate;
        spec.payload = req.payload;

        Completion c;
        c.wr_id = req.wr_id;
        c.kind = CompletionKind::send;
        c.qp_num = qp.qpn;
        auto built = ib::build_packet(spec, tx_buffer_);
        if (!built) return refuse(Errc::invalid_argument, ib::to_string(built.error()));
        if (!transmit_raw(bytes(tx_buffer_).first(*built))) c.status = CompletionStatus::general_error;
        qp.completions.push_back(c);
        ++qp.sends_outstanding;
        ++accepted;
    }
    if (accepted > 0) link_.flush();
    return accepted;
}

// ---------------------------------------------------------------------------
// RC queue pairs (rc/rc_port.h)

class PortCore::RcHandle final : public RcQueuePair {
public:
    RcHandle(PortCore& port, std::unique_ptr<RcEntry> e) : port_(port), e_(std::move(e)) {
        port_.rc_qps_[e_->engine.qpn()] = e_.get();
    }
    ~RcHandle() override { port_.rc_qps_.erase(e_->engine.qpn()); }
    std::uint32_t qpn() const override { return e_->engine.qpn(); }
    expected<void, std::string> connect(std::uint16_t remote_lid, const rc::RtrAttributes& rtr,
                                        const rc::RtsAttributes& rts) override {
        if (!ib::is_unicast_lid(remote_lid)) return unexpected("remote LID " + std::to_string(remote_lid) + ": not unicast");
        rc::RtrAttributes a = rtr;
        a.pmtu = std::min<std::uint32_t>(a.pmtu, ib::mtu_bytes(port_.attributes_.active_mtu));
        if (e_->engine.state() == rc::QpState::reset)
            if (auto r = e_->engine.to_init(); !r) return r;
        if (auto r = e_->engine.to_rtr(a); !r) return r;
        if (auto r = e_->engine.to_rts(rts); !r) return r;
        e_->remote_lid = remote_lid;
        port_.send_rc(*e_, std::chrono::steady_clock::now());  // the initial credits, if receives were posted
        return {};
    }
    // The engine checks a READ's buffer against the port's memory (its
    // protection domain), at post and again when the data comes.
    expected<void, std::string> post_send(rc::SendWr wr) override {
        auto r = e_->engine.post_send(std::move(wr));
        if (r) port_.send_rc(*e_, std::chrono::steady_clock::now());
        return r;
    }
    // Receives may be posted before connect() (the QP is in INIT from its
    // creation): their credits go in the first, unsolicited ACK (C9-155).
    // Posted later, the credit update leaves at once.
    expected<void, std::string> post_recv(rc::RecvWr wr) override {
        auto r = e_->engine.post_recv(wr);
        if (r && e_->remote_lid != 0) port_.send_rc(*e_, std::chrono::steady_clock::now());
        return r;
    }
    std::vector<rc::Completion> poll() override { return e_->engine.poll(); }
    rc::QpState state() const override { return e_->engine.state(); }
    rc::RcCounters counters() const override { return e_->engine.counters(); }
    const rc::RcQp* engine() const override { return &e_->engine; }

private:
    PortCore& port_;
    std::unique_ptr<RcEntry> e_;
};

expected<std::unique_ptr<RcQueuePair>, Error> PortCore::create_rc_qp(std::uint16_t pkey_index) {
    if (pkey_index >= attributes_.pkey_table.size())
        return unexpected(Error{Errc::bad_pkey_index, "P_Key index " + std::to_string(pkey_index)});
    // From the same never-reused sequence as UD QPNs.
    if (next_qpn_ >= ib::kQpnMulticast) return unexpected(Error{Errc::resource_exhausted, "QPNs exhausted"});
    auto e = std::make_unique<RcEntry>(next_qpn_++, &memory_);
    e->pkey_index = pkey_index;
    (void)e->engine.to_init();  // receives may be posted before connect()
    return std::unique_ptr<RcQueuePair>(new RcHandle(*this, std::move(e)));
}

// A packet parse_packet refused after its CRCs and BTH checked out, for a
// connected RC QP of this port from its peer: an RC request the responder
// must NAK invalid request rather than drop (C9-83 to C9-85, C9-93): a
// reserved or unsupported opcode, a bad PadCnt, a length the opcode does
// not allow. Responses (ACKs, read responses) are dropped as they were.
void PortCore::invalid_rc_request(bytes datagram, ib::DropReason why) {
    using R = ib::DropReason;
    if (why != R::unknown_opcode && why != R::unsupported_opcode && why != R::bad_pad_count &&
        why != R::payload_exceeds_pmtu && why != R::bad_payload_length && why != R::truncated_headers)
        return;
    if (attributes_.state != PortState::armed && attributes_.state != PortState::active) return;
    const std::size_t bth = ib::Lrh::size + ((datagram[1] & 3) == 3 ? ib::Grh::size : 0);
    if (datagram.size() < bth + ib::Bth::size) return;
    const std::uint8_t opcode = datagram[bth];
    const bool response = opcode >= ib::op::rc_rdma_read_response_first && opcode <= ib::op::rc_atomic_acknowledge;
    if (ib::transport_of(opcode) != ib::Transport::rc || response) return;
    const auto it = rc_qps_.find(load_be24(datagram.data() + bth + 5));
    if (it == rc_qps_.end()) return;
    RcEntry& e = *it->second;
    const std::uint16_t dlid = load_be16(datagram.data() + 2), slid = load_be16(datagram.data() + 6);
    if (!lid_is_ours(dlid) || e.remote_lid == 0 || slid != e.remote_lid) return;
    if (e.pkey_index >= attributes_.pkey_table.size() ||
        !pkeys_match(load_be16(datagram.data() + bth + 2), attributes_.pkey_table[e.pkey_index]))
        return;
    ++counters_.undelivered[static_cast<std::size_t>(DeliveryDrop::rc_invalid_request)];
    e.engine.receive_invalid(load_be24(datagram.data() + bth + 9), std::chrono::steady_clock::now());
}

void PortCore::receive_rc(const ib::Packet& pkt, std::chrono::steady_clock::time_point now) {
    RcEntry& e = *rc_qps_.at(pkt.bth.dest_qp);
    // An RC QP has one peer: its packets come from the connected port.
    if (e.remote_lid == 0 || pkt.lrh.slid != e.remote_lid) {
        count(DeliveryDrop::rc_not_connected);
        return;
    }
    if (e.pkey_index >= attributes_.pkey_table.size() ||
        !pkeys_match(pkt.bth.pkey, attributes_.pkey_table[e.pkey_index])) {
        count(DeliveryDrop::pkey_mismatch);
        return;
    }
    const auto p = rc::decode_rc_header(pkt);
    if (!p) {
        // An atomic request: a function this QP does not support (C9-83).
        if (pkt.bth.opcode == ib::op::rc_compare_swap || pkt.bth.opcode == ib::op::rc_fetch_add) {
            count(DeliveryDrop::rc_invalid_request);
            e.engine.receive_invalid(pkt.bth.psn, now);
            return;
        }
        count(DeliveryDrop::rc_malformed);
        return;
    }
    ++counters_.rx_packets;
    // What the packet calls for (ACKs, read responses, a window that
    // opened) leaves at the backend's next service_rc(), after the batch
    // this packet came in: the engine coalesces ACKs over it.
    e.engine.receive(*p, pkt.payload, now);
}

void PortCore::send_rc(RcEntry& e, std::chrono::steady_clock::time_point now) {
    // Each packet encoded as the engine hands it over (its payload read
    // where the engine keeps it) and queued on the link.
    struct Encoder final : rc::RcQp::PacketSink {
        Encoder(PortCore& p, const rc::RcPath& r) : port(p), path(r) {}
        void send(const rc::RcPacket& p, bytes payload) override {
            sent = true;
            if (const auto n = rc::encode_rc_packet_into(p, payload, path, port.rc_wire_))
                (void)port.transmit_raw(bytes(port.rc_wire_).first(*n));
        }
        PortCore& port;
        const rc::RcPath& path;
        bool sent = false;
    };
    const rc::RcPath path{.slid = attributes_.lid, .dlid = e.remote_lid,
                          .pkey = e.pkey_index < attributes_.pkey_table.size() ? attributes_.pkey_table[e.pkey_index]
                                                                               : ib::kPKeyDefault};
    Encoder encoder(*this, path);
    e.engine.output(encoder, now);
    if (encoder.sent) link_.flush();
}

expected<rc::MemoryRegion, Error> PortCore::register_memory(std::span<std::uint8_t> memory, std::uint32_t access) {
    if (memory.empty() || memory.size() > 0xFFFFFFFFu)
        return unexpected(Error{Errc::invalid_argument, "a region of " + std::to_string(memory.size()) + " bytes"});
    if (access & ~(rc::access::local_write | rc::access::remote_write | rc::access::remote_read))
        return unexpected(Error{Errc::invalid_argument, "unknown access flags"});
    if (memory_.size() >= kMaxMemoryRegions)
        return unexpected(Error{Errc::resource_exhausted, std::to_string(kMaxMemoryRegions) + " memory regions"});
    return memory_.register_region(memory, access);
}

expected<void, Error> PortCore::deregister_memory(std::uint32_t rkey) {
    if (!memory_.deregister(rkey)) return unexpected(Error{Errc::invalid_argument, "no memory region with that R_Key"});
    return {};
}

std::optional<std::chrono::steady_clock::time_point> PortCore::next_rc_deadline() const {
    std::optional<std::chrono::steady_clock::time_point> next;
    for (const auto& [qpn, e] : rc_qps_)
        if (const auto d = e->engine.next_deadline(); d && (!next || *d < *next)) next = d;
    return next;
}

void PortCore::service_rc(std::chrono::steady_clock::time_point now) {
    for (auto& [qpn, e] : rc_qps_) {
        e->engine.tick(now);
        send_rc(*e, now);
    }
}

expected<std::unique_ptr<UdQp>, Error> PortCore::make_qp(std::uint32_t qpn, const UdQpConfig& config, bool gsi) {
    if (config.send_depth == 0 || config.receive_depth == 0)
        return unexpected(Error{Errc::invalid_argument, "queue depths must be at least 1"});
    if (config.pkey_index >= attributes_.pkey_table.size())
        return unexpected(Error{Errc::bad_pkey_index, "P_Key index " + std::to_string(config.pkey_index) + " of a " +
                                                          std::to_string(attributes_.pkey_table.size()) + "-entry table"});
    auto qp = std::make_unique<Qp>();
    qp->qpn = qpn;
    qp->qkey = config.qkey;
    qp->pkey_index = config.pkey_index;
    qp->gsi = gsi;
    qp->send_depth = config.send_depth;
    qp->receive_depth = config.receive_depth;
    qp->receive_queue.reset(config.receive_depth);
    // A CQ entry per outstanding send and per consumed buffer; buffers may
    // be reposted before their completions are polled, hence twice.
    qp->completions.reset(static_cast<std::size_t>(config.send_depth) + 2 * static_cast<std::size_t>(config.receive_depth));
    Qp* raw = qp.get();
    qps_.emplace(qpn, std::move(qp));
    return std::unique_ptr<UdQp>(std::make_unique<QpHandle>(*this, raw));
}

expected<std::unique_ptr<UdQp>, Error> PortCore::create_ud_qp(const UdQpConfig& config) {
    // QPNs 0, 1 and 0xFFFFFF are special; dynamic ones are never reused.
    if (next_qpn_ >= ib::kQpnMulticast) return unexpected(Error{Errc::resource_exhausted, "QPNs exhausted"});
    return make_qp(next_qpn_++, config, false);
}

expected<std::unique_ptr<UdQp>, Error> PortCore::create_gsi_qp(std::uint32_t send_depth, std::uint32_t receive_depth) {
    if (qps_.count(ib::kQp1)) return unexpected(Error{Errc::resource_exhausted, "QP1 is already open"});
    return make_qp(ib::kQp1, UdQpConfig{ib::kGsiQKey, 0, send_depth, receive_depth}, true);
}

void PortCore::destroy(Qp* qp) {
    std::erase_if(attachments_, [qp](const Attachment& a) { return a.qp == qp; });
    qps_.erase(qp->qpn);
}

const char* to_string(DeliveryDrop d) {
    switch (d) {
        case DeliveryDrop::port_not_ready: return "port_not_ready";
        case DeliveryDrop::dlid_not_ours: return "dlid_not_ours";
        case DeliveryDrop::multicast_without_grh: return "multicast_without_grh";
        case DeliveryDrop::multicast_not_attached: return "multicast_not_attached";
        case DeliveryDrop::unknown_qp: return "unknown_qp";
        case DeliveryDrop::opcode_not_for_qp: return "opcode_not_for_qp";
        case DeliveryDrop::pkey_mismatch: return "pkey_mismatch";
        case DeliveryDrop::qkey_mismatch: return "qkey_mismatch";
        case DeliveryDrop::no_receive_buffer: return "no_receive_buffer";
        case DeliveryDrop::not_via_switch: return "not_via_switch";
        case DeliveryDrop::rc_not_connected: return "rc_not_connected";
        case DeliveryDrop::rc_malformed: return "rc_malformed";
        case DeliveryDrop::rc_invalid_request: return "rc_invalid_request";
        case DeliveryDrop::buffer_too_small: return "buffer_too_small";
        case DeliveryDrop::smp_not_handled: return "smp_not_handled";
        case DeliveryDrop::count_: break;
    }
    return "unknown";
}

}  // namespace ipoibd::transport
