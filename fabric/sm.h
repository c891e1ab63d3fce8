// The subnet manager of the soft fabric, sans-I/O: it finds the switches and
// CA ports of the subnet and programs them with directed-route SMPs, as an
// SM programs a real subnet (IBA 14.4).
//
// Switches (sm_switches.cpp). The SM runs on its own switch (switches()[0],
// programmed through its SMA with HopCount 0) and finds the others by
// directed route: a scan of a switch reads the PortInfo of every port, and
// a port whose link is up and whose far end is not known yet is asked for
// NodeInfo through it. A switch there (only behind an inter-switch link
// where the SM's own switch can tell: a host port of its own never leads to
// one) is adopted: its port 0 gets a LID (today's rules, by switch GUID),
// this SM's LID as MasterSMLID and an M_Key, its SwitchInfo is read, and it
// is scanned in turn; a NodeGUID seen again is a second cable to a known
// switch (a loop, or a redundant link), recorded and not followed. Both
// ends of an inter-switch link are taken INIT -> ARMED -> ACTIVE with the
// NeighborMTU both take. A CA port there goes through the steps below. The
// directed route to each switch is the shortest over the links, lowest
// port first, recomputed when a link goes; a switch no link reaches is
// lost with its CA ports. Scans run at start, when a link of the SM's own
// switch changes, on a Trap 128 from a switch, and when the light sweep (a
// Get SwitchInfo of every switch each sweep_interval) finds PortStateChange
// set or a switch that stops answering. Once no scan is in flight, every
// switch's LinearForwardingTable is routed (routing.h: minhop or updn over
// the ACTIVE links and ACTIVE CA ports; entries kept where still least-hop)
// and the blocks that changed are set, with LinearFDBTop; each multicast
// group gets a tree (set_multicast_members).
//
// Per CA port, when its link comes up (on this SM's switch) or a scan
// finds it (on another):
//  1. Get NodeInfo, Get NodeDescription, Get PortInfo
//  2. choose the LID: the configured one for the port GUID; else the LID the
//     port already has if no other port holds it (an SM restart keeps the
//     subnet's addresses); else the one this SM gave the GUID before; else
//     the lowest free. The SM remembers the LID it gave each GUID (so that
//     a port away for a while comes back to it) until the LIDs run out:
//     then a new port gets the LID of the GUID that has been away longest
//     (a host cycling GUIDs cannot use up the subnet's LIDs)
//  3. Set P_KeyTable block 0: the P_Keys of the partitions naming the port
//  4. Set PortInfo: LID, LMC 0, MasterSMLID = the switch, GidPrefix,
//     NeighborMTU, SubnetTimeOut, PortState ARMED (from INIT), and
//     ClientReregister when the port already had a LID (another SM, or this
//     one before a restart or link flap, configured it: its SA state is gone)
//  5. Set PortInfo PortState ACTIVE; route the LID to the port in the switch
// Every SMP carries the port's M_Key. The SM gives each port one in step 4
// (M_KeyPolicy: per port from a secret, one for all, or none) with the
// protect bits and lease period, and so holds the only key that can change
// a port. A port that shows another key (protect bits 0 make a Get show
// it) is set with the key it shows; one that hides it refuses the SM's Sets
// until its lease runs out (IBA 14.2.4), and every sweep tries again. Trap
// 256 (Bad M_Key) from a port is logged, counted and answered with a
// TrapRepress.
// New partitions (set_partitions) reach ACTIVE ports as a Set P_KeyTable
// at the next tick, in place of that port's sweep check.
// Then every sweep_interval a Get PortInfo checks each ACTIVE port. A port
// whose link drops is removed and its route cleared; one that stops
// answering (after retries) loses its route too but stays known: every
// sweep tries it again from step 1, so that it comes back, with its LID and
// a client reregister, within a sweep of answering again. Each SMP is
// retried smp_retries times, smp_timeout apart; a port whose configuration
// fails is tried again at the next sweep.
#pragma once

#include "common/counters.h"

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "common/secret.h"
#include "fabric/partitions.h"
#include "fabric/routing/routing.h"
#include "fabric/switch.h"
#include "transport/wire/smp.h"

namespace ipoibd::fabric {

struct MKeyPolicy {
    enum class Mode : std::uint8_t {
        none,     // M_Key 0: no protection
        fixed,    // one key for every port (OpenSM's m_key)
        derived,  // per port: keyed BLAKE2b of the port GUID under `secret`
    };
    Mode mode = Mode::derived;
    std::uint64_t fixed = 0;
    Secret secret;                  // all zero: FabricService::open draws a random one
    std::uint8_t protect_bits = 1;  // 0-3; 1: Gets work (the key hidden), Sets need the key
    std::uint16_t lease_seconds = 15;  // 0: protection never lapses
};

struct SmConfig {
    std::uint64_t subnet_prefix = 0xFE80000000000000ULL;
    std::map<std::uint64_t, std::uint16_t> static_lids;  // port GUID -> LID
    ib::Mtu mtu = ib::Mtu::mtu4096;                      // the fabric's largest MTU
    std::vector<Partition> partitions = default_partitions();  // who holds which P_Key
    std::chrono::milliseconds sweep_interval{1000};
    std::chrono::milliseconds smp_timeout{250};
    unsigned smp_retries = 3;
    std::uint8_t subnet_timeout = 18;  // 4.096 us * 2^18, about 1 s
    MKeyPolicy m_key;
    // What SMInfo says of this SM: the GUID of the switch's port 0, where
    // it runs, and its priority (0..15).
    std::uint64_t guid = 0x0200'00ff'fe00'0001ULL;
    std::uint8_t priority = 0;
    // false: this SM stays idle and leaves the switch alone (no IsSM, no
    // M_Key): another SM manages the fabric (FabricServiceOptions::sm_enabled).
    bool active = true;
    // Whether a GUID is taken at its word from another host: with a fabric
    // key (every datagram authenticated) it is, and a port GUID that comes
    // back from another machine gets the LID it had; without one, a GUID is
    // only what a datagram says, and its LID stays with the host (IP
    // address) it was given on (FabricService::open sets it).
    bool guids_move_hosts = false;
    // How the LinearForwardingTables of a subnet of several switches are
    // routed (ibfabricd --routing), and the up/down roots by switch GUID
    // (empty: chosen as OpenSM chooses them).
    routing::Engine routing = routing::Engine::minhop;
    std::vector<std::uint64_t> root_guids;
};

// Where a CA port is plugged: a port of a switch of SubnetManager::switches()
// (0: the SM's own switch).
struct SmPortKey {
    std::uint32_t sw = 0;
    std::uint8_t port = 0;
    constexpr SmPortKey() = default;
    constexpr SmPortKey(std::uint8_t p) : port(p) {}  // a port of the SM's own switch
    constexpr SmPortKey(std::uint32_t s, std::uint8_t p) : sw(s), port(p) {}
    auto operator<=>(const SmPortKey&) const = default;
};

enum class SmPortPhase : std::uint8_t {
    node_info,
    node_description,
    port_info,
    set_pkeys,
    set_port_info,
    activate,
    active,
    failed,  // waits for the next sweep
};
const char* to_string(SmPortPhase p);

struct SmPort {
    std::uint32_t sw = 0;  // the switch it is plugged into (SubnetManager::switches())
    std::uint8_t switch_port = 0;
    SmPortPhase phase = SmPortPhase::node_info;
    std::uint64_t node_guid = 0;
    std::uint64_t port_guid = 0;
    std::uint8_t local_port_num = 1;
    std::string description;
    std::uint16_t lid = 0;
    ib::PortInfo port_info;  // as last read or set
    bool reregister = false;
    std::uint64_t m_key = 0;  // the M_Key this SM's SMPs to the port carry
    // The SMP in flight.
    std::uint64_t tid = 0;
    Clock::time_point deadline{};
    unsigned tries = 0;
    bool sweeping = false;  // the SMP in flight is a sweep check
    bool pkeys_stale = false;    // ACTIVE, and the partitions changed its P_Keys: set them at the next tick
    bool setting_pkeys = false;  // the SMP in flight is that Set P_KeyTable
    bool duplicate_logged = false;  // its GUID is ACTIVE on another switch port, and the log said so
    bool no_lid_logged = false;     // no LID was free for it, and the log said so
    std::optional<Clock::time_point> trap_logged;  // when the log last told of a Trap 256 it sent
};

// A switch of the subnet as the SM found it.
struct SmSwitch {
    std::uint64_t guid = 0;
    ib::NodeInfo node_info;
    ib::SwitchInfo switch_info;  // as last read, with what the SM set
    std::string description;
    std::uint16_t lid = 0;   // its port 0's, once the SM set it
    std::uint64_t m_key = 0;  // the M_Key of its port 0 this SM's SMPs carry
    bool keyed = false;       // port 0 has its LID, this SM's LID and the M_Key
    // The directed route from the SM's switch: the out port at each hop
    // ({} for the SM's own switch).
    std::vector<std::uint8_t> path;
    bool reachable = false;  // a link of the subnet reaches it (false: lost, kept for its GUID)
    struct Port {
        ib::PortInfo info;       // as last read or set
        routing::PortPeer peer;  // Kind::link: switches()[peer.index] port peer.port; endpoint: a CA port
        bool activating = false;  // a Set PortInfo towards ACTIVE in flight
    };
    std::vector<Port> ports;  // [0..NumPorts]
    // The table blocks as this SM set them: LinearForwardingTable by block,
    // MulticastForwardingTable by AttributeModifier.
    std::map<std::uint32_t, ib::LinearForwardingTableBlock> lft;
    std::map<std::uint32_t, ib::MulticastForwardingTableBlock> mft;
    unsigned scans = 0;       // PortInfo Gets of a scan in flight
    bool rescan = false;      // asked to scan again while scanning
    unsigned unanswered = 0;  // light sweeps in a row it did not answer
    bool key_refused_logged = false;
    bool port_up(std::uint8_t p) const { return p < ports.size() && ports[p].info.port_state >= ib::port_state::init; }
};

struct SmCounters {
    std::uint64_t smps_sent = 0;
    std::uint64_t responses = 0;
    std::uint64_t error_responses = 0;  // non-zero MAD status
    std::uint64_t timeouts = 0;          // an SMP not answered in time (before retries)
    std::uint64_t unexpected_responses = 0;
    std::uint64_t ports_configured = 0;
    std::uint64_t ports_lost = 0;
    std::uint64_t traps = 0;           // Traps received
    std::uint64_t m_key_traps = 0;     // of those, Trap 256 (Bad M_Key)
    std::uint64_t traps_refused = 0;   // Traps whose IssuerLID is not the LID of the port they came in on
    std::uint64_t m_key_traps_unlogged = 0;  // Trap 256s within a second of the last one the log told of, from that port
    std::uint64_t lid_claims_refused = 0;    // a port claimed a LID this SM gave another GUID: it got another
    std::uint64_t lid_host_moves_refused = 0;  // a GUID back from another host (no fabric key): its old LID kept for the old host
    std::uint64_t lids_reclaimed = 0;        // no LID was free: a port got the one of the GUID away longest
    std::uint64_t no_lid = 0;                // configurations that found no LID at all (every one held by a port here)
    std::uint64_t sets_unanswered = 0; // configurations that failed with no answer to a Set (a key the SM lacks)
    std::uint64_t sm_info_answered = 0;  // Get SMInfo requests answered (sminfo, another SM)
    std::uint64_t switch_smps = 0;       // SMPs to this switch's own SMA (its tables, its ports' states)
    std::uint64_t switch_smp_errors = 0; // of those, unanswered or answered with an error status
    std::uint64_t requests_refused = 0;  // other requests to this SM: no agent for them
    std::uint64_t duplicate_guids = 0;   // discoveries of a GUID already ACTIVE on another port with its link up
    std::uint64_t switches_found = 0;    // switches adopted (a lost one found again counts again)
    std::uint64_t switches_lost = 0;     // switches no link reaches any more
    std::uint64_t switch_timeouts = 0;   // SMPs to another switch (or through it) unanswered after retries
    std::uint64_t switches_refused = 0;  // NodeInfo of a switch behind a port of this SM's switch that is no ISL
    std::uint64_t isls_activated = 0;    // inter-switch link ends the SM took to ACTIVE
    std::uint64_t scans = 0;             // switch scans (PortInfo of every port)
    std::uint64_t routings = 0;          // times every LFT was routed
    std::uint64_t routing_failures = 0;  // of those, the engine found no tables (updn without roots)
    std::uint64_t lft_blocks_set = 0;    // LinearForwardingTable blocks set, on every switch
    std::uint64_t mft_blocks_set = 0;    // MulticastForwardingTable blocks set, on every switch
};
// As "smps_sent", "m_key_traps", ...
void visit(const SmCounters& c, CounterSink& out);

// A directed route as "1,8,3" ("-" for none: the SM's own switch).
std::string path_text(const std::vector<std::uint8_t>& path);

// Human-readable SM log lines (ibfabricd sends them to its log).
using SmLog = std::function<void(const std::string&)>;

class SubnetManager : public ManagementSink {
public:
    SubnetManager(const SmConfig& config, Switch& sw, SmLog log = {});
    ~SubnetManager() override;

    void on_link_event(const LinkEvent& event, Clock::time_point now);
    void tick(Clock::time_point now);

    // ManagementSink
    // Responses to this SM's SMPs, Traps, and a Get SMInfo (LID-routed),
    // which it answers: its GUID, priority and state MASTER (IBA 14.4.1).
    bool on_smp(const ib::Smp& smp, std::uint8_t in_port, std::uint16_t slid) override;
    bool on_packet(const ib::Packet&, bytes, std::uint8_t) override { return false; }

    const std::map<SmPortKey, SmPort>& ports() const { return ports_; }
    // The switches found: [0] is the one this SM runs on.
    const std::vector<SmSwitch>& switches() const { return switches_; }
    // The last tables routed (for the SA's paths), if any.
    const std::optional<routing::Routes>& routes() const { return routes_; }
    // The routing engine's view of the subnet the last tables were routed on.
    const routing::Topology& topology() const { return topology_; }
    // Discovery SMPs in flight (paths and routes wait for none).
    unsigned discovering() const { return discovering_; }
    // A multicast group's members by port GUID (the SA's full and non
    // members): every switch's MulticastForwardingTable gets the group's
    // tree. Rooted as OpenSM's multicast manager roots it (the switch with
    // the least average hops to the members' switches, the lower GUID on a
    // tie), the tree is the shortest-path tree from there over the ACTIVE
    // links, lowest port first, cut to the branches that lead to members:
    // one copy reaches each switch. Set again after every routing.
    void set_multicast_members(std::uint16_t mlid, const std::set<std::uint64_t>& port_guids);

    // Told when a port becomes ACTIVE and when an ACTIVE port is lost.
    struct Hooks {
        std::function<void(const SmPort&)> port_active;
        std::function<void(const SmPort&)> port_lost;
    };
    void set_hooks(Hooks hooks) { hooks_ = std::move(hooks); }
    // New partitions: every ACTIVE port whose P_Keys change gets a Set
    // P_KeyTable at the next tick (it stays ACTIVE, keeps its LID, is not
    // asked to reregister: the port raises its own P_Key change event);
    // ports configured from now on get the new table. Returns how many.
    std::size_t set_partitions(std::vector<Partition> partitions);
    const SmCounters& counters() const { return counters_; }

private:
    // --- Requests to switches and through them (sm_switches.cpp) ---
    // What an SMP to a switch or through it came to: the GetResp, or
    // nullptr (no answer after the retries, or an error status: logged).
    using SmpDone = std::function<void(const ib::Smp* reply)>;
    // A directed-route SMP along `path` ({}: the SM's own switch, answered
    // at once), retried smp_retries times, smp_timeout apart.
    // route_of: the switch whose route `path` is (plus `beyond`, a port of
    // it): each retry follows that switch's route as it is then.
    void dr_request(std::vector<std::uint8_t> path, std::uint64_t m_key, std::uint8_t method, std::uint16_t attribute,
                    std::uint32_t modifier, const ib::SmpData& data, SmpDone done,
                    std::optional<std::uint32_t> route_of = std::nullopt, std::optional<std::uint8_t> beyond = std::nullopt);
    void switch_request(std::uint32_t sw, std::uint8_t method, std::uint16_t attribute, std::uint32_t modifier,
                        const ib::SmpData& data, SmpDone done);
    // A directed-route SMP along `path`, with the next TID.
    ib::Smp dr_smp(std::uint8_t method, std::uint16_t attribute, std::uint32_t modifier, std::uint64_t m_key,
                   const ib::SmpData& data, std::span<const std::uint8_t> path);
    // Out of the switch's port, by the directed-route rules; counted.
    bool transmit_dr(ib::Smp smp);
    struct Request {
        ib::Smp smp;
        std::vector<std::uint8_t> path;
        Clock::time_point deadline{};
        unsigned tries = 0;
        SmpDone done;
        std::optional<std::uint32_t> route_of;
        std::optional<std::uint8_t> beyond;
    };
    std::map<std::uint64_t, Request> requests_;  // by TID
    void expire_requests();
    // --- Discovery ---
    void scan(std::uint32_t sw);
    void on_scanned_port(std::uint32_t sw, std::uint8_t port, const ib::Smp* reply);
    // NodeInfo through the port; counted: discovery waits for the answer.
    void probe(std::uint32_t sw, std::uint8_t port, bool counted = true);
    void on_probed(std::uint32_t sw, std::uint8_t port, const ib::Smp* reply);
    std::uint32_t adopt(const ib::NodeInfo& info, std::vector<std::uint8_t> path);
    void key_remote_switch(std::uint32_t sw, const ib::PortInfo& port0);
    void cable(std::uint32_t a, std::uint8_t a_port, std::uint32_t b, std::uint8_t b_port);
    void unlink(std::uint32_t sw, std::uint8_t port, const char* why);
    void activate_isl(std::uint32_t sw, std::uint8_t port);
    // A discovery SMP done: once none is in flight, paths and routes.
    void discovery_step_done();
    void recompute_paths();
    void light_sweep();
    void on_switch_trap(std::uint32_t sw, const ib::Smp& smp, const ib::SmpNotice& notice);
    // Port states of a switch port through Sets, the PortInfo as read (`then` told).
    void set_switch_port_state(std::uint32_t sw, std::uint8_t port, const ib::PortInfo& current, std::uint8_t next,
                               bool enforce, SmpDone then);
    void send_trap_repress(const ib::Smp& trap, std::uint64_t m_key, std::uint16_t dlid);
    // The CA ports' sweep checks (and retries of failed ones) each sweep_interval.
    void sweep_ports();
    // The lowest-hop tree from switch `root` over the ACTIVE links, lowest
    // port first: for each switch, the link to its parent (sw, its port,
    // the parent's port); `depth` kUnreachable where the tree does not reach.
    struct TreeLink {
        std::uint32_t parent = 0;
        std::uint8_t port = 0;         // on the child
        std::uint8_t parent_port = 0;  // on the parent
        std::uint8_t depth = routing::kUnreachable;
    };
    std::vector<TreeLink> tree_from(std::uint32_t root) const;
    bool isl_active(std::uint32_t sw, std::uint8_t port) const;
    void drop_switch(std::uint32_t sw);
    Secret switch_key_secret_;  // the switches' M_Keys when the policy gives the ports one key or none
    std::string routing_error_;  // the last one logged
    unsigned discovering_ = 0;  // discovery SMPs in flight
    bool topology_changed_ = false;
    // --- Routing ---
    void maybe_reroute();
    void reroute();
    void program_group(std::uint16_t mlid);
    void set_lft_entry(std::uint32_t sw, std::uint16_t lid, std::optional<std::uint8_t> port);
    void set_mft_entry(std::uint32_t sw, std::uint16_t mlid, const std::set<std::uint8_t>& ports);
    void set_lft_block(std::uint32_t sw, std::uint32_t block, const ib::LinearForwardingTableBlock& b);
    void set_linear_fdb_top(std::uint32_t sw, std::uint16_t top);
    void switch_port_active(std::uint32_t sw, std::uint8_t port, bool active,
                            const std::optional<ib::PKeyTableBlock>& pkeys = std::nullopt);
    void switch_port_pkeys(std::uint32_t sw, std::uint8_t port, const ib::PKeyTableBlock& block);
    bool routes_dirty_ = false;
    std::optional<Clock::time_point> last_routing_;
    std::optional<routing::Routes> routes_;
    routing::Topology topology_;
    std::vector<std::uint32_t> route_index_;  // switches_ index -> routes_ switch index (kNotRouted)
    std::map<std::uint16_t, std::set<std::uint64_t>> groups_;  // MLID -> member port GUIDs
    std::vector<SmSwitch> switches_;
    std::map<std::uint64_t, std::uint32_t> switch_index_;  // switch GUID -> switches_ index
    // The first hop of the directed route to a CA port: where its answers
    // come back in.
    std::uint8_t first_hop(const SmPort& port) const;
    std::vector<std::uint8_t> path_to(const SmPort& port) const;
    bool link_up(const SmPort& port) const;
    // "port 3" on the SM's switch, "switch 0x... port 3" elsewhere.
    std::string where(const SmPort& port) const;
    std::uint64_t switch_m_key(std::uint64_t guid);

    void start(SmPort& port);
    void send(SmPort& port, std::uint8_t method, std::uint16_t attribute, std::uint32_t modifier,
              const ib::SmpData& data);
    void resend(SmPort& port);
    void on_response(SmPort& port, const ib::Smp& smp);
    void after_port_info(SmPort& port, const ib::PortInfo& info);
    // Block 0 of the port's P_KeyTable: the P_Keys of the partitions naming it.
    ib::PKeyTableBlock pkey_block(const SmPort& port) const;
    void set_port_info(SmPort& port);
    void finish(SmPort& port);
    // keep: the link is up, the port stays known (failed) and is sought
    // again at the next sweeps.
    void lose(SmPortKey key, const char* why, bool keep = false);
    std::uint16_t choose_lid(const SmPort& port, std::uint16_t current);
    bool given_to_another(std::uint16_t lid, std::uint64_t guid) const;
    // The LID given to the GUID of the port that has been away longest
    // (not known on any switch port; its LID not `held` by a port or the
    // configuration), 0 if none.
    std::uint16_t longest_away(const SmPort& port, const std::vector<bool>& held) const;
    // `guid` holds `lid` from now on, given on `host`; whoever held it
    // before does not.
    void give(std::uint64_t guid, std::uint16_t lid, const std::string& host);
    // The host (IP address, SocketAddress::host_key) behind a switch port.
    std::string host_of(const SmPort& port) const;
    // The LID this SM gave `port`'s GUID on another host, when a GUID's
    // word is not taken across hosts (guids_move_hosts false); 0 otherwise.
    std::uint16_t lid_left_elsewhere(const SmPort& port) const;
    // The GUID's port went: its LID may be reclaimed from now on, oldest first.
    void mark_away(std::uint64_t guid);
    // The M_Key this SM gives the port with `guid`.
    std::uint64_t m_key_for(std::uint64_t guid) const;
    void on_trap(const ib::Smp& smp, std::uint8_t in_port);
    void answer_sm_info(const ib::Smp& request, std::uint16_t slid);
    // One SMP to the switch's own SMA; the GetResp's Data when it succeeds.
    std::optional<ib::SmpData> program_switch(std::uint8_t method, std::uint16_t attribute, std::uint32_t modifier,
                                              const ib::SmpData& data);
    // The switch's port 0 gets its LID, this SM's LID and an M_Key (the
    // SM's policy) before anything else: a port of the fabric cannot
    // reprogram the switch with a forged SMP.
    void key_switch();
    bool switch_keyed_ = false;
    std::uint64_t switch_m_key_ = 0;
    bool lid_taken(std::uint16_t lid, SmPortKey except_port) const;
    // A LID for the switch with `guid` whose port 0 says `current`.
    std::uint16_t choose_switch_lid(std::uint64_t guid, std::uint16_t current);
    void log(const std::string& line) const {
        if (log_) log_(line);
    }

    SmConfig config_;
    Switch& switch_;
    SmLog log_;
    Hooks hooks_;
    std::map<SmPortKey, SmPort> ports_;
    struct GivenLid {
        std::uint16_t lid = 0;
        Clock::time_point since{};  // given, or its port last went
        std::string host;           // where it was given (a LID file would keep it too)
    };
    std::map<std::uint64_t, GivenLid> given_lids_;   // GUID -> the LID this SM gave it
    std::map<std::uint16_t, std::uint64_t> lid_owners_;  // the same, by LID
    std::map<SmPortKey, std::uint64_t> last_guid_at_;  // switch port -> the GUID last seen there
    std::map<std::uint64_t, ib::Smp> in_flight_;         // TID -> request, for retries
    std::uint64_t next_tid_ = 1;
    Clock::time_point now_{};
    Clock::time_point next_sweep_{};
    SmCounters counters_;
};

}  // namespace ipoibd::fabric
