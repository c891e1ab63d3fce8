// The daemon's logger: five levels and structured fields.
//
//   log.info("link up", {{field::kIfname, "ib0"}, {field::kMgid, "ff12:401b:ffff::1"}}, msgid::kLinkUp);
//
// Two targets:
//   - journal: one entry per message through sd_journal_sendv, with
//     MESSAGE, PRIORITY, SYSLOG_IDENTIFIER, MESSAGE_ID (when given),
//     CODE_FILE/CODE_LINE and the caller's fields, so `journalctl
//     IPOIB_IFNAME=ib0` and `journalctl MESSAGE_ID=...` select entries;
//   - stderr lines: "ipoibd[1234]: info: link up (IPOIB_IFNAME=ib0 ...)",
//     one write(2) per line so lines from several threads do not mix.
// LogTarget::automatic picks the journal when stderr is the stream systemd
// connected to journald, as systemd.exec(5) says to detect it: the
// JOURNAL_STREAM variable holds "DEVICE:INODE" of that stream and matches
// fstat(2) of fd 2. LogTarget::journal asked for explicitly is honoured only
// when journald's socket exists (sd_journal_sendv() drops messages silently
// without it). When a journal send fails, the line goes to stderr instead.
//
// Field names and formats are in docs/journal.md and journal_fields.h,
// message ids in message_ids.h. Field names that are not valid journal
// names (A-Z, 0-9, '_', not starting with '_' or a digit, at most 64) are
// normalised rather than dropped, so a typo still reaches the log.
//
// Thread-safe: the level is atomic, and each message is one syscall. The
// data path logs through a RateLimitedLog (rate_limit.h), never directly.
#pragma once

#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/expected.h"
#include "common/sys_error.h"
#include "runtime/message_ids.h"

namespace ipoibd::runtime {

// The caller's file, line and function, for CODE_FILE/CODE_LINE/CODE_FUNC.
// std::source_location is not usable with clang 14 and libstdc++ 12 (the
// sanitizer build); the builtins behind it are, in both compilers, and as
// default arguments they are evaluated at the caller.
struct SourceLocation {
    const char* file = "";
    unsigned line = 0;
    const char* function = "";

    static constexpr SourceLocation current(const char* file = __builtin_FILE(), unsigned line = __builtin_LINE(),
                                            const char* function = __builtin_FUNCTION()) {
        return SourceLocation{file, line, function};
    }
};

enum class LogLevel : std::uint8_t { debug, info, notice, warning, error };

std::string_view log_level_name(LogLevel level);  // "debug" ... "error"
int syslog_priority(LogLevel level);              // LOG_DEBUG ... LOG_ERR
// Accepts the names above and "warn", "err"; for config files and options.
expected<LogLevel, std::string> parse_log_level(std::string_view text);

enum class LogTarget : std::uint8_t {
    automatic,  // journal when JOURNAL_STREAM matches stderr, else stderr
    journal,
    stderr_lines,
};

// Views, so logging costs no copies: write them in the call's braced list
// ({{field::kQpn, format_qpn(qpn)}} keeps the temporary alive until the call
// returns); an array of LogField needs its strings to outlive it.
struct LogField {
    std::string_view name;  // e.g. "IPOIB_IFNAME"
    std::string_view value;
};

// True when `journal_stream` ("DEVICE:INODE", the JOURNAL_STREAM value)
// names the file open on `fd`.
bool is_journal_stream(int fd, const char* journal_stream);

// Normalises a field name to the journal's rules: lower case to upper case,
// other characters to '_', a leading '_' or digit gets an "F" prefix,
// at most 64 characters.
std::string journal_field_name(std::string_view name);

// The "KEY=value" fields of one journal entry, in the order they are sent.
std::vector<std::string> journal_entry(std::string_view identifier, LogLevel level, std::string_view message,
                                       std::span<const LogField> fields, std::optional<MessageId> id,
                                       const SourceLocation& where);
// The stderr line for one message, with its trailing newline. Values with
// spaces, quotes, '=' or control characters are quoted and escaped.
std::string stderr_line(std::string_view identifier, int pid, LogLevel level, std::string_view message,
                        std::span<const LogField> fields);
// Sends one entry to journald (sd_journal_sendv).
expected<void, SysError> send_journal_entry(std::span<const std::string> entry);

class Logger {
public:
    struct Options {
        std::string identifier = "ipoibd";  // SYSLOG_IDENTIFIER and the line prefix
        LogTarget target = LogTarget::automatic;
        LogLevel min_level = LogLevel::info;
        int stderr_fd = 2;  // where stderr lines go (tests pass a pipe)
    };

    Logger();
    explicit Logger(Options options);

    LogTarget target() const { return target_; }  // journal or stderr_lines, never automatic
    void set_min_level(LogLevel level) { min_level_.store(level); }
    LogLevel min_level() const { return min_level_.load(); }
    bool enabled(LogLevel level) const { return level >= min_level(); }

    void log(LogLevel level, std::string_view message, std::span<const LogField> fields = {},
             std::optional<MessageId> id = std::nullopt,
             const SourceLocation& where = SourceLocation::current());

    void debug(std::string_view message, std::initializer_list<LogField> fields = {},
               std::optional<MessageId> id = std::nullopt,
               const SourceLocation& where = SourceLocation::current()) {
        log(LogLevel::debug, message, std::span(fields.begin(), fields.size()), id, where);
    }
    void info(std::string_view message, std::initializer_list<LogField> fields = {},
              std::optional<MessageId> id = std::nullopt,
              const SourceLocation& where = SourceLocation::current()) {
        log(LogLevel::info, message, std::span(fields.begin(), fields.size()), id, where);
    }
    void notice(std::string_view message, std::initializer_list<LogField> fields = {},
                std::optional<MessageId> id = std::nullopt,
                const SourceLocation& where = SourceLocation::current()) {
        log(LogLevel::notice, message, std::span(fields.begin(), fields.size()), id, where);
    }
    void warning(std::string_view message, std::initializer_list<LogField> fields = {},
                 std::optional<MessageId> id = std::nullopt,
                 const SourceLocation& where = SourceLocation::current()) {
        log(LogLevel::warning, message, std::span(fields.begin(), fields.size()), id, where);
    }
    void error(std::string_view message, std::initializer_list<LogField> fields = {},
               std::optional<MessageId> id = std::nullopt,
               const SourceLocation& where = SourceLocation::current()) {
        log(LogLevel::error, message, std::span(fields.begin(), fields.size()), id, where);
    }

private:
    void write_stderr(LogLevel level, std::string_view message, std::span<const LogField> fields);

    std::string identifier_;
    LogTarget target_ = LogTarget::stderr_lines;
    std::atomic<LogLevel> min_level_{LogLevel::info};
    int stderr_fd_ = 2;
};

}  // namespace ipoibd::runtime
