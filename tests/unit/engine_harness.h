// In-process IPoIB hosts for engine tests and the engine fuzz target: each
// Host is an Engine on a MemoryFabric port (real IBA packets through
// PortCore), its TUN a vector, its SA a ScriptedSa the test controls, its
// clock the World's fake `now`.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "ipoib/engine.h"
#include "ipoib/port_link.h"
#include "transport/memory/memory_fabric.h"

namespace ipoibd::ipoib::test {

using namespace std::chrono_literals;

inline constexpr std::uint32_t kTestQkey = 0x00000B1B;  // OpenSM's IPoIB default

// An SA that answers MCMemberRecord Set/Delete and PathRecord Get like
// OpenSM would for one partition, and can be told to stay silent, refuse
// joins or hold path answers.
class ScriptedSa {
public:
    struct Group {
        sa::McMemberRecord record;                 // parameters and MLID
        std::map<ib::Gid, std::uint8_t> members;   // port GID -> join state
    };
    struct Request {
        Clock::time_point at{};
        sa::SaMad mad;
    };

    ScriptedSa();
    // nullopt: no answer now (silent, held, or not understood).
    std::optional<sa::SaMad> handle(const sa::SaMad& request, Clock::time_point now);
    void add_port(const ib::Gid& gid, std::uint16_t lid) { lids_[gid] = lid; }
    void set_port_lid(const ib::Gid& gid, std::uint16_t lid) { lids_[gid] = lid; }
    // The port left the subnet: paths to it get ERR_NO_RECORDS.
    void forget_port(const ib::Gid& gid) { lids_.erase(gid); }
    std::vector<sa::SaMad> release_held_paths();

    // Knobs.
    bool silent = false;
    bool hold_paths = false;
    std::set<ib::Gid> refuse_joins;   // ERR_REQ_INVALID
    std::uint8_t group_mtu = 4;       // 2048

    std::map<ib::Gid, Group> groups;
    std::vector<Request> requests;
    std::size_t count(std::uint16_t attribute, std::uint8_t method) const;

private:
    sa::SaMad answer(const sa::SaMad& request, std::uint16_t status) const;
    std::optional<sa::SaMad> join(const sa::SaMad& request);
    std::optional<sa::SaMad> leave(const sa::SaMad& request);
    std::optional<sa::SaMad> path(const sa::SaMad& request);

    std::map<ib::Gid, std::uint16_t> lids_;
    std::uint16_t next_mlid_ = 0xC001;
    std::vector<sa::SaMad> held_;
};

class World;

struct SentFrame {
    transport::AddressHandle ah;
    std::uint32_t remote_qpn = 0;
    Packet frame;
};

// Both halves of the engine's actions: the link half records and may drop
// frames before PortLink sends them.
class Host final : public EngineLink, public EngineIo {
public:
    Host(World& world, EngineConfig config, transport::MemoryFabric::PortOptions options,
         sa::SaClient::Config sa_config = {});

    // EngineLink
    void send_datagram(const transport::AddressHandle& ah, std::uint32_t remote_qpn, bytes frame) override;
    void write_tun(bytes ip_packet, const PacketSource& from) override {
        ++tun_packets;
        last_source = from;
        if (record_tun) tun.emplace_back(ip_packet.begin(), ip_packet.end());
        if (on_tun) on_tun(ip_packet, from);
    }
    void neighbour_learned(const IpAddress& ip, const HwAddress& hw, std::uint16_t slid) override {
        learned.push_back({ip, hw, slid});
        if (on_learned) on_learned(ip, hw, slid);
    }
    expected<std::uint32_t, std::string> open_qp(std::uint32_t qkey, std::uint16_t pkey) override {
        return link.open_qp(qkey, pkey);
    }
    void attach(const ib::Gid& mgid, std::uint16_t mlid) override { link.attach(mgid, mlid); }
    void detach(const ib::Gid& mgid, std::uint16_t mlid) override { link.detach(mgid, mlid); }
    // EngineIo
    void send_sa(const sa::SaMad& mad) override;
    void link_changed(const LinkStatus& s) override { link_changes.push_back(s); }
    void event(const EngineEvent& e) override { events.push_back(e); }

    void start();
    void add_address(const std::string& cidr);
    // Hands an IP datagram to the engine as the TUN would.
    void from_host(const Packet& ip, std::optional<IpAddress> next_hop = std::nullopt);
    std::size_t count_events(EngineEventKind k) const;

    World& world;
    std::unique_ptr<transport::MemoryPort> port;
    PortLink link;
    Engine engine;
    std::vector<Packet> tun;
    std::vector<EngineEvent> events;
    std::vector<LinkStatus> link_changes;
    std::vector<SentFrame> sent;
    bool record_frames = true;
    // False: packets written to the TUN are counted (tun_packets) but not
    // kept in `tun` (no copy, no allocation: the data-path allocation test).
    bool record_tun = true;
    std::size_t tun_packets = 0;
    PacketSource last_source;  // of the last packet written to the TUN
    struct Learned {
        IpAddress ip;
        HwAddress hw;
        std::uint16_t slid = 0;
    };
    std::vector<Learned> learned;  // EngineIo::neighbour_learned() calls
    // Hooks, for a presentation stacked on the engine (TAP mode's EthernetHost).
    std::function<void(bytes, const PacketSource&)> on_tun;
    std::function<void(const IpAddress&, const HwAddress&, std::uint16_t)> on_learned;
    // When set and true for a frame, the frame is not sent (lost on the wire).
    std::function<bool(const SentFrame&)> drop_outgoing;
};

class World {
public:
    World() = default;
    Host& add_host(EngineConfig config = {}, transport::MemoryFabric::PortOptions options = {});
    // Replaces hosts[i] by a fresh Host on a fresh port with the same GUID
    // and LID (a restarted daemon: new QPN).
    Host& restart_host(std::size_t i, EngineConfig config = {});

    // Moves SA answers and packets until nothing moves (bounded).
    void pump();
    // Lets `d` pass in steps of at most `step`, ticking every engine at its
    // deadlines and pumping in between.
    void advance(Clock::duration d, Clock::duration step = 100ms);

    transport::MemoryFabric fabric;
    ScriptedSa sa;
    Clock::time_point now = Clock::time_point{} + 1000s;
    std::vector<std::unique_ptr<Host>> hosts;
    struct PendingAnswer {
        Host* host = nullptr;
        sa::SaMad mad;
    };
    std::vector<PendingAnswer> pending;
};

// Packet builders for tests.
Packet icmp_echo_v4(const std::string& src, const std::string& dst, std::uint16_t seq, std::size_t payload = 32);
Packet icmp_echo_v6(const std::string& src, const std::string& dst, std::uint16_t seq, std::size_t payload = 32);
Packet udp_v4(const std::string& src, const std::string& dst, std::size_t payload = 16);
Packet igmpv3_report(const std::string& src, const std::string& group, bool join);
Packet mldv2_report(const std::string& src, const std::string& group, bool join);
IpAddress ip(const std::string& text);

}  // namespace ipoibd::ipoib::test
