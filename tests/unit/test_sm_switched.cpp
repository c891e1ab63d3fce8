// ibfabricd's SM on a subnet of several switches (fabric/sm.h, "Switches"):
// leaves and spines cabled by inter-switch links, real CA ports (their SMAs)
// on the leaves, the SM on leaf 0, and a fake clock. The SM finds every
// switch by directed route, configures the CA ports behind other switches,
// routes every LFT, and unicast and multicast cross the spines; a spine lost
// is routed around.
#include <gtest/gtest.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "fabric/sm.h"
#include "fabric/switch.h"
#include "transport/managed_port.h"
#include "transport/wire/link.h"

namespace ipoibd::fabric {
namespace {

using namespace std::chrono_literals;
using Wire = std::vector<std::uint8_t>;

SocketAddress switch_address(unsigned i) {
    return *parse_socket_address("198.18.2." + std::to_string(i + 1) + ":4791");
}
SocketAddress host_address(unsigned i) {
    return *parse_socket_address("198.18." + std::to_string(3 + i / 200) + "." + std::to_string(1 + i % 200) + ":5000");
}

Wire link_packet() {
    Wire w(ib::LinkPacket::size);
    ib::LinkPacket{}.write_to(w.data());
    return w;
}

struct Fabric;

struct Host final : transport::LinkSink {
    Host(Fabric& f, unsigned index, unsigned on_switch);
    bool transmit(bytes p) override;
    Fabric& fabric;
    SocketAddress address;
    unsigned switch_index;
    transport::ManagedPort port;
    bool link_up = false;
};

// A fat tree: leaves 0..L-1 with hosts on ports 1..H and spine s on port
// H+1+s; spine s has leaf l on port l+1.
struct Fabric {
    struct Output final : SwitchOutput {
        Fabric& fabric;
        SocketAddress self;
        Output(Fabric& f, SocketAddress a) : fabric(f), self(a) {}
        void send(const SocketAddress& to, bytes d) override { fabric.wire.push_back({self, to, Wire(d.begin(), d.end())}); }
    };
    struct Datagram {
        SocketAddress from, to;
        Wire data;
    };
    unsigned leaves, spines, hosts_per_leaf;
    Clock::time_point now = Clock::time_point{} + 1h;
    std::deque<Datagram> wire;
    std::vector<std::unique_ptr<Output>> outputs;
    std::vector<std::unique_ptr<Switch>> switches;
    std::vector<std::unique_ptr<Host>> hosts;
    std::map<std::string, Host*> host_at;
    std::map<std::string, unsigned> switch_at;
    std::set<unsigned> dead;  // switches cut off: what they would send or get is lost
    std::unique_ptr<SubnetManager> sm;
    std::vector<std::string> log;

    Fabric(unsigned l, unsigned s, unsigned h, routing::Engine engine = routing::Engine::minhop)
        : leaves(l), spines(s), hosts_per_leaf(h) {
        for (unsigned i = 0; i < l + s; ++i) {
            Switch::Config c;
            c.lid = i == 0 ? 1 : 0;
            c.guid = 0x0200'00ff'fe00'1000ULL + i;
            c.num_ports = static_cast<std::uint8_t>(i < l ? h + s : l);
            c.link_timeout = 1000ms;
            c.cut_through = false;
            c.admission_burst = 1000;
            c.max_pending_per_host = 1000;
            if (i < l) {
                for (unsigned k = 0; k < s; ++k)
                    c.links.push_back({static_cast<std::uint8_t>(h + 1 + k), switch_address(l + k)});
            } else {
                for (unsigned k = 0; k < l; ++k) c.links.push_back({static_cast<std::uint8_t>(k + 1), switch_address(k)});
            }
            outputs.push_back(std::make_unique<Output>(*this, switch_address(i)));
            switches.push_back(std::make_unique<Switch>(c, *outputs.back()));
            switch_at[switch_address(i).to_string()] = i;
        }
        SmConfig config;
        config.sweep_interval = 500ms;
        config.routing = engine;
        sm = std::make_unique<SubnetManager>(config, *switches[0], [this](const std::string& line) { log.push_back(line); });
        switches[0]->set_management(sm.get());
        for (unsigned leaf = 0; leaf < l; ++leaf)
            for (unsigned k = 0; k < h; ++k) hosts.push_back(std::make_unique<Host>(*this, leaf * h + k, leaf));
    }

    void run() {
        for (int guard = 0; guard < 2'000'000 && !wire.empty(); ++guard) {
            Datagram d = std::move(wire.front());
            wire.pop_front();
            if (const auto s = switch_at.find(d.to.to_string()); s != switch_at.end()) {
                const auto from = switch_at.find(d.from.to_string());
                if (dead.contains(s->second) || (from != switch_at.end() && dead.contains(from->second))) continue;
                switches[s->second]->on_datagram(d.from, d.data, now);
                link_events();
                continue;
            }
            const auto h = host_at.find(d.to.to_string());
            if (h == host_at.end()) continue;
            if (d.data.size() == ib::LinkPacket::size) {
                if (!h->second->link_up) h->second->port.link_up();
                h->second->link_up = true;
            } else {
                h->second->port.core().receive(d.data);
            }
        }
    }
    void link_events() {
        LinkEvent le[16];
        for (std::size_t n = switches[0]->poll_link_events(le), i = 0; i < n; ++i) sm->on_link_event(le[i], now);
        for (std::size_t i = 1; i < switches.size(); ++i)
            while (switches[i]->poll_link_events(le) != 0) {
            }
    }
    // Time passes in 50 ms ticks, as in ibfabricd; hosts keep their links.
    void advance(std::chrono::milliseconds how_long) {
        for (auto t = 0ms; t < how_long; t += 50ms) {
            now += 50ms;
            for (auto& h : hosts)
                if (!dead.contains(h->switch_index)) wire.push_back({h->address, switch_address(h->switch_index), link_packet()});
            run();
            for (unsigned i = 0; i < switches.size(); ++i)
                if (!dead.contains(i)) switches[i]->tick(now);
            run();
            link_events();
            sm->tick(now);
            run();
        }
    }
    std::size_t active_ports() const {
        std::size_t n = 0;
        for (const auto& [key, p] : sm->ports()) n += p.phase == SmPortPhase::active;
        return n;
    }
};

Host::Host(Fabric& f, unsigned index, unsigned on_switch)
    : fabric(f),
      address(host_address(index)),
      switch_index(on_switch),
      port(transport::SmaIdentity{.node_guid = 0x0002'C903'0000'0000ULL + index,
                                  .port_guid = 0x0002'C903'0000'0000ULL + index,
                                  .node_description = "host" + std::to_string(index)},
           *this) {
    fabric.host_at[address.to_string()] = this;
    port.set_clock([&f] { return f.now; });
}

bool Host::transmit(bytes p) {
    fabric.wire.push_back({address, switch_address(switch_index), Wire(p.begin(), p.end())});
    return true;
}

// One UD datagram from a to b's LID; whether b received it.
bool unicast_arrives(Fabric& f, Host& a, Host& b) {
    auto qa = *a.port.core().create_ud_qp({.qkey = 7});
    auto qb = *b.port.core().create_ud_qp({.qkey = 7});
    Wire buf(transport::kGrhSlotSize + 64);
    const transport::ReceiveBuffer rb[] = {{1, buf}};
    qb->post_receive(rb);
    Wire payload(10, 0x42);
    transport::SendRequest r{.wr_id = 1, .ah = {.dlid = b.port.core().attributes().lid}, .remote_qpn = qb->qpn(),
                             .remote_qkey = 7, .payload = payload};
    if (qa->post_send({&r, 1}).value_or(0) != 1) return false;
    f.run();
    transport::Completion wc[4];
    std::size_t got = 0;
    for (std::size_t n = qb->poll(wc), i = 0; i < n; ++i) got += wc[i].kind == transport::CompletionKind::receive;
    return got == 1;
}

void expect_all_active_and_distinct(Fabric& f) {
    EXPECT_EQ(f.active_ports(), f.hosts.size());
    std::set<std::uint16_t> lids;
    for (auto& h : f.hosts) {
        EXPECT_EQ(h->port.core().attributes().state, transport::PortState::active) << h->address.to_string();
        lids.insert(h->port.core().attributes().lid);
    }
    for (const SmSwitch& s : f.sm->switches()) lids.insert(s.lid);
    EXPECT_EQ(lids.size(), f.hosts.size() + f.switches.size()) << "every port and switch has a LID of its own";
}

TEST(SwitchedSm, TwoLeavesAndASpine) {
    Fabric f(2, 1, 2);
    f.advance(3s);
    ASSERT_EQ(f.sm->switches().size(), 3u);
    for (const SmSwitch& s : f.sm->switches()) {
        EXPECT_TRUE(s.reachable);
        EXPECT_TRUE(s.keyed);
    }
    expect_all_active_and_distinct(f);
    // Host 0 on leaf 0 to host 3 on leaf 1 and back, through the spine.
    EXPECT_TRUE(unicast_arrives(f, *f.hosts[0], *f.hosts[3]));
    EXPECT_TRUE(unicast_arrives(f, *f.hosts[3], *f.hosts[0]));
    EXPECT_TRUE(unicast_arrives(f, *f.hosts[2], *f.hosts[1]));
    // The ISLs ACTIVE at both ends.
    EXPECT_EQ(f.switches[0]->port_info(3).port_state, ib::port_state::active);
    EXPECT_EQ(f.switches[2]->port_info(1).port_state, ib::port_state::active);
    EXPECT_EQ(f.switches[2]->port_info(2).port_state, ib::port_state::active);
    EXPECT_EQ(f.sm->counters().routing_failures, 0u);
}

TEST(SwitchedSm, MulticastTreeReachesEveryMemberOnce) {
    Fabric f(3, 2, 2);
    f.advance(3s);
    ASSERT_EQ(f.active_ports(), 6u);
    constexpr std::uint16_t kMlid = 0xC001;
    const ib::Gid mgid = {0xFF, 0x12, 0x40, 0x1B, 0xFF, 0xFF, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1};
    std::set<std::uint64_t> members;
    for (unsigned i : {0u, 3u, 4u}) members.insert(f.hosts[i]->port.core().attributes().port_guid);
    f.sm->set_multicast_members(kMlid, members);
    f.run();
    std::vector<std::unique_ptr<transport::UdQp>> qps;
    std::vector<Wire> bufs(f.hosts.size() * 2, Wire(transport::kGrhSlotSize + 64));
    for (std::size_t i = 0; i < f.hosts.size(); ++i) {
        qps.push_back(std::move(*f.hosts[i]->port.core().create_ud_qp({.qkey = 7})));
        const transport::ReceiveBuffer rb[] = {{1, bufs[2 * i]}, {2, bufs[2 * i + 1]}};
        qps.back()->post_receive(rb);
        ASSERT_TRUE(qps.back()->attach_multicast(mgid, kMlid).has_value());
    }
    Wire payload(10, 0x42);
    transport::SendRequest m{.wr_id = 9, .ah = {.dlid = kMlid, .grh = transport::GrhAttributes{.dgid = mgid}},
                             .remote_qpn = ib::kQpnMulticast, .remote_qkey = 7, .payload = payload};
    ASSERT_EQ(qps[0]->post_send({&m, 1}).value_or(0), 1u);
    f.run();
    for (std::size_t i = 0; i < f.hosts.size(); ++i) {
        transport::Completion wc[4];
        std::size_t got = 0;
        for (std::size_t n = qps[i]->poll(wc), k = 0; k < n; ++k) got += wc[k].kind == transport::CompletionKind::receive;
        const bool member = i == 0 || i == 3 || i == 4;
        EXPECT_EQ(got, member ? 1u : 0u) << "host " << i;
    }
}

TEST(SwitchedSm, ASpineLostIsRoutedAround) {
    Fabric f(2, 2, 2);
    f.advance(3s);
    ASSERT_EQ(f.active_ports(), 4u);
    ASSERT_TRUE(unicast_arrives(f, *f.hosts[0], *f.hosts[2]));
    // Leaf 0 reaches host 2 through spine 0 or 1; whichever it is, it goes.
    const auto out = f.switches[0]->unicast_route(f.hosts[2]->port.core().attributes().lid);
    ASSERT_TRUE(out.has_value());
    const unsigned spine = f.leaves + (*out - f.hosts_per_leaf - 1);
    f.dead.insert(spine);
    f.advance(3s);
    EXPECT_EQ(f.sm->counters().switches_lost, 1u);
    EXPECT_EQ(f.sm->discovering(), 0u);
    for (const SmSwitch& s : f.sm->switches())
        EXPECT_EQ(s.reachable, s.guid != f.switches[spine]->guid()) << std::hex << s.guid;
    EXPECT_EQ(f.active_ports(), 4u) << "the hosts stay ACTIVE";
    EXPECT_EQ(f.sm->counters().ports_lost, 0u) << "a host behind a lost spine's route is asked the new way";
    EXPECT_TRUE(unicast_arrives(f, *f.hosts[0], *f.hosts[2]));
    EXPECT_TRUE(unicast_arrives(f, *f.hosts[3], *f.hosts[1]));
    const auto now_out = f.switches[0]->unicast_route(f.hosts[2]->port.core().attributes().lid);
    ASSERT_TRUE(now_out.has_value());
    EXPECT_NE(*now_out, *out);
}

TEST(SwitchedSm, FatTreeOfEightLeavesAndFourSpinesWith96Ports) {
    for (const routing::Engine engine : {routing::Engine::minhop, routing::Engine::updn}) {
        SCOPED_TRACE(routing::to_string(engine));
        Fabric f(8, 4, 12, engine);
        f.advance(5s);
        ASSERT_EQ(f.sm->switches().size(), 12u);
        expect_all_active_and_distinct(f);
        EXPECT_EQ(f.sm->counters().routing_failures, 0u);
        // Every host reaches a host on every other leaf, and one on its own.
        for (unsigned leaf = 0; leaf < 8; ++leaf) {
            Host& a = *f.hosts[leaf * 12 + leaf % 12];
            for (unsigned other = 0; other < 8; ++other) {
                Host& b = *f.hosts[other * 12 + (other + 5) % 12];
                if (&a == &b) continue;
                EXPECT_TRUE(unicast_arrives(f, a, b)) << a.address.to_string() << " -> " << b.address.to_string();
            }
        }
    }
}

}  // namespace
}  // namespace ipoibd::fabric
