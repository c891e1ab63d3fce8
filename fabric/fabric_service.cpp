#include "fabric/fabric_service.h"

#include <cstdarg>
#include <cstdio>
#include <map>

#include "common/hex.h"
#include "transport/gid.h"

namespace ipoibd::fabric {
namespace {

// The SoftRoCE port; a soft fabric listening there would take RoCEv2 frames.
constexpr std::uint16_t kRoceV2Port = 4791;
// The SM's LinkEvent batch per poll; the switch keeps the rest for the next.
constexpr std::size_t kLinkEventBatch = 16;

[[gnu::format(printf, 2, 3)]] void append(std::string& out, const char* format, ...) {
    std::va_list args;
    va_start(args, format);
    std::va_list again;
    va_copy(again, args);
    const int n = std::vsnprintf(nullptr, 0, format, args);
    va_end(args);
    if (n > 0) {
        const std::size_t old = out.size();
        out.resize(old + static_cast<std::size_t>(n) + 1);
        std::vsnprintf(out.data() + old, static_cast<std::size_t>(n) + 1, format, again);
        out.resize(old + static_cast<std::size_t>(n));
    }
    va_end(again);
}

unsigned long long ull(std::uint64_t v) { return static_cast<unsigned long long>(v); }

SaServerConfig sa_config(const FabricServiceOptions& o) {
    SaServerConfig c;
    c.partitions = o.sm.partitions;
    c.subnet_prefix = o.sm.subnet_prefix;
    c.sm_lid = o.sw.lid;
    return c;
}

}  // namespace

expected<std::unique_ptr<FabricService>, std::string> FabricService::open(FabricServiceOptions options) {
    if (options.sw.num_ports < 1 || options.sw.num_ports > Switch::kMaxPorts)
        return unexpected("switch ports " + std::to_string(options.sw.num_ports) + ": must be 1..254");
    if (options.listen.port() == kRoceV2Port)
        return unexpected(std::string("listen port 4791 is RoCEv2's; the soft fabric must not use it"));
    if (options.keys && options.keys->keys.empty()) return unexpected(std::string("a fabric key set with no key"));
    if (options.sm.m_key.mode == MKeyPolicy::Mode::derived && options.sm.m_key.secret == Secret{})
        options.sm.m_key.secret = random_secret();  // this run's keys; a restart waits for the leases
    // With a fabric key a port's datagrams are authenticated: a GUID that
    // moves to another host may take its LID along.
    options.sm.guids_move_hosts = options.keys.has_value();
    if (options.sm.m_key.protect_bits > 3)
        return unexpected("M_Key protect bits " + std::to_string(options.sm.m_key.protect_bits) + ": must be 0..3");
    if (options.sm.m_key.mode == MKeyPolicy::Mode::fixed && options.sm.m_key.fixed == 0)
        return unexpected(std::string("a fixed M_Key of 0 is no key: use none"));
    {
        // Two ports with one LID would take each other's traffic, and the
        // switch's LID is where the SM and SA answer.
        std::map<std::uint16_t, std::uint64_t> fixed;
        for (const auto& [guid, lid] : options.sm.static_lids) {
            const std::string which = "fixed LID " + hex(lid, 4) + " of GUID " + hex(guid, 16);
            if (!ib::is_unicast_lid(lid)) return unexpected(which + ": not a unicast LID (0x1..0xbfff)");
            if (options.sm_enabled && lid == options.sw.lid) return unexpected(which + ": the switch's LID");
            if (const auto [it, fresh] = fixed.emplace(lid, guid); !fresh)
                return unexpected(which + ": also fixed for GUID " + hex(it->second, 16));
        }
    }
    if (!options.sm_enabled) {
        options.sw.lid = 0;          // the external SM gives the switch its LID
        options.sm.active = false;   // and its M_Key
    }
    auto socket = transport::UdpBatchSocket::open(options.listen, nullptr);
    if (!socket) return unexpected(socket.error().message());
    std::optional<capture::ErfPcapWriter> pcap;
    if (!options.pcap.empty()) {
        auto writer = capture::ErfPcapWriter::open(options.pcap);
        if (!writer) return unexpected(writer.error().message());
        pcap.emplace(std::move(*writer));
    }
    return std::unique_ptr<FabricService>(new FabricService(std::move(options), std::move(*socket), std::move(pcap)));
}

FabricService::FabricService(FabricServiceOptions options, transport::UdpBatchSocket socket,
                             std::optional<capture::ErfPcapWriter> pcap)
    : options_(std::move(options)),
      socket_(std::move(socket)),
      pcap_(std::move(pcap)),
      output_(socket_),
      switch_(options_.sw, output_),
      sm_(options_.sm, switch_, options_.log),
      sa_(sa_config(options_), switch_,
          [this] { return FabricManagement::sa_ports(sm_, options_.sm.subnet_prefix, options_.sm.partitions); }),
      management_(switch_, sm_, sa_) {
    // The SM's hooks carry no time; the SA's Report deadlines start now.
    sm_.set_hooks({.port_active =
                       [this](const SmPort& p) {
                           sa_.port_active(p.port_guid, Clock::now());
                           management_.flush();
                       },
                   .port_lost =
                       [this](const SmPort& p) {
                           sa_.port_gone(p.port_guid, Clock::now());
                           management_.flush();
                       }});
    switch_.set_management(&management_);
    if (!options_.sm_enabled) {
        switch_.set_sm_present(false);  // the SM object stays idle: no IsSM, no SA
        management_.set_enabled(false);
    }
    // Group membership reaches the switch as the SM's Set
    // MulticastForwardingTable SMPs, like every table the SM programs.
    sa_.set_switch_view([this]() -> std::optional<SaSwitch> {
        SaSwitch s;
        s.lid = switch_.lid();
        s.node_info = switch_.node_info();
        s.description = switch_.description();
        for (std::uint8_t p = 0; p <= switch_.num_ports(); ++p) s.ports.push_back(switch_.port_info(p));
        return s;
    });
    sa_.set_multicast_programmer([this](std::uint16_t mlid, const std::set<std::uint64_t>& members) {
        sm_.set_multicast_members(mlid, members);
    });
    if (options_.keys) {
        auth_ = std::make_unique<transport::FabricAuth>(*options_.keys);
        socket_.set_auth(auth_.get());
    }
    for (std::uint16_t mlid : options_.flood_groups) switch_.set_multicast_flood(mlid, true);
    if (pcap_)
        switch_.set_tap([this](bytes packet, bool from_management) {
            pcap_->write(packet, std::chrono::system_clock::now(),
                         from_management ? capture::Direction::sent : capture::Direction::received);
        });
}

void FabricService::on_readable(Clock::time_point now) {
    const auto to_switch = [&](bytes d, const SocketAddress& from) { switch_.on_datagram(from, d, now); };
    socket_.receive(to_switch, kReceiveDatagrams);
    socket_.drain_pending(to_switch);  // the fd would not report it
}

void FabricService::tick(Clock::time_point now) {
    switch_.tick(now);
    handle_link_events(now);
    if (!options_.sm_enabled) return;
    sm_.tick(now);
    management_.tick(now);
}

void FabricService::after_wakeup(Clock::time_point now) {
    // Link events from packets (a new port) are handled at once, not at
    // the next tick.
    handle_link_events(now);
    flush();
}

void FabricService::flush() {
    socket_.flush();
    if (pcap_) pcap_->flush();
}

void FabricService::handle_link_events(Clock::time_point now) {
    LinkEvent events[kLinkEventBatch];
    const std::size_t n = switch_.poll_link_events(events);
    if (!options_.sm_enabled) return;  // an external SM learns of links by its sweeps
    for (std::size_t i = 0; i < n; ++i) sm_.on_link_event(events[i], now);
}

expected<void, std::string> FabricService::set_fabric_keys(const FabricKeys& keys) {
    if (keys.keys.empty()) return unexpected(std::string("a fabric key set with no key"));
    if (!auth_) return unexpected(std::string("the fabric runs without a key; adding one takes a restart"));
    auth_->set_keys(keys);
    return {};
}

std::size_t FabricService::set_partitions(std::vector<Partition> partitions) {
    options_.sm.partitions = partitions;  // the SA's port list reads them from here
    const std::size_t changed = sm_.set_partitions(partitions);
    sa_.set_partitions(std::move(partitions));
    return changed;
}

std::string FabricService::stats() const {
    std::string out;
    const auto& c = switch_.counters();
    append(out,
           "switch: lid 0x%04x forwarded %llu to_management %llu link_packets in %llu out %llu route_hints %llu "
           "permits %llu ports_reclaimed %llu\n",
           switch_.lid(), ull(c.forwarded), ull(c.to_management), ull(c.link_packets_in), ull(c.link_packets_out),
           ull(c.route_hints), ull(c.permits), ull(c.ports_reclaimed));
    for (std::size_t i = 0; i < kSwitchDropCount; ++i)
        if (c.dropped[i]) append(out, "switch drop %s %llu\n", to_string(static_cast<SwitchDrop>(i)), ull(c.dropped[i]));
    for (std::size_t i = 0; i < ib::kDropReasonCount; ++i)
        if (c.link_drops[i])
            append(out, "switch link_check %s %llu\n", ib::to_string(static_cast<ib::DropReason>(i)), ull(c.link_drops[i]));
    const auto& u = socket_.counters();
    append(out, "udp: rx %llu gro_messages %llu oversized %llu errors %llu tx %llu gso_runs %llu queue_full %llu tx_errors %llu\n",
           ull(u.rx_datagrams), ull(u.rx_gro_messages), ull(u.rx_oversized), ull(u.rx_errors), ull(u.tx_datagrams),
           ull(u.tx_gso_runs), ull(u.tx_queue_full), ull(u.tx_errors));
    if (switch_.faults().active()) {
        const auto& f = switch_.faults().counters();
        append(out, "faults: lost %llu corrupted %llu duplicated %llu reordered %llu delayed %llu hold_full %llu\n",
               ull(f.lost), ull(f.corrupted), ull(f.duplicated), ull(f.reordered), ull(f.delayed), ull(f.hold_full));
    }
    if (auth_) {
        const auto& a = auth_->counters();
        append(out, "auth: sealed %llu opened %llu key_rotations %llu sources %zu\n", ull(a.sealed), ull(a.opened),
               ull(a.key_rotations), auth_->sources());
        for (std::size_t i = 0; i < transport::kAuthDropCount; ++i)
            if (a.dropped[i])
                append(out, "auth drop %s %llu\n", transport::to_string(static_cast<transport::AuthDrop>(i)),
                       ull(a.dropped[i]));
    }
    const auto& s = sm_.counters();
    append(out,
           "sm: smps %llu responses %llu errors %llu timeouts %llu unexpected %llu configured %llu lost %llu "
           "traps %llu m_key_traps %llu sets_unanswered %llu\n",
           ull(s.smps_sent), ull(s.responses), ull(s.error_responses), ull(s.timeouts), ull(s.unexpected_responses),
           ull(s.ports_configured), ull(s.ports_lost), ull(s.traps), ull(s.m_key_traps), ull(s.sets_unanswered));
    for (const auto& [key, p] : sm_.ports()) {
        const auto peer = key.sw == 0 ? switch_.peer_of(key.port) : std::nullopt;
        const std::string where =
            key.sw == 0 ? std::to_string(key.port)
                        : "switch 0x" + hex(sm_.switches().at(key.sw).guid, 16) + " " + std::to_string(key.port);
        append(out, "port %s: %s lid 0x%04x guid 0x%016llx peer %s \"%s\"\n", where.c_str(), to_string(p.phase), p.lid,
               ull(p.port_guid), peer ? peer->to_string().c_str() : "-", p.description.c_str());
    }
    for (std::size_t i = 1; i < sm_.switches().size(); ++i) {
        const SmSwitch& found = sm_.switches()[i];
        append(out, "switch 0x%016llx: lid 0x%04x %s route %s \"%s\"\n", ull(found.guid), found.lid,
               found.reachable ? (found.keyed ? "managed" : "unkeyed") : "lost", path_text(found.path).c_str(),
               found.description.c_str());
    }
    return out + sa_stats();
}

std::string FabricService::sa_stats() const {
    std::string out;
    const auto& c = sa_.counters();
    append(out,
           "sa: requests %llu errors %llu malformed %llu groups_created %llu groups_deleted %llu "
           "reports_sent %llu reports_acked %llu reports_dropped %llu subscriptions %zu sm_key_refused %llu\n",
           ull(c.requests), ull(c.errors), ull(c.malformed), ull(c.groups_created), ull(c.groups_deleted),
           ull(c.reports_sent), ull(c.reports_acked), ull(c.reports_dropped), sa_.subscriptions().size(),
           ull(c.sm_key_refused));
    for (const auto& [mgid, g] : sa_.groups())
        append(out, "group %s mlid 0x%04x qkey 0x%08x pkey 0x%04x mtu %u members %zu%s\n", format_gid(mgid).c_str(),
               g.params.mlid, g.params.q_key, g.params.p_key, g.params.mtu, g.members.size(),
               g.predefined ? " (partition broadcast group)" : "");
    return out;
}

}  // namespace ipoibd::fabric
