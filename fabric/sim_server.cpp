#include "fabric/sim_server.h"

#include <linux/sockios.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>

#include "sa_client/rmpp.h"
#include "sa_client/sa_mad.h"
#include "transport/pma.h"
#include "transport/soft/guid.h"
#include "transport/wire/mad.h"
#include "transport/wire/smp.h"
#include "transport/wire/smp_dr.h"

namespace ipoibd::fabric {

namespace {

constexpr std::uint32_t kGsiQkey = 0x80010000;
constexpr std::size_t kGsiReceiveBuffers = 64;
constexpr std::size_t kGsiBufferSize = transport::kGrhSlotSize + ib::kMadSize;
constexpr std::size_t kDatagramsPerWakeup = 64;  // per socket and process()
constexpr std::chrono::seconds kLivenessInterval{1};
constexpr std::size_t kMaxStaleDatagrams = 4096;  // counted when a client goes
constexpr std::size_t kMaxTransfers = 8;  // RMPP transfers per client
// What of a reassembled SA table a client can see: libumad2sim copies 224
// bytes of a MAD, so the records that end within them, and the length
// says how many (clients count records by it).
std::size_t visible_sa_length(std::size_t payload, std::uint16_t attribute_offset) {
    constexpr std::size_t room = sim::kClientReceiveLimit - sa::kSaHeaderSize;  // 168
    const std::size_t stride = std::size_t{attribute_offset} * 8;
    const std::size_t fit = stride == 0 ? room : room / stride * stride;
    return sa::kSaHeaderSize + std::min(payload, fit);
}

enum Kind : std::uint32_t { kCtl = 1, kSlot = 2, kNode = 3 };
std::uint64_t tag(Kind k, std::uint32_t id) { return (std::uint64_t{k} << 32) | id; }

sockaddr_un unix_address(std::string_view name, socklen_t& length) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const auto path = sim::abstract_address(name);
    std::memcpy(a.sun_path, path.data(), std::min(path.size(), sizeof a.sun_path));
    length = static_cast<socklen_t>(sim::abstract_address_length(name));
    return a;
}

UniqueFd unix_dgram_socket() {
    return UniqueFd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
}

// Whether a client's data socket B:in<pid> still exists: a connect() to an
// abstract name nobody holds is refused.
bool client_socket_exists(const std::string& name) {
    UniqueFd probe = unix_dgram_socket();
    if (!probe) return true;  // cannot tell: assume alive
    socklen_t len = 0;
    const sockaddr_un a = unix_address(name, len);
    return ::connect(probe.get(), reinterpret_cast<const sockaddr*>(&a), len) == 0 || errno != ECONNREFUSED;
}

// Connects a free slot's socket to the server's own control socket, which
// never sends to it: a datagram socket connected to another takes
// datagrams from that one alone, so nobody can queue MADs for the slot's
// next client, and the previous one's socket is cut off.
bool park_slot(int slot_socket, std::string_view base) {
    socklen_t len = 0;
    const sockaddr_un ctl = unix_address(sim::server_ctl_name(base), len);
    return ::connect(slot_socket, reinterpret_cast<const sockaddr*>(&ctl), len) == 0;
}

// The sender's credentials the kernel attached to a datagram (SO_PASSCRED).
std::optional<ucred> credentials_of(msghdr& msg) {
    for (cmsghdr* h = CMSG_FIRSTHDR(&msg); h != nullptr; h = CMSG_NXTHDR(&msg, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_CREDENTIALS || h->cmsg_len < CMSG_LEN(sizeof(ucred)))
            continue;
        ucred u{};
        std::memcpy(&u, CMSG_DATA(h), sizeof u);
        return u;
    }
    return std::nullopt;
}

// A pidfd of the process that sent the CONNECT (its credentials), or none
// (no pidfd_open(2) before Linux 5.3; pid 0: a process of a pid namespace
// this one cannot see).
UniqueFd open_pidfd(pid_t pid) {
    if (pid <= 0) return UniqueFd();
    return UniqueFd(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
}

// Whether the process behind a pidfd has exited (the pidfd is readable).
bool process_exited(const UniqueFd& pidfd) {
    if (!pidfd) return false;
    pollfd p{pidfd.get(), POLLIN, 0};
    return ::poll(&p, 1, 0) == 1 && (p.revents & POLLIN) != 0;
}

bool is_smp_class(std::uint8_t mgmt_class) {
    return mgmt_class == ib::mgmt_class::subn_lid_routed || mgmt_class == ib::mgmt_class::subn_directed_route;
}

// A MAD that answers another (IBA 13.4.5): the R bit, or TrapRepress.
bool is_response(std::uint8_t method) {
    return (method & ib::method::response_bit) != 0 || method == ib::method::trap_repress;
}
// A request that expects an answer: everything but Send and responses.
bool expects_response(std::uint8_t method) { return !is_response(method) && method != ib::method::send; }

std::uint64_t tid_of(const sim::SimRequest& r) { return load_be64(r.mad.data() + 8); }
void set_tid(sim::SimRequest& r, std::uint64_t tid) { store_be64(r.mad.data() + 8, tid); }

// The fabric's own address as a port of this host reaches it.
SocketAddress reachable(SocketAddress a) {
    if (a.family() == AF_INET) {
        auto* in = reinterpret_cast<sockaddr_in*>(&a.storage);
        if (in->sin_addr.s_addr == htonl(INADDR_ANY)) in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    } else if (a.family() == AF_INET6) {
        auto* in6 = reinterpret_cast<sockaddr_in6*>(&a.storage);
        if (IN6_IS_ADDR_UNSPECIFIED(&in6->sin6_addr)) in6->sin6_addr = in6addr_loopback;
    }
    return a;
}

}  // namespace

const char* to_string(SimDrop d) {
    switch (d) {
        case SimDrop::ctl_wrong_size: return "ctl_wrong_size";
        case SimDrop::ctl_bad_magic: return "ctl_bad_magic";
        case SimDrop::ctl_unknown_type: return "ctl_unknown_type";
        case SimDrop::ctl_bad_length: return "ctl_bad_length";
        case SimDrop::ctl_bad_payload: return "ctl_bad_payload";
        case SimDrop::ctl_unknown_client: return "ctl_unknown_client";
        case SimDrop::ctl_not_permitted: return "ctl_not_permitted";
        case SimDrop::ctl_no_reply: return "ctl_no_reply";
        case SimDrop::clients_full: return "clients_full";
        case SimDrop::node_has_sm: return "node_has_sm";
        case SimDrop::attach_failed: return "attach_failed";
        case SimDrop::request_wrong_size: return "request_wrong_size";
        case SimDrop::request_stale: return "request_stale";
        case SimDrop::request_bad_length: return "request_bad_length";
        case SimDrop::request_not_mad: return "request_not_mad";
        case SimDrop::request_bad_lid: return "request_bad_lid";
        case SimDrop::request_port_down: return "request_port_down";
        case SimDrop::request_send_failed: return "request_send_failed";
        case SimDrop::too_many_outstanding: return "too_many_outstanding";
        case SimDrop::response_no_client: return "response_no_client";
        case SimDrop::response_unexpected: return "response_unexpected";
        case SimDrop::request_no_sm: return "request_no_sm";
        case SimDrop::request_no_agent: return "request_no_agent";
        case SimDrop::client_queue_full: return "client_queue_full";
        case SimDrop::client_gone: return "client_gone";
        case SimDrop::local_response: return "local_response";
        case SimDrop::local_smp_refused: return "local_smp_refused";
        case SimDrop::fabric_not_mad: return "fabric_not_mad";
        case SimDrop::reply_send_failed: return "reply_send_failed";
        case SimDrop::count_: break;
    }
    return "unknown";
}

void visit(const SimCounters& c, CounterSink& out) {
    out.counter("control_messages", c.control_messages);
    out.counter("clients_connected", c.clients_connected);
    out.counter("clients_disconnected", c.clients_disconnected);
    out.counter("clients_reaped", c.clients_reaped);
    out.counter("nodes_opened", c.nodes_opened);
    out.counter("nodes_closed", c.nodes_closed);
    out.counter("mads_from_clients", c.mads_from_clients);
    out.counter("mads_to_clients", c.mads_to_clients);
    out.counter("local_smps", c.local_smps);
    out.counter("timeouts", c.timeouts);
    out.counter("class_not_supported_answers", c.class_not_supported_answers);
    visit_reasons<SimDrop>(out, "dropped_", c.dropped, [](SimDrop d) { return to_string(d); });
}

struct SimServer::Node {
    std::uint32_t id = 0;
    std::string name;
    std::uint64_t node_guid = 0;
    std::unique_ptr<transport::SoftPort> port;
    std::unique_ptr<transport::UdQp> gsi;
    std::vector<std::array<std::uint8_t, kGsiBufferSize>> buffers;
    std::set<unsigned> clients;
    std::optional<unsigned> sm_client;  // the slot that set IsSM
    Clock::time_point opened{};
    std::unique_ptr<transport::Pma> pma;  // PerfMgt requests to the port: its own counters
};

struct SimServer::Client {
    unsigned slot = 0;
    std::uint32_t pid = 0;
    std::string node;            // name of its node
    std::vector<std::uint8_t> ctl_address;  // sun_path bytes of B:ctl<pid>
    std::string in_name;         // B:in<pid>
    UniqueFd process;            // pidfd of the process that connected, when the kernel gives one
    int data = -1;               // B:out<slot> (slot_sockets_), connected to B:in<pid>
    std::map<std::uint64_t, Outstanding> outstanding;  // by TID (slot stamped)
    // GET_PORTINFO held until the port is ACTIVE (or attach_deadline).
    std::optional<sim::CtlMessage> waiting_port_info;
    Clock::time_point attach_deadline{};
    std::uint64_t mads_in = 0;
    std::uint64_t mads_out = 0;
    // SA tables coming in as RMPP transfers, by TID: the node does what
    // the kernel's MAD layer does for a umad client (ACKs the segments,
    // reassembles), at most kMaxTransfers at once.
    std::map<std::uint64_t, sa::RmppReassembler> transfers;
    // Its socket refused a datagram: released at the end of the wake-up
    // (not while its node's completions are being handled).
    bool gone = false;
};

std::uint64_t SimServer::derived_node_guid(const std::string& name) {
    // Locally administered (0x02 top byte), even: port GUID = node + 1.
    return transport::derive_port_guid("ibfabricd-sim", name) & ~std::uint64_t{0xF};
}

expected<std::unique_ptr<SimServer>, std::string> SimServer::open(SimServerOptions options, Log log) {
    if (options.max_clients < 1 || options.max_clients > kMaxSimClients)
        return unexpected("--sim-clients " + std::to_string(options.max_clients) + ": must be 1.." +
                          std::to_string(kMaxSimClients));
    const std::string ctl_name = sim::server_ctl_name(options.base_name);
    if (sim::server_out_name(options.base_name, static_cast<unsigned>(options.max_clients)).size() >
        sim::kMaxAbstractNameLength)
        return unexpected("--sim-socket '" + options.base_name + "': too long for a socket name");
    UniqueFd ctl = unix_dgram_socket();
    if (!ctl) return unexpected(std::string("could not create a unix socket: ") + std::strerror(errno));
    socklen_t len = 0;
    const sockaddr_un a = unix_address(ctl_name, len);
    if (::bind(ctl.get(), reinterpret_cast<const sockaddr*>(&a), len) != 0) {
        const int e = errno;
        return unexpected("could not bind the sim control socket @" + ctl_name + ": " + std::strerror(e) +
                          (e == EADDRINUSE ? " (another ibsim or ibfabricd serves that name)" : ""));
    }
    // Every datagram then carries its sender's pid, uid and gid: only
    // client_uids' messages are served, and the CONNECT's pid is watched.
    const int on = 1;
    if (::setsockopt(ctl.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0)
        return unexpected(std::string("setsockopt(SO_PASSCRED) on the sim control socket: ") + std::strerror(errno));
    if (options.client_uids.empty()) options.client_uids = {0, ::geteuid()};
    std::vector<UniqueFd> slot_sockets;
    for (unsigned slot = 0; slot < options.max_clients; ++slot) {
        const std::string name = sim::server_out_name(options.base_name, slot);
        UniqueFd s = unix_dgram_socket();
        if (!s) return unexpected(std::string("could not create a unix socket: ") + std::strerror(errno));
        const sockaddr_un out = unix_address(name, len);
        if (::bind(s.get(), reinterpret_cast<const sockaddr*>(&out), len) != 0) {
            const int e = errno;
            return unexpected("could not bind the sim slot socket @" + name + ": " + std::strerror(e) +
                              (e == EADDRINUSE ? " (another process holds that name)" : ""));
        }
        if (!park_slot(s.get(), options.base_name))
            return unexpected("could not connect the sim slot socket @" + name + " to @" + ctl_name + ": " +
                              std::strerror(errno));
        slot_sockets.push_back(std::move(s));
    }
    UniqueFd epoll(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll) return unexpected(std::string("epoll_create1: ") + std::strerror(errno));
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag(kCtl, 0);
    if (::epoll_ctl(epoll.get(), EPOLL_CTL_ADD, ctl.get(), &ev) != 0)
        return unexpected(std::string("epoll_ctl: ") + std::strerror(errno));
    options.fabric = reachable(options.fabric);
    return std::unique_ptr<SimServer>(new SimServer(std::move(options), std::move(log), std::move(ctl),
                                                    std::move(slot_sockets), std::move(epoll)));
}

SimServer::SimServer(SimServerOptions options, Log log, UniqueFd ctl, std::vector<UniqueFd> slot_sockets,
                     UniqueFd epoll)
    : options_(std::move(options)),
      log_(std::move(log)),
      ctl_(std::move(ctl)),
      slot_sockets_(std::move(slot_sockets)),
      epoll_(std::move(epoll)) {
    slots_.resize(options_.max_clients);
}

SimServer::~SimServer() = default;

std::size_t SimServer::client_count() const {
    return static_cast<std::size_t>(std::count_if(slots_.begin(), slots_.end(), [](const auto& c) { return c != nullptr; }));
}

const transport::SoftPort* SimServer::node_port(const std::string& name) const {
    const auto it = nodes_.find(name);
    return it == nodes_.end() ? nullptr : it->second->port.get();
}

void SimServer::set_fabric_keys(const FabricKeys& keys) {
    options_.keys = keys;
    for (auto& [name, node] : nodes_) (void)node->port->set_fabric_keys(keys);
}

// ---------------------------------------------------------------------------
// The loop

void SimServer::process(Clock::time_point now) {
    std::array<epoll_event, 32> events{};
    const int n = ::epoll_wait(epoll_.get(), events.data(), static_cast<int>(events.size()), 0);
    for (int i = 0; i < n; ++i) {
        const epoll_event& e = events[static_cast<std::size_t>(i)];
        const auto kind = static_cast<Kind>(e.data.u64 >> 32);
        const auto id = static_cast<std::uint32_t>(e.data.u64);
        if (kind == kCtl) {
            on_control(now);
        } else if (kind == kSlot) {
            if (id < slots_.size() && slots_[id]) on_client_data(id, now);
        } else if (kind == kNode) {
            for (auto& [name, node] : nodes_) {
                if (node->id != id) continue;
                on_node(*node, now);
                break;
            }
        }
    }
    reap_gone();
    answer_waiting(now);
}

void SimServer::reap_gone() {
    for (unsigned slot = 0; slot < slots_.size(); ++slot)
        if (slots_[slot] && slots_[slot]->gone) release(slot, true);
}

void SimServer::tick(Clock::time_point now) {
    // Requests nobody answered: back to their clients with status 110.
    for (auto& c : slots_) {
        if (!c) continue;
        std::vector<sim::SimRequest> expired;
        for (auto it = c->outstanding.begin(); it != c->outstanding.end();) {
            if (it->second.deadline > now) {
                ++it;
                continue;
            }
            expired.push_back(it->second.request);
            c->transfers.erase(it->first);
            it = c->outstanding.erase(it);
        }
        for (sim::SimRequest& r : expired) {
            r.status = sim::kStatusTimedOut;
            ++counters_.timeouts;
            to_client(*c, r);
        }
    }
    reap_gone();
    if (now >= next_liveness_) {
        next_liveness_ = now + kLivenessInterval;
        // The process first: its socket's name, once it let it go, is
        // anyone's to bind, and would then keep the slot for ever.
        for (unsigned slot = 0; slot < slots_.size(); ++slot)
            if (slots_[slot] && (process_exited(slots_[slot]->process) || !client_socket_exists(slots_[slot]->in_name)))
                release(slot, true);
    }
    for (auto& [name, node] : nodes_) on_node(*node, now);  // process() may queue MADs on QP1: deliver them now
    answer_waiting(now);
}

// ---------------------------------------------------------------------------
// Control

bool SimServer::permitted(const std::optional<ucred>& cred) const {
    return cred && std::find(options_.client_uids.begin(), options_.client_uids.end(), cred->uid) !=
                       options_.client_uids.end();
}

void SimServer::reply(const sim::CtlMessage& m, const CtlSender& to) {
    auto bytes_out = sim::encode_ctl(m);
    if (!bytes_out) return;
    // A reply stays charged to B:ctl's send buffer until its receiver
    // reads it, and the client's socket, connected to B:ctl, takes any
    // number: a sender that never reads could fill the buffer and leave
    // every client waiting for ever on a reply never sent. Senders of
    // other users get their ERRORs while at least 3/4 of it is free.
    if (!to.permitted) {
        int queued = 0;
        int buffer = 0;
        socklen_t size = sizeof buffer;
        if (::ioctl(ctl_.get(), SIOCOUTQ, &queued) != 0 ||
            ::getsockopt(ctl_.get(), SOL_SOCKET, SO_SNDBUF, &buffer, &size) != 0 || queued > buffer / 4) {
            ++counters_.dropped[static_cast<std::size_t>(SimDrop::ctl_no_reply)];
            return;
        }
    }
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const std::size_t n = std::min(to.address.size(), sizeof a.sun_path);
    std::memcpy(a.sun_path, to.address.data(), n);
    if (::sendto(ctl_.get(), bytes_out->data(), bytes_out->size(), MSG_NOSIGNAL | MSG_DONTWAIT,
                 reinterpret_cast<const sockaddr*>(&a), static_cast<socklen_t>(sim::kSunFamilySize + n)) < 0)
        ++counters_.dropped[static_cast<std::size_t>(SimDrop::ctl_no_reply)];
}

void SimServer::refuse(SimDrop why, std::uint32_t client_id, const CtlSender& to) {
    ++counters_.dropped[static_cast<std::size_t>(why)];
    sim::CtlMessage m;
    m.client_id = client_id;
    m.type = sim::CtlType::error;
    reply(m, to);
}

void SimServer::on_control(Clock::time_point now) {
    for (std::size_t i = 0; i < kDatagramsPerWakeup; ++i) {
        std::array<std::uint8_t, sim::kCtlMessageSize + 1> buf{};
        sockaddr_un from{};
        iovec iov{buf.data(), buf.size()};
        alignas(cmsghdr) std::array<std::uint8_t, CMSG_SPACE(sizeof(ucred))> control{};
        msghdr msg{};
        msg.msg_name = &from;
        msg.msg_namelen = sizeof from;
        msg.msg_iov = &iov;
        msg.msg_iovlen = 1;
        msg.msg_control = control.data();
        msg.msg_controllen = control.size();
        const ssize_t n = ::recvmsg(ctl_.get(), &msg, MSG_TRUNC | MSG_CMSG_CLOEXEC);
        if (n < 0) return;
        const socklen_t from_len = msg.msg_namelen;
        ++counters_.control_messages;
        CtlSender sender;
        if (from_len > sim::kSunFamilySize) {
            const auto* path = reinterpret_cast<const std::uint8_t*>(from.sun_path);
            sender.address.assign(path, path + (from_len - sim::kSunFamilySize));
        }
        sender.cred = credentials_of(msg);
        sender.permitted = permitted(sender.cred);
        const std::size_t got = std::min<std::size_t>(static_cast<std::size_t>(n), buf.size());
        auto parsed = sim::parse_ctl(bytes(buf.data(), static_cast<std::size_t>(n) > buf.size() ? buf.size() : got));
        if (static_cast<std::size_t>(n) != sim::kCtlMessageSize) {
            refuse(SimDrop::ctl_wrong_size, 0, sender);
            continue;
        }
        if (!parsed) {
            const SimDrop why = parsed.error() == sim::CtlError::bad_magic      ? SimDrop::ctl_bad_magic
                                : parsed.error() == sim::CtlError::unknown_type ? SimDrop::ctl_unknown_type
                                : parsed.error() == sim::CtlError::bad_length   ? SimDrop::ctl_bad_length
                                                                                : SimDrop::ctl_wrong_size;
            refuse(why, 0, sender);
            continue;
        }
        sim::CtlMessage m = *parsed;
        if (m.type == sim::CtlType::connect) {
            connect_client(m, sender, now);
            continue;
        }
        if (m.type == sim::CtlType::error) {
            refuse(SimDrop::ctl_unknown_type, m.client_id, sender);
            continue;
        }
        // Everything else must come from the client of that slot.
        Client* c = m.client_id < slots_.size() ? slots_[m.client_id].get() : nullptr;
        if (!c || c->ctl_address != sender.address) {
            refuse(SimDrop::ctl_unknown_client, m.client_id, sender);
            continue;
        }
        // And from a user who may attach: once a killed client let its
        // B:ctl<pid> go, anyone may bind the name until it is reaped.
        if (!sender.permitted) {
            refuse(SimDrop::ctl_not_permitted, m.client_id, sender);
            continue;
        }
        Node& node = *nodes_.at(c->node);
        const auto& sma = node.port->managed().sma();
        switch (m.type) {
            case sim::CtlType::disconnect:
                // What the client sent before saying goodbye comes first
                // (the two sockets are read in no particular order).
                on_client_data(m.client_id, now);
                if (!slots_[m.client_id]) break;  // gone while its MADs were handled
                reply(m, sender);
                ++counters_.clients_disconnected;
                release(m.client_id, false);
                break;
            case sim::CtlType::get_vendor: {
                const ib::NodeInfo ni = sma.node_info();
                sim::put_vendor({.vendor_id = ni.vendor_id, .vendor_part_id = ni.device_id, .hw_ver = ni.revision,
                                 .fw_ver = 1},
                                m);
                reply(m, sender);
                break;
            }
            case sim::CtlType::get_nodeinfo: {
                std::fill(m.data.begin(), m.data.end(), 0);
                sma.node_info().write_to(m.data.data());
                m.len = static_cast<std::uint32_t>(sim::ctl_payload_size(m.type));
                reply(m, sender);
                break;
            }
            case sim::CtlType::get_portinfo:
                if (!answer_port_info(*c, m, sender, now, false)) c->waiting_port_info = m;
                break;
            case sim::CtlType::get_pkeys: {
                std::fill(m.data.begin(), m.data.end(), 0);
                const auto attrs = node.port->attributes();
                for (std::size_t k = 0; k < 32 && k < attrs.pkey_table.size(); ++k)
                    store_be16(m.data.data() + 2 * k, attrs.pkey_table[k]);
                m.len = static_cast<std::uint32_t>(sim::ctl_payload_size(m.type));
                reply(m, sender);
                break;
            }
            case sim::CtlType::get_port: {
                const auto attrs = node.port->attributes();
                sim::put_get_port_reply({.lid = attrs.lid, .port_state = static_cast<std::uint8_t>(attrs.state)}, m);
                reply(m, sender);
                break;
            }
            case sim::CtlType::get_gid:
            case sim::CtlType::get_guid: {
                // ibsim's layout: [8-byte GID prefix, wire order] + the node
                // GUID as a raw host-order u64 (little-endian here).
                std::fill(m.data.begin(), m.data.end(), 0);
                std::size_t at = 0;
                if (m.type == sim::CtlType::get_gid) {
                    store_be64(m.data.data(), node.port->attributes().subnet_prefix);
                    at = 8;
                }
                for (std::size_t b = 0; b < 8; ++b)
                    m.data[at + b] = static_cast<std::uint8_t>(node.node_guid >> (8 * b));
                m.len = static_cast<std::uint32_t>(sim::ctl_payload_size(m.type));
                reply(m, sender);
                break;
            }
            case sim::CtlType::set_issm: {
                auto issm = sim::read_set_issm(m);
                if (!issm) {
                    refuse(SimDrop::ctl_bad_payload, m.client_id, sender);
                    break;
                }
                if (*issm && node.sm_client && *node.sm_client != c->slot) {
                    refuse(SimDrop::node_has_sm, m.client_id, sender);
                    break;
                }
                if (*issm) {
                    node.sm_client = c->slot;
                } else if (node.sm_client == c->slot) {
                    node.sm_client.reset();
                }
                node.port->managed().set_is_sm(node.sm_client.has_value());
                reply(m, sender);
                break;
            }
            case sim::CtlType::connect:
            case sim::CtlType::error: break;
        }
    }
}

bool SimServer::answer_port_info(Client& c, sim::CtlMessage m, const CtlSender& to, Clock::time_point now,
                                 bool waited) {
    Node& node = *nodes_.at(c.node);
    const bool active = node.port->attributes().state == transport::PortState::active;
    if (!active && !waited && now < c.attach_deadline) return false;
    ib::PortInfo pi = node.port->managed().sma().port_info();
    pi.m_key = 0;  // the SM's secret: a Get without it shows 0 (M_KeyProtectBits 1)
    std::fill(m.data.begin(), m.data.end(), 0);
    pi.write_to(m.data.data());
    m.len = static_cast<std::uint32_t>(sim::ctl_payload_size(m.type));
    reply(m, to);
    return true;
}

void SimServer::answer_waiting(Clock::time_point now) {
    for (auto& c : slots_) {
        if (!c || !c->waiting_port_info) continue;
        const bool active = nodes_.at(c->node)->port->attributes().state == transport::PortState::active;
        if (!active && now < c->attach_deadline) continue;
        const sim::CtlMessage m = *c->waiting_port_info;
        c->waiting_port_info.reset();
        const CtlSender client{.address = c->ctl_address, .cred = std::nullopt, .permitted = true};
        answer_port_info(*c, m, client, now, true);
    }
}

void SimServer::connect_client(sim::CtlMessage m, const CtlSender& from, Clock::time_point now) {
    // The user first: a node of this fabric speaks with the fabric key,
    // which only the server's own user (and root) may read.
    if (!from.permitted) {
        refuse(SimDrop::ctl_not_permitted, 0, from);
        // Once per user: anyone may send these as fast as they like.
        if (log_ && from.cred && logged_uids_.insert(from.cred->uid).second)
            log_("sim: CONNECT refused: pid " + std::to_string(from.cred->pid) + " runs as uid " +
                 std::to_string(from.cred->uid) +
                 ", which may not attach (root and ibfabricd's own user may; logged once per user, "
                 "dropped_ctl_not_permitted counts them all)");
        return;
    }
    auto info = sim::read_client_info(m);
    if (!info) {
        refuse(SimDrop::ctl_bad_payload, 0, from);
        return;
    }
    // The sender must be the client's own control socket B:ctl<pid>.
    const auto expected_ctl = sim::abstract_address(sim::client_ctl_name(options_.base_name, info->id));
    if (expected_ctl != from.address) {
        refuse(SimDrop::ctl_unknown_client, 0, from);
        return;
    }
    // A pid seen again: that process is gone (pids are reused only then).
    for (unsigned s = 0; s < slots_.size(); ++s)
        if (slots_[s] && slots_[s]->pid == info->id) release(s, true);
    const auto free_slot = std::find(slots_.begin(), slots_.end(), nullptr);
    if (free_slot == slots_.end()) {
        refuse(SimDrop::clients_full, 0, from);
        if (log_) log_("sim: client " + std::to_string(info->id) + " refused: all " + std::to_string(slots_.size()) +
                       " slots taken (--sim-clients)");
        return;
    }
    const auto slot = static_cast<unsigned>(free_slot - slots_.begin());
    const std::string name = info->nodeid.empty() ? options_.default_node : info->nodeid;
    Node* node = nullptr;
    if (auto it = nodes_.find(name); it != nodes_.end()) node = it->second.get();
    if (info->issm && node && node->sm_client) {
        refuse(SimDrop::node_has_sm, 0, from);
        return;
    }
    auto client = std::make_unique<Client>();
    client->slot = slot;
    client->pid = info->id;
    client->node = name;
    client->ctl_address = from.address;
    client->process = open_pidfd(from.cred ? from.cred->pid : 0);
    client->in_name = sim::client_in_name(options_.base_name, info->id);
    client->attach_deadline = now + options_.attach_wait;
    client->data = slot_sockets_[slot].get();
    socklen_t in_len = 0;
    const sockaddr_un in = unix_address(client->in_name, in_len);
    if (::connect(client->data, reinterpret_cast<const sockaddr*>(&in), in_len) != 0) {
        const int e = errno;
        refuse(SimDrop::attach_failed, 0, from);
        if (log_) log_("sim: client " + std::to_string(info->id) + " refused: its data socket: " + std::strerror(e));
        return;
    }
    if (!node) {
        std::string error;
        node = open_node(name, error);
        if (!node) {
            refuse(SimDrop::attach_failed, 0, from);
            if (log_) log_("sim: client " + std::to_string(info->id) + " refused: node " + name + ": " + error);
            return;
        }
    }
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag(kSlot, slot);
    (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, client->data, &ev);
    node->clients.insert(slot);
    if (info->issm) {
        node->sm_client = slot;
        node->port->managed().set_is_sm(true);
    }
    slots_[slot] = std::move(client);
    ++counters_.clients_connected;
    if (log_)
        log_("sim: client " + std::to_string(info->id) + " attached to node " + name + " as slot " +
             std::to_string(slot));
    sim::ClientInfo answer = *info;
    answer.id = slot;
    answer.nodeid = name.substr(0, sim::ClientInfo::max_nodeid_length);
    if (!sim::put_client_info(answer, m)) answer.nodeid.clear(), (void)sim::put_client_info(answer, m);
    m.client_id = slot;
    reply(m, from);
}

void SimServer::release(unsigned slot, bool reaped) {
    if (slot >= slots_.size() || !slots_[slot]) return;
    std::unique_ptr<Client> c = std::move(slots_[slot]);
    if (reaped) ++counters_.clients_reaped;
    (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, c->data, nullptr);
    // What the client left unread goes with it, counted: reconnecting the
    // socket throws it away unseen. (A client sending as fast as this
    // reads could keep it here: what is left after the bound goes
    // uncounted.)
    for (std::size_t i = 0; i < kMaxStaleDatagrams; ++i) {
        std::array<std::uint8_t, 1> junk{};
        if (::recv(c->data, junk.data(), junk.size(), MSG_DONTWAIT | MSG_TRUNC) < 0) break;
        ++counters_.dropped[static_cast<std::size_t>(SimDrop::request_stale)];
    }
    (void)park_slot(c->data, options_.base_name);
    if (log_)
        log_("sim: client " + std::to_string(c->pid) + " (slot " + std::to_string(slot) + ", node " + c->node + ") " +
             (reaped ? "is gone" : "disconnected"));
    auto it = nodes_.find(c->node);
    if (it == nodes_.end()) return;
    Node& node = *it->second;
    node.clients.erase(slot);
    if (node.sm_client == slot) {
        node.sm_client.reset();
        node.port->managed().set_is_sm(false);
    }
    if (node.clients.empty()) close_node(node);
}

SimServer::Node* SimServer::open_node(const std::string& name, std::string& error) {
    const auto g = options_.node_guids.find(name);
    const std::uint64_t node_guid = g != options_.node_guids.end() ? g->second : derived_node_guid(name);
    transport::SoftPortConfig config;
    config.fabric = options_.fabric;
    config.node_guid = node_guid;
    config.port_guid = node_guid + 1;  // NodeGUID + LocalPortNum, as the client's sysfs says
    config.node_description = name;
    config.mtu = options_.mtu;
    config.keys = options_.keys;
    auto port = transport::SoftPort::open(config);
    if (!port) {
        error = port.error().message();
        return nullptr;
    }
    auto node = std::make_unique<Node>();
    node->id = next_node_id_++;
    node->name = name;
    node->node_guid = node_guid;
    node->port = std::move(*port);
    node->opened = Clock::now();
    auto gsi = node->port->create_gsi_qp(static_cast<std::uint32_t>(options_.max_outstanding * 2), kGsiReceiveBuffers);
    if (!gsi) {
        error = gsi.error().message();
        return nullptr;
    }
    node->gsi = std::move(*gsi);
    node->buffers.resize(kGsiReceiveBuffers);
    std::vector<transport::ReceiveBuffer> posts;
    for (std::size_t i = 0; i < node->buffers.size(); ++i) posts.push_back({i, node->buffers[i]});
    (void)node->gsi->post_receive(posts);
    Node* raw = node.get();
    node->pma = std::make_unique<transport::Pma>([raw](std::uint8_t select) -> std::optional<transport::Pma::Selected> {
        const std::uint8_t num = raw->port->attributes().port_num;
        if (select != 0 && select != num) return std::nullopt;  // 0: the CA's only port
        return transport::Pma::Selected{num, transport::pma_port_counters(raw->port->counters())};
    });
    node->port->managed().set_local_sm(true);
    node->port->managed().set_smp_intercept([this, raw](const ib::Packet& p) { return on_node_smp(*raw, p); });
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = tag(kNode, node->id);
    (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_ADD, node->port->fd(), &ev);
    ++counters_.nodes_opened;
    if (log_) {
        char guid[32];
        std::snprintf(guid, sizeof guid, "0x%016llx", static_cast<unsigned long long>(node_guid));
        log_("sim: node " + name + " (node GUID " + guid + ") plugged in from " + raw->port->local_address().to_string());
    }
    nodes_[name] = std::move(node);
    return raw;
}

namespace {
void visit_node(const transport::SoftPort& port, const transport::Pma& pma, CounterSink& out) {
    port.visit_counters(out);
    visit(pma.counters(), out);
}
}  // namespace

void SimServer::visit_node_counters(CounterSink& out) const {
    SummingSink sum;
    closed_nodes_.visit(sum);
    for (const auto& [name, node] : nodes_) visit_node(*node->port, *node->pma, sum);
    sum.visit(out);
}

void SimServer::close_node(Node& node) {
    (void)::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, node.port->fd(), nullptr);
    visit_node(*node.port, *node.pma, closed_nodes_);  // kept: its drops outlive it
    ++counters_.nodes_closed;
    if (log_) log_("sim: node " + node.name + " unplugged (no client left)");
    nodes_.erase(node.name);  // the port goes: its link packets stop, the switch and SM see it leave
}

// ---------------------------------------------------------------------------
// MADs from clients

void SimServer::on_client_data(unsigned slot, Clock::time_point now) {
    for (std::size_t i = 0; i < kDatagramsPerWakeup; ++i) {
        Client* c = slots_[slot].get();
        if (!c) return;
        std::array<std::uint8_t, sim::kSimRequestSize + 1> buf{};
        const ssize_t n = ::recv(c->data, buf.data(), buf.size(), MSG_TRUNC);
        if (n < 0) {
            if (errno == ECONNREFUSED) release(slot, true);
            return;
        }
        if (static_cast<std::size_t>(n) != sim::kSimRequestSize) {
            ++counters_.dropped[static_cast<std::size_t>(SimDrop::request_wrong_size)];
            continue;
        }
        auto r = sim::parse_request(bytes(buf.data(), sim::kSimRequestSize));
        if (!r) {
            ++counters_.dropped[static_cast<std::size_t>(SimDrop::request_bad_length)];
            continue;
        }
        ++counters_.mads_from_clients;
        ++c->mads_in;
        from_client(*c, *r, now);
    }
}

void SimServer::fail_request(Client& c, sim::SimRequest r, SimDrop why) {
    ++counters_.dropped[static_cast<std::size_t>(why)];
    const std::uint8_t method = r.mad[3];
    if (!expects_response(method)) return;  // nobody waits for it
    c.outstanding.erase(tid_of(r));
    r.status = sim::kStatusTimedOut;
    ++counters_.timeouts;
    to_client(c, r);
}

void SimServer::from_client(Client& c, sim::SimRequest r, Clock::time_point now) {
    Node& node = *nodes_.at(c.node);
    const std::uint8_t base_version = r.mad[0];
    const std::uint8_t mgmt_class = r.mad[1];
    const std::uint8_t method = r.mad[3];
    if (base_version != ib::kMadBaseVersion) {
        fail_request(c, r, SimDrop::request_not_mad);
        return;
    }
    if (r.slid == 0 && r.dlid != ib::kLidPermissive) r.slid = node.port->attributes().lid;
    if (expects_response(method)) {
        if (c.outstanding.size() >= options_.max_outstanding) {
            fail_request(c, r, SimDrop::too_many_outstanding);
            return;
        }
        set_tid(r, sim::with_slot(tid_of(r), static_cast<std::uint16_t>(c.slot)));
        c.outstanding[tid_of(r)] = Outstanding{now + options_.request_timeout, r};
    }
    const bool sent = is_smp_class(mgmt_class) ? send_smp(c, r) : send_gmp(c, r);
    if (!sent) return;
    node.port->flush();
}

bool SimServer::send_smp(Client& c, sim::SimRequest& r) {
    Node& node = *nodes_.at(c.node);
    auto smp = ib::decode_smp(bytes(r.mad.data(), r.mad.size()));
    if (!smp) {
        fail_request(c, r, SimDrop::request_not_mad);
        return false;
    }
    const auto attrs = node.port->attributes();
    const std::uint16_t own_slid = attrs.lid != 0 ? attrs.lid : ib::kLidPermissive;
    std::uint16_t dlid = r.dlid;
    if (smp->is_directed_route()) {
        ib::DrDecision d;
        if (is_response(smp->method)) {
            // The answer of this node's SM to a directed-route request
            // (SMInfo): the responder's hop rule, as the SMI does it.
            smp->direction = true;
            d = ib::dr_send_response(*smp, 1, r.dlid);
        } else {
            d = ib::dr_send_request(*smp, 1);
        }
        std::array<std::uint8_t, ib::kMadSize> mad{};
        smp->write_to(mad.data());
        switch (d.action) {
            case ib::DrAction::discard: fail_request(c, r, SimDrop::request_not_mad); return false;
            case ib::DrAction::deliver: {
                if (is_response(smp->method)) {
                    fail_request(c, r, SimDrop::local_response);
                    return false;
                }
                ++counters_.local_smps;
                auto answer = node.port->managed().handle_local_smp(mad);
                if (!answer) {
                    // Refused (a bad M_Key): no answer, the request stays
                    // in flight and times out, as on hardware.
                    ++counters_.dropped[static_cast<std::size_t>(SimDrop::local_smp_refused)];
                    return false;
                }
                c.outstanding.erase(tid_of(r));
                sim::SimRequest out;
                out.dlid = ib::kLidPermissive;
                out.slid = ib::kLidPermissive;
                out.length = ib::kMadSize;
                out.mad = answer->mad;
                to_client(c, out);
                return false;
            }
            case ib::DrAction::send_on_port: dlid = ib::kLidPermissive; break;
            case ib::DrAction::send_lid_routed: dlid = d.lid; break;
        }
        std::copy(mad.begin(), mad.end(), r.mad.begin());
    } else if (dlid == 0 || !ib::is_unicast_lid(dlid)) {
        fail_request(c, r, SimDrop::request_bad_lid);
        return false;
    }
    std::array<std::uint8_t, ib::kQp0PacketSize> packet{};
    const auto n = ib::build_qp0_packet(bytes(r.mad.data(), ib::kMadSize), own_slid, dlid, packet);
    if (!n || !node.port->send_raw(bytes(packet.data(), *n))) {
        fail_request(c, r, SimDrop::request_send_failed);
        return false;
    }
    return true;
}

bool SimServer::send_gmp(Client& c, const sim::SimRequest& r) {
    Node& node = *nodes_.at(c.node);
    if (r.dlid == 0 || !ib::is_unicast_lid(r.dlid)) {
        fail_request(c, r, SimDrop::request_bad_lid);
        return false;
    }
    if (node.port->attributes().state != transport::PortState::active) {
        fail_request(c, r, SimDrop::request_port_down);
        return false;
    }
    if (!gsi_send(node, r.dlid, r.dqp, bytes(r.mad.data(), ib::kMadSize))) {
        fail_request(c, r, SimDrop::request_send_failed);
        return false;
    }
    return true;
}

bool SimServer::gsi_send(Node& node, std::uint16_t dlid, std::uint32_t qpn, bytes mad) {
    transport::SendRequest s;
    s.ah.dlid = dlid;
    s.remote_qpn = qpn;
    s.remote_qkey = kGsiQkey;
    s.payload = mad;
    auto posted = node.gsi->post_send(std::span(&s, 1));
    if (!posted || *posted != 1) {
        // The send queue is bounded: reap what finished (and deliver what
        // came in meanwhile), then try once more.
        drain_gsi(node);
        posted = node.gsi->post_send(std::span(&s, 1));
    }
    node.port->flush();
    return posted && *posted == 1;
}

// QP1's completions: received MADs to the clients (or the node's PMA),
// their buffers posted again; finished sends free their queue slots. The
// node stays: to_client() only marks a client gone, reap_gone() releases.
void SimServer::drain_gsi(Node& node) {
    std::array<transport::Completion, 32> done{};
    for (std::size_t k = node.gsi->poll(done); k > 0; k = node.gsi->poll(done)) {
        for (std::size_t j = 0; j < k; ++j) {
            const auto& wc = done[j];
            if (wc.kind != transport::CompletionKind::receive) continue;
            if (wc.status == transport::CompletionStatus::success && wc.byte_len >= transport::kGrhSlotSize)
                on_node_gmp(node,
                            bytes(node.buffers[wc.wr_id].data() + transport::kGrhSlotSize,
                                  wc.byte_len - transport::kGrhSlotSize),
                            wc.slid, wc.src_qp);
            else
                ++counters_.dropped[static_cast<std::size_t>(SimDrop::fabric_not_mad)];
            transport::ReceiveBuffer b{wc.wr_id, node.buffers[wc.wr_id]};
            (void)node.gsi->post_receive(std::span(&b, 1));
        }
    }
}

// ---------------------------------------------------------------------------
// MADs from the fabric

void SimServer::on_node(Node& node, Clock::time_point) {
    node.port->process();
    std::array<transport::PortEvent, 16> events{};
    while (node.port->poll_events(events) > 0) {
    }
    drain_gsi(node);
}

void SimServer::on_node_gmp(Node& node, bytes mad, std::uint16_t slid, std::uint32_t src_qp) {
    if (mad.size() < ib::kMadSize) {
        ++counters_.dropped[static_cast<std::size_t>(SimDrop::fabric_not_mad)];
        return;
    }
    sim::SimRequest r;
    r.dlid = node.port->attributes().lid;
    r.slid = slid;
    r.dqp = 1;
    r.sqp = src_qp;
    r.length = ib::kMadSize;
    std::copy_n(mad.begin(), ib::kMadSize, r.mad.begin());
    Client* target = nullptr;
    if (is_response(r.mad[3])) {
        const unsigned slot = sim::slot_of(tid_of(r));
        if (slot < slots_.size() && slots_[slot] && node.clients.contains(slot)) target = slots_[slot].get();
        if (!target) {
            ++counters_.dropped[static_cast<std::size_t>(SimDrop::response_no_client)];
            return;
        }
        if (!answers_request(*target, tid_of(r), r.mad[1], slid)) {
            ++counters_.dropped[static_cast<std::size_t>(SimDrop::response_unexpected)];
            return;
        }
        if (r.mad[1] == ib::mgmt_class::subn_adm && !sa_transfer(node, *target, r)) return;
        target->outstanding.erase(tid_of(r));
    } else {
        if (r.mad[1] == ib::mgmt_class::perf_mgt) {
            // The port's PMA answers, as the adapter's would (never the client).
            if (auto reply = node.pma->handle(bytes(r.mad.data(), r.mad.size())); reply && !gsi_send(node, slid, src_qp, *reply))
                ++counters_.dropped[static_cast<std::size_t>(SimDrop::reply_send_failed)];
            return;
        }
        // The shim hands a MAD to the umad agent of its class, and has
        // none for a class the program never registered: it dereferences
        // null and dies. OpenSM takes SA requests on QP1 and nothing else
        // unasked (CM, DevMgt, vendor classes: any port could send them).
        if (!node.sm_client || r.mad[1] != ib::mgmt_class::subn_adm) {
            ++counters_.dropped[static_cast<std::size_t>(!node.sm_client ? SimDrop::request_no_sm
                                                                         : SimDrop::request_no_agent)];
            answer_class_not_supported(node, r, slid, src_qp);
            return;
        }
        target = slots_[*node.sm_client].get();
    }
    to_client(*target, r);
}

// What a GSI answers for a class it does not serve (IBA 13.4.7), so that
// the requester need not wait for its timeout.
void SimServer::answer_class_not_supported(Node& node, const sim::SimRequest& r, std::uint16_t slid,
                                           std::uint32_t src_qp) {
    const auto answer = ib::class_not_supported_response(ib::MadHeader::read_from(r.mad.data()));
    if (!answer) return;  // a Send or a Trap: nobody waits for an answer
    if (!gsi_send(node, slid, src_qp, *answer)) {
        ++counters_.dropped[static_cast<std::size_t>(SimDrop::reply_send_failed)];
        return;
    }
    ++counters_.class_not_supported_answers;
}

bool SimServer::answers_request(const Client& c, std::uint64_t tid, std::uint8_t mgmt_class,
                                std::optional<std::uint16_t> slid) const {
    // Anyone on the fabric may send a response with any TID (the slot
    // bits are easy to guess): only one that matches is the client's.
    const auto it = c.outstanding.find(tid);
    if (it == c.outstanding.end()) return false;
    const sim::SimRequest& request = it->second.request;
    if (request.mad[1] != mgmt_class) return false;
    return !slid || request.dlid == *slid;
}

bool SimServer::sa_transfer(Node& node, Client& c, sim::SimRequest& r) {
    auto mad = sa::decode_sa_mad(bytes(r.mad.data(), r.mad.size()));
    if (!mad || !mad->rmpp.active() || mad->rmpp.rmpp_type != sa::rmpp_type::data) return true;  // one MAD
    const std::uint64_t tid = tid_of(r);
    auto it = c.transfers.find(tid);
    if (it == c.transfers.end()) {
        if (c.transfers.size() >= kMaxTransfers || !c.outstanding.contains(tid)) {
            ++counters_.dropped[static_cast<std::size_t>(SimDrop::response_no_client)];
            return false;
        }
        it = c.transfers.emplace(tid, sa::RmppReassembler({.window = 32, .max_segments = 64})).first;
    }
    auto step = it->second.add(*mad);
    auto send_back = [&](const sa::SaMad& m) {
        std::array<std::uint8_t, ib::kMadSize> out{};
        m.write_to(out.data());
        if (!gsi_send(node, r.slid, r.sqp, out)) ++counters_.dropped[static_cast<std::size_t>(SimDrop::reply_send_failed)];
    };
    if (!step) {
        send_back(sa::make_rmpp_abort(*mad, sa::rmpp_abort_status(step.error())));
        c.transfers.erase(it);
        ++counters_.dropped[static_cast<std::size_t>(SimDrop::fabric_not_mad)];
        return false;  // the client's request times out
    }
    if (step->ack) send_back(*step->ack);
    if (step->step != sa::RmppReassembler::Step::complete) return false;
    // The whole table, as the kernel would hand it over, cut to what the
    // shim passes on.
    sa::SaMad whole = it->second.header();
    const bytes payload = it->second.payload();
    const std::size_t length = visible_sa_length(payload.size(), whole.attribute_offset);
    std::fill(whole.data.begin(), whole.data.end(), 0);
    std::copy_n(payload.begin(), std::min(payload.size(), whole.data.size()), whole.data.begin());
    whole.write_to(r.mad.data());
    r.length = length;
    c.transfers.erase(it);
    return true;
}

bool SimServer::on_node_smp(Node& node, const ib::Packet& packet) {
    auto smp = ib::decode_smp(packet.payload);
    if (!smp) return false;  // the SMA counts it
    sim::SimRequest r;
    r.dlid = smp->is_directed_route() ? ib::kLidPermissive : packet.lrh.dlid;
    r.slid = smp->is_directed_route() ? ib::kLidPermissive : packet.lrh.slid;
    r.length = ib::kMadSize;
    if (smp->method == ib::method::trap_repress) {
        // The receiver of a Trap answers it with TrapRepress (IBA 13.4.9):
        // a client's Trap (ibsendtrap's) is answered to the client, when
        // it has that Trap in flight to the LID this comes from. Anything
        // else is the SM's answer to the SMA's own trap.
        const unsigned slot = sim::slot_of(smp->transaction_id);
        if (smp->is_directed_route() || slot >= slots_.size() || !slots_[slot] || !node.clients.contains(slot) ||
            !answers_request(*slots_[slot], smp->transaction_id, smp->mgmt_class, packet.lrh.slid))
            return false;
        smp->m_key = 0;  // the port's, which the SM puts there: its secret, never shown to a client
        smp->write_to(r.mad.data());
        slots_[slot]->outstanding.erase(smp->transaction_id);
        to_client(*slots_[slot], r);
        return true;
    }
    if (is_response(smp->method)) {
        if (smp->is_directed_route()) {
            const auto d = ib::dr_receive_response(*smp);
            if (d.action != ib::DrAction::deliver) {
                ++counters_.dropped[static_cast<std::size_t>(SimDrop::fabric_not_mad)];
                return true;
            }
        }
        smp->write_to(r.mad.data());
        const unsigned slot = sim::slot_of(smp->transaction_id);
        if (slot >= slots_.size() || !slots_[slot] || !node.clients.contains(slot)) {
            ++counters_.dropped[static_cast<std::size_t>(SimDrop::response_no_client)];
            return true;
        }
        const std::optional<std::uint16_t> from =
            smp->is_directed_route() ? std::nullopt : std::optional<std::uint16_t>(packet.lrh.slid);
        if (!answers_request(*slots_[slot], smp->transaction_id, smp->mgmt_class, from)) {
            ++counters_.dropped[static_cast<std::size_t>(SimDrop::response_unexpected)];
            return true;
        }
        slots_[slot]->outstanding.erase(smp->transaction_id);
        to_client(*slots_[slot], r);
        return true;
    }
    // Requests for an SM, not the SMA: SMInfo, and traps (IBA 14.2.5.1,
    // 14.4.11). Only when this node runs one.
    const bool for_sm = smp->attribute_id == ib::smp_attr::sm_info || smp->method == ib::method::trap;
    if (!for_sm || !node.sm_client) return false;
    if (smp->is_directed_route()) {
        const auto d = ib::dr_receive_request(*smp, 1);
        if (d.action != ib::DrAction::deliver) return false;
        r.dlid = ib::kLidPermissive;
        r.slid = packet.lrh.slid;
    }
    smp->write_to(r.mad.data());
    to_client(*slots_[*node.sm_client], r);
    return true;
}

void SimServer::to_client(Client& c, const sim::SimRequest& r) {
    if (c.gone) {
        ++counters_.dropped[static_cast<std::size_t>(SimDrop::client_gone)];
        return;
    }
    auto out = sim::encode_request(r);
    if (!out) return;  // never: every SimRequest built here has a length of at most 256
    const ssize_t n = ::send(c.data, out->data(), out->size(), MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n == static_cast<ssize_t>(out->size())) {
        ++counters_.mads_to_clients;
        ++c.mads_out;
        return;
    }
    if (n < 0 && (errno == ECONNREFUSED || errno == ENOTCONN)) {
        c.gone = true;
        ++counters_.dropped[static_cast<std::size_t>(SimDrop::client_gone)];
        return;
    }
    ++counters_.dropped[static_cast<std::size_t>(SimDrop::client_queue_full)];
}

std::string SimServer::stats() const {
    std::string s = "sim socket @" + sim::server_ctl_name(options_.base_name) + ": " + std::to_string(client_count()) +
                    " of " + std::to_string(slots_.size()) + " client slots\n";
    for (const auto& [name, node] : nodes_) {
        const auto a = node->port->attributes();
        char line[160];
        std::snprintf(line, sizeof line, "sim node %s: node GUID 0x%016llx LID 0x%04x %s, %zu client(s)%s\n", name.c_str(),
                      static_cast<unsigned long long>(node->node_guid), a.lid, transport::to_string(a.state),
                      node->clients.size(), node->sm_client ? ", IsSM" : "");
        s += line;
    }
    for (const auto& c : slots_) {
        if (!c) continue;
        s += "sim client slot " + std::to_string(c->slot) + ": pid " + std::to_string(c->pid) + " on " + c->node + ", " +
             std::to_string(c->mads_in) + " MADs in, " + std::to_string(c->mads_out) + " out, " +
             std::to_string(c->outstanding.size()) + " in flight\n";
    }
    // "sim NAME VALUE" for the server's counters, "sim_nodes NAME VALUE"
    // for its nodes' (the sections of ibfabricctl stats).
    struct Lines final : CounterSink {
        std::string& s;
        std::string prefix;
        Lines(std::string& out, std::string p) : s(out), prefix(std::move(p)) {}
        void counter(std::string_view name, std::uint64_t value) override {
            s += prefix + std::string(name) + " " + std::to_string(value) + "\n";
        }
    };
    Lines lines(s, "sim ");
    visit(counters_, lines);
    Lines node_lines(s, "sim_nodes ");
    visit_node_counters(node_lines);
    return s;
}

}  // namespace ipoibd::fabric
