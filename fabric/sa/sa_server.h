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
//  - InformInfoRecord Get/GetTable lists subscriptions.
//  - InformInfo Set subscribes a port (its LID and the request's QPN) to
//    generic traps 64/65 (GID in/out of service) and 66/67 (multicast
//    group created/deleted); each event becomes a Report(Notice) to every
//    subscriber sharing a partition with the port or group, sent again
//    every report_timeout until a ReportResp comes, at most report_retries
//    times.
// Requests come from the SM port's QP1; `requester_lid` is the LRH SLID.
//
// Files: this class's core is sa_server.cpp (the table from attribute to
// handler, the checks every request passes, Get and GetTable answers with
// RMPP, ports coming and going, retries); each record type has its own
// file beside it (node_record.cpp, path_record.cpp, mc_member_record.cpp,
// ...), as OpenSM keeps one per record; sa_internal.h is what they share.
#pragma once

#include "common/counters.h"

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <vector>

#include "fabric/partitions.h"
#include "fabric/switch.h"
#include "sa_client/rmpp.h"
#include "sa_client/sa_mad.h"
#include "sa_client/sa_notice.h"
#include "sa_client/sa_records.h"
#include "sa_client/sa_topology.h"

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
    std::uint16_t switch_lid = 0;  // the LID of the switch it is plugged into (0: the SA's)
    // For NodeRecord and PortInfoRecord: what the SM read and set.
    std::uint64_t node_guid = 0;
    std::string description;
    ib::PortInfo port_info;
};

// The switch, as its SMA reports it, for NodeRecord, PortInfoRecord and
// LinkRecord (the SA's own node).
struct SaSwitch {
    std::uint16_t lid = 0;
    ib::NodeInfo node_info;
    std::string description;
    std::vector<ib::PortInfo> ports;  // index = port number, 0..NumPorts
};

struct SaServerConfig {
    std::vector<Partition> partitions = default_partitions();
    std::uint64_t subnet_prefix = 0xFE80000000000000ULL;
    // OpenSM's sa_key (default 1): a request presenting it is trusted (it
    // sees every member of a group); one presenting another non-zero key
    // is discarded unanswered (C15-0.1.5); 0 is an untrusted requester.
    std::uint64_t sm_key = 1;
    std::uint8_t packet_life_time = 0x12;   // OpenSM's default subnet packet life time
    std::uint16_t sm_lid = 1;               // issuer of the SA's notices
    std::chrono::milliseconds report_timeout{1000};
    unsigned report_retries = 3;
    std::size_t max_pending_reports = 4096;
    std::chrono::milliseconds rmpp_timeout{1000};  // resend an unacknowledged window
    unsigned rmpp_retries = 3;
    std::size_t max_transfers = 256;
    // One port's share (refused with ERR_NO_RESOURCES and counted): the
    // groups it is a member of (so the groups it can create, and MLIDs it
    // can take: 16,384 in all), and its InformInfo subscriptions.
    std::size_t max_groups_per_port = 1024;
    std::size_t max_subscriptions_per_port = 64;
};

// An unsolicited MAD for a port: a Report to a subscriber.
struct SaOutgoing {
    std::uint16_t dlid = 0;
    std::uint32_t dest_qp = 1;
    std::uint16_t pkey = 0xFFFF;
    sa::SaMad mad;
};

struct Subscription {
    std::uint64_t guid = 0;      // subscriber's port
    std::uint32_t qpn = 1;       // where Reports go
    std::uint16_t trap = 0;      // trap number, 0xFFFF = all
};

struct McGroup {
    sa::McMemberRecord params;  // MGID, Q_Key, MLID, MTU, TClass, P_Key, rate, SL, FlowLabel, HopLimit, scope
    bool predefined = false;    // a partition's broadcast group: never deleted
    std::map<std::uint64_t, std::uint8_t> members;  // port GUID -> JoinState bits
    std::set<std::uint64_t> proxied;  // members another port joined (ProxyJoin): any port of the partition may change them
};

struct SaCounters {
    std::uint64_t requests = 0;
    std::uint64_t errors = 0;       // responses with a non-zero status
    std::uint64_t malformed = 0;    // not answered: not an SA request we can parse
    std::uint64_t sm_key_refused = 0;  // not answered: a non-zero SM_Key that is not the SA's
    std::uint64_t groups_created = 0;
    std::uint64_t groups_deleted = 0;
    std::uint64_t reports_sent = 0;      // Report MADs, retries included
    std::uint64_t reports_acked = 0;
    std::uint64_t reports_dropped = 0;   // no ReportResp after every retry, or too many pending
    std::uint64_t rmpp_transfers = 0;    // multi-segment GetTableResps started
    std::uint64_t rmpp_aborted = 0;      // stopped by the requester, or unacknowledged after retries
    std::uint64_t joins_over_limit = 0;  // joins refused: the port is in max_groups_per_port groups
    std::uint64_t subscriptions_over_limit = 0;  // InformInfo refused: max_subscriptions_per_port
};
// As "requests", "sm_key_refused", ...
void visit(const SaCounters& c, CounterSink& out);

class SaServer {
public:
    using PortList = std::function<std::vector<SaPort>()>;

    SaServer(SaServerConfig config, Switch& sw, PortList ports);

    // Who programs a group's MulticastForwardingTable entries: the SM,
    // through every switch's SMA (FabricService), told the members' port
    // GUIDs. Unset, the SA sets its own switch's table itself from the
    // members' switch ports (an SA tested or benchmarked alone).
    using MulticastProgrammer = std::function<void(std::uint16_t mlid, const std::set<std::uint64_t>& members)>;
    void set_multicast_programmer(MulticastProgrammer programmer) { program_multicast_ = std::move(programmer); }
    // The switch for the topology records; unset: the SA knows only its
    // CA ports (NodeRecord, PortInfoRecord of those, no LinkRecords).
    using SwitchView = std::function<std::optional<SaSwitch>()>;
    void set_switch_view(SwitchView view) { switch_view_ = std::move(view); }

    // One request; returns the response MADs (one, or RMPP segments).
    std::vector<sa::SaMad> handle(const sa::SaMad& request, std::uint16_t requester_lid,
                                  std::uint32_t requester_qpn = ib::kQp1, Clock::time_point now = {},
                                  std::uint16_t requester_pkey = ib::kPKeyDefault);

    // A port joined the subnet (trap 64).
    void port_active(std::uint64_t guid, Clock::time_point now);
    // A port left the subnet: its memberships and subscriptions end (trap 65).
    void port_gone(std::uint64_t guid, Clock::time_point now = {});
    // Report retries.
    void tick(Clock::time_point now);
    // Reports to send.
    std::vector<SaOutgoing> take_outbound();
    const std::vector<Subscription>& subscriptions() const { return subscriptions_; }
    // Ports moved (came up, changed switch port): the port list is read
    // again and forwarding rebuilt.
    void refresh_forwarding();
    // New partitions (ibfabricd SIGHUP): new `ipoib` partitions get their
    // broadcast groups; groups of partitions that went stay until their
    // members leave (the ports lose the P_Key, so they cannot rejoin).
    void set_partitions(std::vector<Partition> partitions);

    const std::map<ib::Gid, McGroup>& groups() const { return groups_; }
    const SaCounters& counters() const { return counters_; }

private:
    std::optional<SaPort> port_by_lid(std::uint16_t lid) const;
    std::optional<SaPort> port_by_gid(const ib::Gid& gid) const;
    std::uint16_t join(const sa::McMemberRecord& req, std::uint64_t mask, const SaPort& requester, sa::McMemberRecord& out);
    std::uint16_t create_group(const sa::McMemberRecord& req, std::uint64_t mask, const SaPort& requester, McGroup& out);
    std::uint16_t leave(const sa::McMemberRecord& req, std::uint64_t mask, const SaPort& requester, sa::McMemberRecord& out);
    std::vector<sa::McMemberRecord> query_groups(const sa::McMemberRecord& req, std::uint64_t mask, const SaPort& requester,
                                                 bool trusted) const;
    std::vector<sa::PathRecord> query_paths(const sa::PathRecord& req, std::uint64_t mask, const SaPort& requester,
                                            bool all_sources) const;
    struct Requester {
        std::uint16_t lid;
        std::uint32_t qpn;
        std::uint16_t pkey;
    };
    // One request as the handlers see it: the MAD, the response being
    // built, who asks and whether it presented the SA's SM_Key.
    struct Request {
        const sa::SaMad& mad;
        sa::SaMad& resp;
        const SaPort& requester;
        Requester to;
        bool trusted = false;
        std::uint8_t method() const { return mad.header.method; }
        std::uint64_t mask() const { return mad.component_mask; }
    };
    // The table from attribute to handler (sa_server.cpp); each handler
    // lives in its record's file.
    using Handler = std::vector<sa::SaMad> (SaServer::*)(const Request&);
    struct Route {
        std::uint16_t attribute_id;
        Handler handler;
    };
    static const Route kRoutes[];
    std::vector<sa::SaMad> on_class_port_info(const Request& r);
    std::vector<sa::SaMad> on_node_record(const Request& r);
    std::vector<sa::SaMad> on_port_info_record(const Request& r);
    std::vector<sa::SaMad> on_link_record(const Request& r);
    std::vector<sa::SaMad> on_path_record(const Request& r);
    std::vector<sa::SaMad> on_mc_member_record(const Request& r);
    std::vector<sa::SaMad> on_inform_info(const Request& r);
    std::vector<sa::SaMad> on_inform_info_record(const Request& r);
    // The response with `status` (counted when it is an error).
    std::vector<sa::SaMad> reply(const Request& r, std::uint16_t status);
    template <class Record>
    std::vector<sa::SaMad> respond_records(const Request& r, const std::vector<Record>& found);
    std::vector<sa::SaMad> on_rmpp_control(const sa::SaMad& mad, std::uint16_t requester_lid);

    // GetTableResp transfers in progress: RMPP windows, ACK-driven.
    struct Transfer {
        sa::RmppSender sender;
        Requester to;
        Clock::time_point deadline{};
        unsigned tries = 0;
    };
    std::map<std::pair<std::uint16_t, std::uint32_t>, Transfer> transfers_;  // (LID, TID low 32)
    std::uint16_t allocate_mlid() const;
    void create_predefined_groups();
    void update_forwarding(const McGroup& g);
    std::uint16_t inform(const sa::InformInfo& info, const SaPort& requester, std::uint32_t qpn);
    std::vector<sa::InformInfoRecord> query_subscriptions(const sa::InformInfoRecord& req, std::uint64_t mask,
                                                          const SaPort& requester) const;
    std::size_t memberships_of(std::uint64_t guid) const;  // groups the port is a member of
    void report(std::uint16_t trap, const ib::Gid& gid, std::uint16_t pkey_or_zero, std::optional<SaPort> about,
                Clock::time_point now);
    void send_report(std::size_t index, Clock::time_point now);

    struct PendingReport {
        SaOutgoing out;
        Clock::time_point deadline{};
        unsigned tries = 0;
    };
    std::vector<Subscription> subscriptions_;
    std::map<std::uint32_t, PendingReport> pending_reports_;  // by TID low 32 bits
    std::vector<SaOutgoing> outbound_;
    std::uint32_t next_report_tid_ = 1;
    Clock::time_point now_{};

    void reload_ports();
    void index_ports();  // by_lid_, by_guid_, by_gid_ from port_list_
    const SaPort* port_by_guid(std::uint64_t guid) const;
    bool may_modify(const McGroup& g, std::uint64_t member_guid, const SaPort& requester) const;
    static bool shares_partition(const SaPort& a, const SaPort& b);

    SaServerConfig config_;
    Switch& switch_;
    MulticastProgrammer program_multicast_;
    SwitchView switch_view_;
    std::vector<sa::NodeRecord> query_nodes(const sa::NodeRecord& req, std::uint64_t mask, const SaPort& requester) const;
    std::vector<sa::PortInfoRecord> query_port_infos(const sa::PortInfoRecord& req, std::uint64_t mask,
                                                     const SaPort& requester, bool trusted) const;
    std::vector<sa::LinkRecord> query_links(const sa::LinkRecord& req, std::uint64_t mask,
                                            const SaPort& requester) const;
    void program_multicast(std::uint16_t mlid, const std::set<std::uint64_t>& members);
    PortList ports_;
    // The ports as of the last reload_ports(): list and indexes into it.
    std::vector<SaPort> port_list_;
    std::map<std::uint16_t, std::size_t> by_lid_;
    std::map<std::uint64_t, std::size_t> by_guid_;
    std::map<ib::Gid, std::size_t> by_gid_;
    std::map<ib::Gid, McGroup> groups_;
    std::uint32_t next_mgid_ = 1;
    SaCounters counters_;
};

}  // namespace ipoibd::fabric
