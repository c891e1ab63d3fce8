#include "engine_harness.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>

#include "ipoib/ip_packet.h"
#include "ipoib/mgid.h"
#include "sa_client/sa_mad.h"
#include "transport/wire/mad.h"

namespace ipoibd::ipoib::test {

// ---------------------------------------------------------------------------
// ScriptedSa

ScriptedSa::ScriptedSa() = default;

std::size_t ScriptedSa::count(std::uint16_t attribute, std::uint8_t method) const {
    return static_cast<std::size_t>(std::count_if(requests.begin(), requests.end(), [&](const Request& r) {
        return r.mad.header.attribute_id == attribute && r.mad.header.method == method;
    }));
}

sa::SaMad ScriptedSa::answer(const sa::SaMad& request, std::uint16_t status) const {
    sa::SaMad r = request;
    // Set and Get are answered with GetResp, Delete with DeleteResp.
    r.header.method = request.header.method == ib::method::del
                          ? static_cast<std::uint8_t>(ib::method::del | ib::method::response_bit)
                          : ib::method::get_resp;
    r.header.status = status;
    r.component_mask = 0;
    return r;
}

std::optional<sa::SaMad> ScriptedSa::handle(const sa::SaMad& request, Clock::time_point now) {
    requests.push_back({now, request});
    if (silent) return std::nullopt;
    if (request.header.attribute_id == sa::sa_attr::mc_member_record) {
        if (request.header.method == ib::method::set) return join(request);
        if (request.header.method == ib::method::del) return leave(request);
    }
    if (request.header.attribute_id == sa::sa_attr::path_record && request.header.method == ib::method::get) {
        auto r = path(request);
        if (r && hold_paths) {
            held_.push_back(*r);
            return std::nullopt;
        }
        return r;
    }
    return answer(request, sa::sa_status::err_req_invalid);
}

std::vector<sa::SaMad> ScriptedSa::release_held_paths() { return std::exchange(held_, {}); }

std::optional<sa::SaMad> ScriptedSa::join(const sa::SaMad& request) {
    const auto req = sa::get_record<sa::McMemberRecord>(request);
    if (refuse_joins.count(req.mgid)) return answer(request, sa::sa_status::err_req_invalid);
    auto it = groups.find(req.mgid);
    if (it == groups.end()) {
        const bool can_create = (request.component_mask & sa::kMcMemberCreateComponents) == sa::kMcMemberCreateComponents &&
                                (req.join_state & (sa::join_state::full_member | sa::join_state::send_only_full_member));
        // A partition's broadcast group exists (OpenSM creates it for an
        // `ipoib` partition): the default one's, or a child's (its P_Key
        // is in MGID bytes 4-5, RFC 4391 4).
        const std::uint16_t mgid_pkey = static_cast<std::uint16_t>(req.mgid[4] << 8 | req.mgid[5]);
        const bool broadcast = req.mgid == broadcast_mgid(ib::kPKeyDefault) || req.mgid == broadcast_mgid(mgid_pkey);
        if (!can_create && !broadcast) return answer(request, sa::sa_status::err_req_invalid);
        Group g;
        g.record.mgid = req.mgid;
        g.record.q_key = broadcast ? kTestQkey : req.q_key;
        g.record.mlid = next_mlid_++;
        g.record.mtu = broadcast ? group_mtu : req.mtu;
        g.record.rate = broadcast ? 3 : req.rate;
        g.record.sl = req.sl;
        g.record.tclass = req.tclass;
        g.record.flow_label = req.flow_label;
        g.record.hop_limit = req.hop_limit;
        g.record.p_key = broadcast ? static_cast<std::uint16_t>(mgid_pkey | 0x8000) : 0xFFFF;
        g.record.scope = 2;
        it = groups.emplace(req.mgid, g).first;
    }
    it->second.members[req.port_gid] = static_cast<std::uint8_t>(it->second.members[req.port_gid] | req.join_state);
    sa::SaMad r = answer(request, 0);
    sa::McMemberRecord rec = it->second.record;
    rec.port_gid = req.port_gid;
    rec.join_state = req.join_state;
    (void)sa::put_record(rec, r);
    return r;
}

std::optional<sa::SaMad> ScriptedSa::leave(const sa::SaMad& request) {
    const auto req = sa::get_record<sa::McMemberRecord>(request);
    auto it = groups.find(req.mgid);
    if (it == groups.end() || !it->second.members.count(req.port_gid)) return answer(request, sa::sa_status::err_req_invalid);
    std::uint8_t& state = it->second.members[req.port_gid];
    state = static_cast<std::uint8_t>(state & ~req.join_state);
    if (state == 0) it->second.members.erase(req.port_gid);
    sa::SaMad r = answer(request, 0);
    (void)sa::put_record(req, r);
    return r;
}

std::optional<sa::SaMad> ScriptedSa::path(const sa::SaMad& request) {
    const auto req = sa::get_record<sa::PathRecord>(request);
    auto d = lids_.find(req.dgid);
    auto s = lids_.find(req.sgid);
    if (d == lids_.end() || s == lids_.end()) return answer(request, sa::sa_status::err_no_records);
    sa::PathRecord rec = req;
    rec.dlid = d->second;
    rec.slid = s->second;
    rec.mtu = 5;
    rec.rate = 3;
    rec.sl = 0;
    rec.p_key = 0xFFFF;
    sa::SaMad r = answer(request, 0);
    (void)sa::put_record(rec, r);
    return r;
}

// ---------------------------------------------------------------------------
// Host

Host::Host(World& w, EngineConfig config, transport::MemoryFabric::PortOptions options, sa::SaClient::Config sa_config)
    : world(w), port(w.fabric.add_port(options)), link(*port, {}), engine(config, *this, *this, sa_config) {
    transport::PortEvent events_buf[8];
    (void)port->poll_events(events_buf);  // the fabric's "SM programmed the port" events
    world.sa.add_port(port->attributes().gid(), port->attributes().lid);
}

void Host::send_datagram(const transport::AddressHandle& ah, std::uint32_t remote_qpn, bytes frame) {
    // The copy is made only when someone looks at it (record_frames false
    // and no drop_outgoing: nothing allocated here per frame).
    if (record_frames || drop_outgoing) {
        SentFrame f{ah, remote_qpn, Packet(frame.begin(), frame.end())};
        if (drop_outgoing && drop_outgoing(f)) return;
        if (record_frames) sent.push_back(std::move(f));
    }
    link.send(ah, remote_qpn, frame);
}

void Host::send_sa(const sa::SaMad& mad) {
    if (auto r = world.sa.handle(mad, world.now)) world.pending.push_back({this, *r});
}

void Host::start() { engine.start(port->attributes(), world.now); }

void Host::add_address(const std::string& cidr) {
    const auto slash = cidr.find('/');
    InterfaceAddress a{.ip = ip(cidr.substr(0, slash)),
                       .prefix_length = static_cast<std::uint8_t>(std::stoi(cidr.substr(slash + 1)))};
    engine.add_address(a, world.now);
}

void Host::from_host(const Packet& p, std::optional<IpAddress> next_hop) {
    engine.on_tun_packet(p, next_hop, world.now);
}

std::size_t Host::count_events(EngineEventKind k) const {
    return static_cast<std::size_t>(
        std::count_if(events.begin(), events.end(), [&](const EngineEvent& e) { return e.kind == k; }));
}

// ---------------------------------------------------------------------------
// World

Host& World::add_host(EngineConfig config, transport::MemoryFabric::PortOptions options) {
    hosts.push_back(std::make_unique<Host>(*this, config, options));
    return *hosts.back();
}

Host& World::restart_host(std::size_t i, EngineConfig config) {
    const transport::PortAttributes old = hosts[i]->port->attributes();
    std::erase_if(pending, [&](const PendingAnswer& p) { return p.host == hosts[i].get(); });
    hosts[i].reset();
    transport::MemoryFabric::PortOptions options;
    options.port_guid = old.port_guid;
    options.lid = old.lid;
    hosts[i] = std::make_unique<Host>(*this, config, options);
    return *hosts[i];
}

void World::pump() {
    for (int round = 0; round < 1000; ++round) {
        bool moved = false;
        auto answers = std::exchange(pending, {});
        for (PendingAnswer& a : answers) {
            std::array<std::uint8_t, sa::kSaMadSize> buf{};
            a.mad.write_to(buf.data());
            a.host->engine.on_sa_mad(buf, now, a.host->port->attributes().sm_lid);  // from the SM
            moved = true;
        }
        if (fabric.run() > 0) moved = true;
        for (auto& h : hosts) {
            Host* host = h.get();
            if (host->link.poll([&](const ReceivedDatagram& d) { host->engine.on_datagram(d, now); }, 1024) > 0)
                moved = true;
        }
        if (!moved && pending.empty()) return;
    }
    throw std::runtime_error("World::pump: still moving after 1000 rounds");
}

void World::advance(Clock::duration d, Clock::duration step) {
    const Clock::time_point end = now + d;
    pump();
    while (now < end) {
        Clock::time_point next = std::min(end, now + step);
        for (auto& h : hosts)
            if (auto t = h->engine.next_deadline(); t && *t > now && *t < next) next = *t;
        now = next;
        for (auto& h : hosts) h->engine.tick(now);
        pump();
    }
}

// ---------------------------------------------------------------------------
// Packets

IpAddress ip(const std::string& text) {
    if (auto v4 = parse_ipv4(text)) return IpAddress::v4(*v4);
    if (auto v6 = parse_ipv6(text)) return IpAddress::v6(*v6);
    throw std::invalid_argument("not an address: " + text);
}

namespace {

std::uint16_t inet_checksum(const std::uint8_t* p, std::size_t n, std::uint32_t sum = 0) {
    for (std::size_t i = 0; i + 1 < n; i += 2) sum += load_be16(p + i);
    if (n % 2) sum += static_cast<std::uint32_t>(p[n - 1]) << 8;
    while (sum >> 16) sum = (sum & 0xFFFF) + (sum >> 16);
    return static_cast<std::uint16_t>(~sum);
}

Packet ipv4_packet(const std::string& src, const std::string& dst, std::uint8_t protocol, const Packet& body,
                   std::uint8_t ttl = 64) {
    Packet p(20 + body.size());
    p[0] = 0x45;
    store_be16(p.data() + 2, static_cast<std::uint16_t>(p.size()));
    p[8] = ttl;
    p[9] = protocol;
    const auto s = *parse_ipv4(src), d = *parse_ipv4(dst);
    std::copy(s.begin(), s.end(), p.begin() + 12);
    std::copy(d.begin(), d.end(), p.begin() + 16);
    store_be16(p.data() + 10, inet_checksum(p.data(), 20));
    std::copy(body.begin(), body.end(), p.begin() + 20);
    return p;
}

Packet ipv6_packet(const std::string& src, const std::string& dst, std::uint8_t next_header, const Packet& body,
                   std::uint8_t hop_limit = 64) {
    Ipv6Header h;
    h.payload_length = static_cast<std::uint16_t>(body.size());
    h.next_header = next_header;
    h.hop_limit = hop_limit;
    h.source = *parse_ipv6(src);
    h.destination = *parse_ipv6(dst);
    Packet p(Ipv6Header::size + body.size());
    h.write_to(p.data());
    std::copy(body.begin(), body.end(), p.begin() + Ipv6Header::size);
    return p;
}

}  // namespace

Packet icmp_echo_v4(const std::string& src, const std::string& dst, std::uint16_t seq, std::size_t payload) {
    Packet icmp(8 + payload);
    icmp[0] = 8;  // echo request
    store_be16(icmp.data() + 4, 0x1234);
    store_be16(icmp.data() + 6, seq);
    for (std::size_t i = 0; i < payload; ++i) icmp[8 + i] = static_cast<std::uint8_t>(i);
    store_be16(icmp.data() + 2, inet_checksum(icmp.data(), icmp.size()));
    return ipv4_packet(src, dst, 1, icmp);
}

Packet icmp_echo_v6(const std::string& src, const std::string& dst, std::uint16_t seq, std::size_t payload) {
    Packet icmp(8 + payload);
    icmp[0] = 128;  // echo request
    store_be16(icmp.data() + 4, 0x1234);
    store_be16(icmp.data() + 6, seq);
    for (std::size_t i = 0; i < payload; ++i) icmp[8 + i] = static_cast<std::uint8_t>(i);
    store_be16(icmp.data() + 2, icmpv6_checksum(*parse_ipv6(src), *parse_ipv6(dst), icmp));
    return ipv6_packet(src, dst, kNextHeaderIcmpv6, icmp);
}

Packet udp_v4(const std::string& src, const std::string& dst, std::size_t payload) {
    Packet udp(8 + payload);
    store_be16(udp.data(), 40000);
    store_be16(udp.data() + 2, 5001);
    store_be16(udp.data() + 4, static_cast<std::uint16_t>(udp.size()));
    return ipv4_packet(src, dst, kIpProtocolUdp, udp, 1);
}

Packet igmpv3_report(const std::string& src, const std::string& group, bool join) {
    Packet igmp(8 + 8);
    igmp[0] = kIgmpV3Report;
    store_be16(igmp.data() + 6, 1);
    igmp[8] = join ? kRecordChangeToExclude : kRecordChangeToInclude;
    const auto g = *parse_ipv4(group);
    std::copy(g.begin(), g.end(), igmp.begin() + 12);
    store_be16(igmp.data() + 2, inet_checksum(igmp.data(), igmp.size()));
    return ipv4_packet(src, "224.0.0.22", kIpProtocolIgmp, igmp, 1);
}

Packet mldv2_report(const std::string& src, const std::string& group, bool join) {
    // Hop-by-Hop with Router Alert, then the MLDv2 report.
    Packet body(8 + 8 + 20);
    body[0] = kNextHeaderIcmpv6;
    body[1] = 0;
    body[2] = 5;  // Router Alert
    body[3] = 2;
    body[6] = 1;  // PadN
    Packet mld(8 + 20);
    mld[0] = kMldV2Report;
    store_be16(mld.data() + 6, 1);
    mld[8] = join ? kRecordChangeToExclude : kRecordChangeToInclude;
    const auto g = *parse_ipv6(group);
    std::copy(g.begin(), g.end(), mld.begin() + 12);
    store_be16(mld.data() + 2, icmpv6_checksum(*parse_ipv6(src), *parse_ipv6("ff02::16"), mld));
    std::copy(mld.begin(), mld.end(), body.begin() + 8);
    return ipv6_packet(src, "ff02::16", kNextHeaderHopByHop, body, 1);
}

}  // namespace ipoibd::ipoib::test
