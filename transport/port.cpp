#include "transport/port.h"

#include <cstring>

namespace ipoibd::transport {

ib::Gid PortAttributes::gid() const {
    ib::Gid g{};
    store_be64(g.data(), subnet_prefix);
    store_be64(g.data() + 8, port_guid);
    return g;
}

const char* to_string(PortState s) {
    switch (s) {
        case PortState::down: return "DOWN";
        case PortState::init: return "INIT";
        case PortState::armed: return "ARMED";
        case PortState::active: return "ACTIVE";
    }
    return "?";
}

const char* to_string(PortEvent e) {
    switch (e) {
        case PortEvent::port_active: return "port_active";
        case PortEvent::port_down: return "port_down";
        case PortEvent::lid_change: return "lid_change";
        case PortEvent::pkey_change: return "pkey_change";
        case PortEvent::sm_change: return "sm_change";
        case PortEvent::client_reregister: return "client_reregister";
    }
    return "?";
}

const char* to_string(QpType t) {
    switch (t) {
        case QpType::ud: return "UD";
        case QpType::rc: return "RC";
    }
    return "?";
}

expected<std::unique_ptr<UdQp>, Error> Port::create_gsi_qp(std::uint32_t, std::uint32_t) {
    return unexpected(Error{Errc::not_supported, "QP1 belongs to the platform's MAD layer on this port"});
}

expected<void, Error> Port::set_fabric_keys(const FabricKeys&) {
    return unexpected(Error{Errc::not_supported, "a fabric key is for soft fabric ports"});
}

expected<void, Error> Port::set_capture(PacketTap) {
    return unexpected(Error{Errc::not_supported, "this port's packets are not the backend's to capture"});
}

void Port::visit_counters(CounterSink&) const {}

expected<std::unique_ptr<UdSendQueue>, Error> Port::create_send_queue() {
    return unexpected(Error{Errc::not_supported, "this backend has no send queues for other threads"});
}

void visit(const SendQueueCounters& c, CounterSink& out) {
    out.counter("packets", c.packets.load(std::memory_order_relaxed));
    out.counter("bytes", c.bytes.load(std::memory_order_relaxed));
    out.counter("refused", c.refused.load(std::memory_order_relaxed));
    out.counter("direct", c.direct.load(std::memory_order_relaxed));
    out.counter("via_switch", c.via_switch.load(std::memory_order_relaxed));
    out.counter("dropped", c.dropped.load(std::memory_order_relaxed));
    out.counter("failed", c.failed.load(std::memory_order_relaxed));
}

expected<std::unique_ptr<RcQueuePair>, Error> Port::create_rc_qp(std::uint16_t) {
    return unexpected(Error{Errc::not_supported, "this backend has no reliable service"});
}

expected<rc::MemoryRegion, Error> Port::register_memory(std::span<std::uint8_t>, std::uint32_t) {
    return unexpected(Error{Errc::not_supported, "this backend has no reliable service"});
}

expected<void, Error> Port::deregister_memory(std::uint32_t) {
    return unexpected(Error{Errc::not_supported, "this backend has no reliable service"});
}

const char* to_string(CompletionStatus s) {
    switch (s) {
        case CompletionStatus::success: return "success";
        case CompletionStatus::local_length_error: return "local length error";
        case CompletionStatus::flushed: return "flushed";
        case CompletionStatus::general_error: return "general error";
    }
    return "?";
}

std::string Error::message() const {
    std::string what;
    switch (code) {
        case Errc::invalid_argument: what = "invalid argument"; break;
        case Errc::payload_too_long: what = "payload longer than the MTU"; break;
        case Errc::queue_full: what = "queue full"; break;
        case Errc::port_not_active: what = "port not active"; break;
        case Errc::bad_pkey_index: what = "bad P_Key index"; break;
        case Errc::resource_exhausted: what = "resources exhausted"; break;
        case Errc::not_attached: what = "not attached"; break;
        case Errc::system_error: what = "system error"; break;
        case Errc::not_supported: what = "not supported"; break;
    }
    if (!detail.empty()) what += ": " + detail;
    if (sys_errno != 0) what += std::string(" (") + std::strerror(sys_errno) + ")";
    return what;
}

}  // namespace ipoibd::transport
