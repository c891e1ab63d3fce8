// ibsaquery's requests: a command and its options (from the command line or
// a line of a batch file) parsed into the SA query to send. Operator input:
// every error names the option and its value.
//
//   groups                      MCMemberRecord GetTable, no components
//   group MGID                  MCMemberRecord Get, component MGID
//   members MGID                MCMemberRecord GetTable, component MGID,
//                               SM_Key 1 (OpenSM's default) unless --sm-key
//   path --dgid G|--dlid L [--sgid G|--slid L] [--pkey P] [--table]
//                               PathRecord Get (GetTable with --table)
//   join MGID [--join-state S] [--qkey Q] [--pkey P] [--mtu [SEL:]BYTES]
//        [--rate [SEL:]GBPS] [--sl N] [--tclass N] [--flow-label N] [--create]
//                               MCMemberRecord Set: MGID, PortGID (this
//                               port), JoinState, and each option given;
//                               --create adds the creation components
//   leave MGID [--join-state S] MCMemberRecord Delete
//   subscribe TRAP [--listen D] InformInfo Set, Subscribe 1, for generic trap
//                               TRAP (64..67, or all) from every producer;
//                               --listen: print the Reports that come in for
//                               D, then unsubscribe
//   unsubscribe TRAP            InformInfo Set, Subscribe 0
//   subscriptions               InformInfoRecord GetTable, SM_Key 1 unless
//                               --sm-key
//   port                        this port and its SM (nothing is sent)
#pragma once

#include <cstdint>
#include <string>
#include <variant>
#include <vector>

#include "common/expected.h"
#include <chrono>

#include "sa_client/mad_transport.h"
#include "sa_client/sa_notice.h"
#include "sa_client/sa_records.h"

namespace ipoibd::sa::tools {

struct InformInfoRecordQuery {
    InformInfoRecord record;
    std::uint64_t component_mask = 0;
};

struct Request {
    std::string text;     // as the operator wrote it: "join ff12:401b:ffff::ffff:ffff --join-state full"
    std::string command;  // "join"
    std::uint8_t method = 0;
    std::variant<std::monostate, McMemberQuery, PathQuery, InformInfo, InformInfoRecordQuery> query;
    bool with_port_gid = false;  // join/leave: PortGID is this port's, known once it is open
    std::uint64_t sm_key = 0;
    std::chrono::milliseconds listen{0};  // subscribe --listen
};

// The command words and options, usage text for --help.
std::string request_usage();

// Parses one request: `words` are the command and its options, as split by
// the shell or from one batch line. Errors read "join: --mtu 'x': ...".
expected<Request, std::string> parse_request(const std::vector<std::string>& words);

// The MAD to submit (TID 0: the SaClient assigns it).
expected<SaMad, std::string> build_mad(const Request& request, const MadPortInfo& port);

}  // namespace ipoibd::sa::tools
