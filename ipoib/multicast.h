// The multicast manager: the link's IB multicast memberships, sans-I/O
// around the SaClient (RFC 4391 4, 5 and 10; DESIGN.md "The IPoIB engine").
//
//  1. start(): a FullMember join of the broadcast group, alone. Its record
//     (Q_Key, MTU, SL, rate, TClass, FlowLabel, HopLimit) is the link's:
//     McastSink::broadcast_joined() lets the engine bring the link up. A
//     failure keeps the link down and retries with the backoff below.
//  2. Only then the other groups join, each with the broadcast group's
//     parameters as creation components (10: "The MGID MUST use the same
//     P_Key, Q_Key, SL, MTU, and HopLimit as those used in the
//     broadcast-GID"):
//       - FullMember for the groups the host joined (IGMP/MLD reports on
//         the TUN) and the engine's own (all-hosts, all-nodes, solicited-
//         node), reference-counted; the QP is attached on success;
//       - a send-only join (state configurable) for egress to a group we
//         are not in; frames wait meanwhile, at most kMaxQueuedPerGroup (the
//         Linux driver's 64), the rest dropped and counted. Unused send-only
//         groups are left after send_only_idle.
//  3. A failed join (SA error status, or no answer after the SaClient's own
//     retries) is tried again after 1, 2, 4, 8, 16, 16... seconds, per group.
//  4. rejoin_all() (client reregister, SM change, LID change, port up):
//     every membership is asked for again, the broadcast group first.
//     port_down() marks them all lost without leaving (the SA forgets a port
//     that went away). leave_all() (shutdown) sends a Delete for each.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "common/counters.h"
#include "common/byte_io.h"
#include "ipoib/neighbour_cache.h"
#include "sa_client/sa_client.h"
#include "sa_client/sa_records.h"
#include "transport/port.h"

namespace ipoibd::ipoib {

enum class GroupRole : std::uint8_t {
    broadcast,  // the link's broadcast-GID, FullMember
    full,       // a group the host (or the engine) receives, FullMember
    send_only,  // egress only
};
std::string_view to_string(GroupRole r);

enum class GroupState : std::uint8_t {
    waiting,  // wanted; its join starts when the broadcast group is joined
    joining,  // a join is in flight
    joined,
    backoff,  // the last join failed; retry at retry_at
};
std::string_view to_string(GroupState s);

// The link parameters every group shares, from the broadcast group.
struct LinkParameters {
    std::uint32_t qkey = 0;
    std::uint8_t mtu = 0;  // IBA MTU code
    std::uint8_t rate = 0;
    std::uint8_t sl = 0;
    std::uint8_t tclass = 0;
    std::uint32_t flow_label = 0;
    std::uint8_t hop_limit = 0;
    std::uint16_t pkey = 0;
    bool operator==(const LinkParameters&) const = default;
};

struct McastGroupView {
    ib::Gid mgid{};
    GroupRole role = GroupRole::full;
    GroupState state = GroupState::waiting;
    std::uint16_t mlid = 0;
    std::uint8_t join_state = 0;  // sa::join_state bits held at the SA
    unsigned full_refs = 0;
    unsigned failures = 0;        // consecutive
    std::size_t queued = 0;
    std::uint64_t sent = 0;       // frames sent to the group
    Clock::time_point retry_at{};
};

struct McastCounters {
    std::uint64_t joins = 0;            // join requests (first tries of each attempt)
    std::uint64_t joined = 0;
    std::uint64_t join_failures = 0;
    std::uint64_t leaves = 0;
    std::uint64_t rejoins = 0;          // rejoin_all() calls
    std::uint64_t send_only_created = 0;
    std::uint64_t send_only_expired = 0;
    std::uint64_t mlid_changed = 0;
    std::uint64_t drop_queue_full = 0;  // over kMaxQueuedPerGroup while joining
    std::uint64_t drop_queued_bytes = 0;  // over Config::max_queued_bytes in all groups' queues
    std::uint64_t drop_join_failed = 0; // queued frames of a failed join
    std::uint64_t drop_table_full = 0;  // max_groups reached
    std::uint64_t drop_flushed = 0;     // queued frames at port down / leave
};
void visit(const McastCounters& c, CounterSink& out);

class McastSink {
public:
    virtual ~McastSink() = default;
    virtual void attach(const ib::Gid& mgid, std::uint16_t mlid) = 0;
    virtual void detach(const ib::Gid& mgid, std::uint16_t mlid) = 0;
    // The broadcast group is joined (again): the link may come up.
    virtual void broadcast_joined(const LinkParameters& link, std::uint16_t mlid) = 0;
    // A join failed; `retry_in` until the next try; `dropped` queued frames went.
    virtual void join_failed(const ib::Gid& mgid, GroupRole role, std::uint16_t sa_status, unsigned failures,
                             std::chrono::milliseconds retry_in, std::size_t dropped) = 0;
    // A group other than the broadcast group is joined; `frames` waited for it.
    virtual void group_joined(const ib::Gid& mgid, GroupRole role, std::uint16_t mlid,
                              std::vector<Packet> frames) = 0;
    virtual void group_left(const ib::Gid& mgid, GroupRole role) = 0;
};

// What to do with one egress multicast frame.
struct McastSendResult {
    enum class Outcome : std::uint8_t {
        send,         // joined: send to `ah` now
        queued,       // waits for the join
        dropped,      // queue full or table full (counted)
        unavailable,  // the group's join failed and it is in backoff: the caller
                      // applies RFC 4391 10 (all-routers, or drop)
    } outcome = Outcome::dropped;
    transport::AddressHandle ah;
};

class McastManager {
public:
    static constexpr std::size_t kMaxQueuedPerGroup = 64;  // Linux IPOIB_MAX_MCAST_QUEUE

    struct Config {
        std::uint8_t send_only_join_state = sa::join_state::send_only_full_member;
        std::size_t max_groups = 1024;
        std::chrono::milliseconds backoff_initial{1000};
        std::chrono::milliseconds backoff_max{16'000};
        std::chrono::milliseconds send_only_idle{300'000};
        // Frames waiting for joins, all groups together (64 frames x 1,024
        // groups of up to 64 KiB would be 4 GiB while the SA is slow).
        std::size_t max_queued_bytes = 16 * 1024 * 1024;
    };

    McastManager(sa::SaClient& sa, McastSink& sink, const Clock::time_point& now, Config config)
        : sa_(sa), sink_(sink), now_(now), config_(config) {}
    McastManager(const McastManager&) = delete;
    McastManager& operator=(const McastManager&) = delete;

    // Joins the broadcast group `broadcast_mgid` as `port_gid`.
    void start(const ib::Gid& broadcast_mgid, const ib::Gid& port_gid, std::uint16_t pkey);
    bool broadcast_joined() const;
    const std::optional<LinkParameters>& link() const { return link_; }
    const ib::Gid& broadcast_mgid() const { return broadcast_; }

    // FullMember interest in `mgid`, counted: the first add_full() joins,
    // the last remove_full() leaves. False (nothing counted) when the table
    // is full.
    bool add_full(const ib::Gid& mgid);
    void remove_full(const ib::Gid& mgid);

    // An egress frame (encapsulation header included) to `mgid`.
    McastSendResult send(const ib::Gid& mgid, bytes frame);
    // The address handle of a joined group, without side effects.
    std::optional<transport::AddressHandle> address_of(const ib::Gid& mgid) const;
    bool is_joined(const ib::Gid& mgid) const;

    void rejoin_all();
    void port_down();
    void leave_all();
    // The port GID changed (a new subnet prefix or GUID): rejoin as it.
    void set_port_gid(const ib::Gid& gid) { port_gid_ = gid; }
    // The join state of send-only joins from now on (SIGHUP).
    void set_send_only_join_state(std::uint8_t state) { config_.send_only_join_state = state; }

    void tick();
    std::optional<Clock::time_point> next_deadline() const;

    std::vector<McastGroupView> groups() const;
    const McastCounters& counters() const { return counters_; }

private:
    struct Group {
        GroupRole role = GroupRole::full;
        GroupState state = GroupState::waiting;
        unsigned full_refs = 0;
        std::uint16_t mlid = 0;
        std::uint8_t join_state = 0;  // held at the SA
        // Asked for with no answer yet, or none ever (a join that timed out
        // may have reached the SA): a leave deletes these too.
        std::uint8_t maybe_state = 0;
        bool attached = false;
        unsigned failures = 0;
        Clock::time_point retry_at{};
        Clock::time_point last_used{};
        std::uint64_t sent = 0;
        std::vector<Packet> queue;
        sa::SaClient::Handle request;
    };

    void join(const ib::Gid& mgid, Group& g);
    void on_join_answer(const ib::Gid& mgid, std::uint8_t join_state,
                        const expected<sa::SaResult, sa::SaFailure>& result);
    void leave(const ib::Gid& mgid, Group& g);
    // Empties g.queue into the result, taking its bytes off queued_bytes_.
    std::vector<Packet> take_queue(Group& g);
    void start_waiting();
    std::chrono::milliseconds backoff(unsigned failures) const;
    transport::AddressHandle address_handle(const ib::Gid& mgid, std::uint16_t mlid) const;
    std::uint8_t wanted_join_state(const Group& g) const;

    sa::SaClient& sa_;
    McastSink& sink_;
    const Clock::time_point& now_;
    Config config_;
    ib::Gid broadcast_{};
    ib::Gid port_gid_{};
    std::uint16_t pkey_ = ib::kPKeyDefault;
    std::optional<LinkParameters> link_;
    std::map<ib::Gid, Group> groups_;
    // Leaves in flight: kept so the SaClient retries them until answered.
    std::vector<sa::SaClient::Handle> leaving_;
    McastCounters counters_;
    std::size_t queued_bytes_ = 0;  // in all groups' queues
};

}  // namespace ipoibd::ipoib
