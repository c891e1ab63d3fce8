#include "daemon/engine_event_log.h"

#include <algorithm>
#include <array>
#include <string>
#include <vector>

#include "runtime/journal_fields.h"

namespace ipoibd::daemon {

namespace {

using K = ipoib::EngineEventKind;

constexpr std::array kSetOffByTheFabric{K::peer_changed, K::address_conflict, K::path_failed};

}  // namespace

std::optional<runtime::MessageId> message_id_of(ipoib::EngineEventKind k) {
    switch (k) {
    case K::link_up: return runtime::msgid::kLinkUp;
    case K::link_down: return runtime::msgid::kLinkDown;
    case K::broadcast_join_failed:
    case K::group_join_failed: return runtime::msgid::kJoinFailed;
    case K::group_joined: return runtime::msgid::kGroupJoined;
    case K::group_left: return runtime::msgid::kGroupLeft;
    case K::peer_changed: return runtime::msgid::kPeerChanged;
    case K::connection_failed: return runtime::msgid::kConnectionFailed;
    default: return std::nullopt;
    }
}

runtime::LogLevel level_of(ipoib::EngineEventKind k) {
    switch (k) {
    case K::peer_changed: return runtime::LogLevel::notice;
    case K::group_joined:
    case K::group_left: return runtime::LogLevel::debug;
    case K::link_down:
    case K::broadcast_join_failed:
    case K::group_join_failed:
    case K::address_conflict:
    case K::dad_failed:
    case K::path_failed:
    case K::connection_failed: return runtime::LogLevel::warning;
    case K::qp_open_failed: return runtime::LogLevel::error;
    default: return runtime::LogLevel::info;
    }
}

bool set_off_by_the_fabric(ipoib::EngineEventKind k) {
    return std::find(kSetOffByTheFabric.begin(), kSetOffByTheFabric.end(), k) != kSetOffByTheFabric.end();
}

void EngineEventLog::log(std::string_view ifname, const ipoib::EngineEvent& e, runtime::Clock::time_point now) {
    const runtime::LogLevel level = level_of(e.kind);
    if (!logger_.enabled(level)) return;
    if (set_off_by_the_fabric(e.kind)) {
        // One window per interface and kind: a flood on one interface
        // keeps the others' events.
        const std::string reason = std::string(ifname) + "/" + std::string(ipoib::to_string(e.kind));
        const auto verdict = limiter_.check(reason, now);
        if (verdict.suppressed > 0) report(verdict.bucket, verdict.suppressed);
        if (!verdict.allow) return;
    }
    std::vector<runtime::LogField> fields;
    fields.reserve(e.fields.size() + 1);
    fields.push_back({runtime::field::kIfname, ifname});
    for (const auto& [k, v] : e.fields) fields.push_back({k, v});
    logger_.log(level, e.message, fields, message_id_of(e.kind));
}

void EngineEventLog::flush(runtime::Clock::time_point now) {
    for (const auto& s : limiter_.expire(now)) report(s.reason, s.suppressed);
}

void EngineEventLog::report(std::string_view reason, std::uint64_t suppressed) {
    // "ib0/address_conflict", or the limiter's shared bucket (no '/':
    // interface names have none).
    const auto slash = reason.rfind('/');
    const std::string_view ifname = slash == std::string_view::npos ? std::string_view{} : reason.substr(0, slash);
    const std::string_view kind = slash == std::string_view::npos ? reason : reason.substr(slash + 1);
    runtime::LogLevel level = runtime::LogLevel::warning;
    for (const K k : kSetOffByTheFabric)
        if (kind == ipoib::to_string(k)) level = level_of(k);
    const std::string count = std::to_string(suppressed);
    const std::string message = "suppressed " + count + " messages (" + std::string(kind) + ")";
    std::vector<runtime::LogField> fields;
    if (!ifname.empty()) fields.push_back({runtime::field::kIfname, ifname});
    fields.push_back({runtime::field::kReason, kind});
    fields.push_back({runtime::field::kSuppressed, count});
    logger_.log(level, message, fields);
}

}  // namespace ipoibd::daemon
