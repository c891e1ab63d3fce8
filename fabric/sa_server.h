// The subnet administrator of the soft fabric, sans-I/O: SA MADs in, SA MADs
// out, behaving like OpenSM (docs/sa.md lists where and why it differs).
//
//  - MCMemberRecord: Set joins (FullMember, NonMember, SendOnlyNonMember,
//    SendOnlyFullMember), creating a group only from a join that carries
//    the creation components; Delete leaves, removing the group with its
//    last member unless a partition defines it; Get and GetTable by
//    component mask. IPoIB groups (MGID ff1S:401b:PPPP / ff1S:601b:PPPP)
//    get the parameters of their partition's broadcast group.
//  - PathRecord: Get and GetTable between GIDs or LIDs of ports that share
//    a partition.
//  - The switch's multicast forwarding table follows membership: an MLID
//    goes to the switch ports of its FullMember and NonMember ports.
// Requests come from the SM port's QP1; `requester_lid` is the LRH SLID.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "fabric/partitions.h"
#include "fabric/switch.h"
#include "sa_client/sa_mad.h"
#include "sa_client/sa_records.h"

namespace ipoibd::fabric {

// What the SA knows of an ACTIVE CA port (from the SM).
struct SaPort {
    std::uint16_t lid = 0;
    std::uint64_t guid = 0;
    ib::Gid gid{};
    std::uint8_t mtu = 4;   // IBA MTU code
    std::uint8_t rate = 3;  // IBA rate code
    std::vector<std::uint16_t> pkeys;
    std::uint8_t switch_port = 0;
};

struct SaServerConfig {
    std::vector<Partition> partitions = default_partitions();
    std::uint64_t subnet_prefix = 0xFE80000000000000ULL;
    std::uint64_t sm_key = 1;               // requesters presenting it see members (OpenSM's default)
    std::uint8_t packet_life_time = 0x12;   // OpenSM's default subnet packet life time
};

struct McGroup {
    sa::McMemberRecord params;  // MGID, Q_Key, MLID, MTU, TClass, P_Key, rate, SL, FlowLabel, HopLimit, scope
    bool predefined = false;    // a partition's broadcast group: never deleted
    std::map<std::uint64_t, std::uint8_t> members;  // port GUID -> JoinState bits
};

struct SaCounters {
    std::uint64_t requests = 0;
    std::uint64_t errors = 0;       // responses with a non-zero status
    std::uint64_t malformed = 0;    // not answered: not an SA request we can parse
    std::uint64_t groups_created = 0;
    std::uint64_t groups_deleted = 0;
};

class SaServer {
public:
    using PortList = std::function<std::vector<SaPort>()>;

    SaServer(SaServerConfig config, Switch& sw, PortList ports);

    // One request; returns the response MADs (one, or RMPP segments).
    std::vector<sa::SaMad> handle(const sa::SaMad& request, std::uint16_t requester_lid);

    // A port left the subnet: its memberships end.
    void port_gone(std::uint64_t guid);
    // Ports moved (came up, changed switch port): forwarding is rebuilt.
    void refresh_forwarding();

    const std::map<ib::Gid, McGroup>& groups() const { return groups_; }
    const SaCounters& counters() const { return counters_; }

private:
    std::optional<SaPort> port_by_lid(std::uint16_t lid) const;
    std::optional<SaPort> port_by_gid(const ib::Gid& gid) const;
    std::uint16_t join(const sa::McMemberRecord& req, std::uint64_t mask, const SaPort& requester, sa::McMemberRecord& out);
    std::uint16_t create_group(const sa::McMemberRecord& req, std::uint64_t mask, const SaPort& requester, McGroup& out);
    std::uint16_t leave(const sa::McMemberRecord& req, std::uint64_t mask, const SaPort& requester, sa::McMemberRecord& out);
    std::vector<sa::McMemberRecord> query_groups(const sa::McMemberRecord& req, std::uint64_t mask, bool trusted) const;
    std::vector<sa::PathRecord> query_paths(const sa::PathRecord& req, std::uint64_t mask, const SaPort& requester) const;
    template <class Record>
    std::vector<sa::SaMad> respond_records(sa::SaMad& resp, std::uint8_t method, const std::vector<Record>& found);
    std::uint16_t allocate_mlid() const;
    void create_predefined_groups();
    void update_forwarding(const McGroup& g);

    SaServerConfig config_;
    Switch& switch_;
    PortList ports_;
    std::map<ib::Gid, McGroup> groups_;
    std::uint32_t next_mgid_ = 1;
    SaCounters counters_;
};

}  // namespace ipoibd::fabric
