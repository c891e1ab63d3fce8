#include "runtime/rate_limit.h"

#include "runtime/journal_fields.h"

namespace ipoibd::runtime {

RateLimiter::Verdict RateLimiter::check(std::string_view reason, Clock::time_point now) {
    auto it = windows_.find(reason);
    if (it == windows_.end()) {
        // Reasons are a closed set of tokens in the code; the bound only
        // guards against a caller building them from packet contents.
        if (windows_.size() >= config_.max_reasons) reason = kOtherReasons;
        it = windows_.try_emplace(std::string(reason), Window{.start = now}).first;
    }
    Window& w = it->second;
    Verdict verdict{.bucket = it->first};
    if (now - w.start >= config_.interval) {
        verdict.suppressed = w.suppressed;
        w = Window{.start = now};
    }
    if (w.logged < config_.burst) {
        ++w.logged;
        verdict.allow = true;
    } else {
        ++w.suppressed;
    }
    return verdict;
}

std::vector<RateLimiter::Summary> RateLimiter::expire(Clock::time_point now) {
    std::vector<Summary> out;
    for (auto it = windows_.begin(); it != windows_.end();) {
        if (now - it->second.start < config_.interval) {
            ++it;
            continue;
        }
        if (it->second.suppressed > 0) out.push_back(Summary{.reason = it->first, .suppressed = it->second.suppressed});
        it = windows_.erase(it);
    }
    return out;
}

void RateLimitedLog::log(std::string_view reason, std::string_view message, std::initializer_list<LogField> fields,
                         Clock::time_point now, const SourceLocation& where) {
    if (!logger_.enabled(level_)) return;
    const auto verdict = limiter_.check(reason, now);
    if (verdict.suppressed > 0) report(verdict.bucket, verdict.suppressed);
    if (!verdict.allow) return;
    std::vector<LogField> all;
    all.reserve(fields.size() + 1);
    all.push_back({field::kReason, reason});
    all.insert(all.end(), fields.begin(), fields.end());
    logger_.log(level_, message, all, std::nullopt, where);
}

void RateLimitedLog::flush(Clock::time_point now) {
    for (const auto& s : limiter_.expire(now)) report(s.reason, s.suppressed);
}

void RateLimitedLog::report(std::string_view reason, std::uint64_t suppressed) {
    const std::string count = std::to_string(suppressed);
    const std::string message = "suppressed " + count + " messages (" + std::string(reason) + ")";
    const LogField fields[] = {{field::kReason, reason}, {field::kSuppressed, count}};
    logger_.log(level_, message, fields);
}

}  // namespace ipoibd::runtime
