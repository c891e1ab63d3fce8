// The subnet manager of the soft fabric, sans-I/O: it finds the CA ports
// plugged into the switch and programs them with directed-route SMPs, as an
// SM programs a real subnet (IBA 14.4).
//
// Per switch port, when its link comes up:
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
#include <string>
#include <vector>

#include "common/secret.h"
#include "fabric/partitions.h"
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
};
// As "smps_sent", "m_key_traps", ...
void visit(const SmCounters& c, CounterSink& out);

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

    const std::map<std::uint8_t, SmPort>& ports() const { return ports_; }

    // The switch this SM runs on, programmed through its SMA with
    // directed-route SMPs of HopCount 0, as any SM programs its own switch:
    // LinearForwardingTable blocks, MulticastForwardingTable blocks, and
    // the PortState of its external ports (Init -> Armed -> Active; Down
    // to take one back). The SM keeps a copy of the blocks it sets.
    void set_unicast_route(std::uint16_t lid, std::optional<std::uint8_t> port);
    void set_multicast_route(std::uint16_t mlid, const std::set<std::uint8_t>& ports);
    void set_switch_port_active(std::uint8_t port, bool active,
                                const std::optional<ib::PKeyTableBlock>& pkeys = std::nullopt);
    void set_switch_port_pkeys(std::uint8_t port, const ib::PKeyTableBlock& block);

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
    void lose(std::uint8_t switch_port, const char* why, bool keep = false);
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
    std::map<std::uint32_t, ib::LinearForwardingTableBlock> lft_blocks_;    // by block
    std::map<std::uint32_t, ib::MulticastForwardingTableBlock> mft_blocks_;  // by AttributeModifier
    bool lid_taken(std::uint16_t lid, std::uint8_t except_port) const;
    void log(const std::string& line) const {
        if (log_) log_(line);
    }

    SmConfig config_;
    Switch& switch_;
    SmLog log_;
    Hooks hooks_;
    std::map<std::uint8_t, SmPort> ports_;
    struct GivenLid {
        std::uint16_t lid = 0;
        Clock::time_point since{};  // given, or its port last went
        std::string host;           // where it was given (a LID file would keep it too)
    };
    std::map<std::uint64_t, GivenLid> given_lids_;   // GUID -> the LID this SM gave it
    std::map<std::uint16_t, std::uint64_t> lid_owners_;  // the same, by LID
    std::map<std::uint8_t, std::uint64_t> last_guid_at_;  // switch port -> the GUID last seen there
    std::map<std::uint64_t, ib::Smp> in_flight_;         // TID -> request, for retries
    std::uint64_t next_tid_ = 1;
    Clock::time_point now_{};
    Clock::time_point next_sweep_{};
    SmCounters counters_;
};

}  // namespace ipoibd::fabric
