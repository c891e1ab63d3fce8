// Partitions for ibfabricd, in the spirit of OpenSM's partitions.conf.
//
//   # comment
//   Name[=PKey][,flag]* : [member[=full|limited|both]][,member]* ;
//
// Flags: `ipoib` (the partition has an IPoIB broadcast group), and for that
// group `mtu=N` (IBA MTU code, 1..5), `rate=N` (IBA rate code), `sl=N`,
// `scope=N`, `qkey=N` (also `Q_Key=N`), `tclass=N`, `flowlabel=N`;
// `defmember=full|limited|both` (membership of members without one).
// Members: ALL, ALL_CAS, ALL_SWITCHES, SELF (the SM's own port), or a port
// GUID. A statement may span lines and ends with ';'.
//
// Defaults as OpenSM: P_Key from the name when not given is refused (say it);
// broadcast group Q_Key 0x0b1b, MTU 2048 (code 4), rate 10 Gb/s (code 3),
// SL 0, scope 2 (link-local); defmember limited. With no file, one
// partition: Default=0x7fff, ipoib : ALL=full (so ports hold 0xffff).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.h"
#include "common/utf8.h"

namespace ipoibd::fabric {

enum class Membership : std::uint8_t { limited, full, both };

struct PartitionMember {
    enum class Kind : std::uint8_t { all, all_cas, all_switches, self, guid } kind = Kind::all;
    std::uint64_t guid = 0;
    Membership membership = Membership::limited;
};

struct BroadcastGroupParams {
    std::uint8_t mtu = 4;    // IBA MTU code: 2048
    std::uint8_t rate = 3;   // IBA rate code: 10 Gb/s
    std::uint8_t sl = 0;
    std::uint8_t scope = 2;  // link-local
    std::uint32_t qkey = 0x00000B1B;
    std::uint8_t tclass = 0;
    std::uint32_t flow_label = 0;
    bool operator==(const BroadcastGroupParams&) const = default;
};

struct Partition {
    std::string name;
    std::uint16_t pkey = 0;  // the 15-bit base; members get it with or without bit 15
    bool ipoib = false;
    BroadcastGroupParams broadcast;
    std::vector<PartitionMember> members;
    int line = 0;  // where it was defined
};

struct PartitionsError {
    std::string file;
    int line = 0;
    std::string message;
    std::string to_string() const { return escape_text(file) + ":" + std::to_string(line) + ": " + message; }
};

expected<std::vector<Partition>, PartitionsError> parse_partitions(std::string_view text, const std::string& file);
expected<std::vector<Partition>, PartitionsError> load_partitions(const std::string& path);
std::vector<Partition> default_partitions();

// The P_Keys a CA port holds, in table order: for each partition that names
// it (by GUID, ALL or ALL_CAS), base|0x8000 when full, base when limited,
// both when both. `sm_port_guid` makes SELF match the SM's own port.
std::vector<std::uint16_t> pkeys_for_port(const std::vector<Partition>& partitions, std::uint64_t port_guid,
                                          std::uint64_t sm_port_guid = 0);

}  // namespace ipoibd::fabric
