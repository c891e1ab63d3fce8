// The synthetic MACs of TAP mode: each remote IPoIB endpoint (a port GID)
// gets a stable, locally administered unicast MAC that stands for its
// 20-byte address in front of the kernel's Ethernet stack, as iPXE and
// eIPoIB present IPoIB. Sans-I/O, like the neighbour cache beside it.
//
// The MAC is made from the GID's interface identifier (the port GUID):
//   02:g3:g4:g5:g6:g7   (0x02: locally administered, unicast; g3..g7: the
//                        low 40 bits of the GUID, the part a vendor numbers)
// so it survives a peer's restart (a new QPN updates the entry in place),
// a daemon's restart, and reads back to the GUID in `ip neigh`. Two GIDs
// whose GUIDs share the low 40 bits (or a GUID giving a MAC already taken,
// or the one reserved: the TAP's own)
// get a hashed MAC instead (02 + 40 bits of FNV-1a over the GID and an
// attempt number), counted as a collision; which of the two gets it
// depends on the order they were learned, so only those MACs may differ
// after a restart.
//
// Bounded: at most max_entries endpoints. Entries are aged with the
// neighbour cache: prune() removes those no neighbour entry refers to any
// more and nobody has used for `idle` (sending to the MAC uses it;
// receiving from it does not, to keep the receive path to one lookup); a
// full table evicts its least recently used entry once that has been idle
// for `idle`, referenced or not (the kernel re-resolves it at its next use
// and gets its MAC again), else refuses (counted `full`: the kernel's
// resolution then fails, nothing else does). One source LID holds at most
// max_per_lid entries (counted `lid_full`), so no one port can fill it.
//
// Lookups the data path makes: MAC -> 20-byte address (a frame the kernel
// sends), and (source LID, source QPN) -> MAC (the source of a frame the
// fabric sent, for the Ethernet header written to the kernel).
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <unordered_map>
#include <vector>

#include "common/counters.h"
#include "common/ethernet.h"
#include "ipoib/hw_address.h"

namespace ipoibd::ipoib {

// The MAC of `gid` on attempt 0 (from the GUID), or a hashed one after.
MacAddress synthetic_mac(const ib::Gid& gid, unsigned attempt = 0);

struct MacTableCounters {
    std::uint64_t added = 0;
    std::uint64_t removed = 0;         // aged out with the neighbour cache
    std::uint64_t collisions = 0;      // a GUID's MAC was taken: hashed instead
    std::uint64_t full = 0;            // refused: max_entries and nothing idle to evict (or no free MAC)
    std::uint64_t lid_full = 0;        // refused: max_per_lid entries at the sender's LID already
    std::uint64_t address_changed = 0; // a known GID with a new QPN (a restarted peer)
    bool operator==(const MacTableCounters&) const = default;
};
void visit(const MacTableCounters& c, CounterSink& out);

struct MacEntryView {
    MacAddress mac{};
    HwAddress hw;
    std::uint16_t lid = 0;  // where its frames come from; 0: not known yet
};

class MacTable {
public:
    using Clock = std::chrono::steady_clock;
    struct Config {
        std::size_t max_entries = 4096;
        std::chrono::milliseconds idle{60'000};  // unused this long and not a neighbour: removed
        // Entries learned from one source LID (one port: the fabric vouches
        // for the LID, not for the GIDs its ARP/ND names); a port has its
        // GUID and a few alias GUIDs (SR-IOV functions), not hundreds.
        std::size_t max_per_lid = 256;
    };

    MacTable() : MacTable(Config{}) {}
    explicit MacTable(Config config) : config_(config) {}

    // The MAC standing for `hw` (by its GID), the entry created or its QPN,
    // flags and LID updated; nullopt when the table is full. `lid` 0: not
    // known (kept as it was).
    std::optional<MacAddress> learn(const HwAddress& hw, std::uint16_t lid, Clock::time_point now);
    // The 20-byte address a MAC stands for (marks the entry used).
    std::optional<HwAddress> find(const MacAddress& mac, Clock::time_point now);
    // The MAC of the endpoint at (LID, QPN), if one is known; else of the
    // one endpoint known at that LID, if there is exactly one: a sender on
    // an HCA with data threads sends from QPs other than the one its ARP/ND
    // names (docs/ipoib-engine.md, "Data threads"), and a restarted peer
    // sends from a new QPN before its next ARP/ND; both are the same host.
    // ("One known": an endpoint on that port we never heard from gets it
    // too; the source MAC is a label the host's IP stack ignores.)
    std::optional<MacAddress> mac_of_source(std::uint16_t slid, std::uint32_t qpn) const;
    std::optional<MacAddress> mac_of(const ib::Gid& gid) const;
    // The entry standing for `gid`, if any.
    std::optional<MacEntryView> entry_of(const ib::Gid& gid) const;

    // Removes entries whose GID `referenced` says no to and that were not
    // used for config().idle.
    void prune(const std::function<bool(const ib::Gid&)>& referenced, Clock::time_point now);
    void clear();
    // A MAC never given to an endpoint (the TAP's own: the synthetic MAC
    // of our GID, which a GID sharing its low 40 bits would get): taken,
    // as a collision.
    void reserve(const MacAddress& mac) { reserved_ = mac; }

    std::size_t size() const { return by_mac_.size(); }
    std::vector<MacEntryView> entries() const;
    const MacTableCounters& counters() const { return counters_; }
    const Config& config() const { return config_; }
    void set_config(const Config& c) { config_ = c; }

private:
    struct Entry {
        HwAddress hw;
        std::uint16_t lid = 0;
        Clock::time_point used{};
    };
    struct MacHash {
        std::size_t operator()(const MacAddress& m) const noexcept;
    };
    struct GidHash {
        std::size_t operator()(const ib::Gid& g) const noexcept;
    };
    static std::uint64_t source_key(std::uint16_t slid, std::uint32_t qpn) {
        return static_cast<std::uint64_t>(slid) << 24 | (qpn & 0xFFFFFF);
    }
    void forget_source(const Entry& e);
    bool make_room(Clock::time_point now);
    // Entries at a LID: counted, with the MAC of one of them.
    void add_lid(std::uint16_t lid, const MacAddress& mac);
    void drop_lid(std::uint16_t lid, const MacAddress& mac);

    Config config_;
    std::unordered_map<MacAddress, Entry, MacHash> by_mac_;
    std::unordered_map<ib::Gid, MacAddress, GidHash> by_gid_;
    std::unordered_map<std::uint64_t, MacAddress> by_source_;
    struct AtLid {
        unsigned entries = 0;
        MacAddress mac{};  // one of them
    };
    std::unordered_map<std::uint16_t, AtLid> by_lid_;
    std::optional<MacAddress> reserved_;
    MacTableCounters counters_;
};

}  // namespace ipoibd::ipoib
