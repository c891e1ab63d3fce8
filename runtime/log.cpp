#include "runtime/log.h"

// Location fields are added by journal_entry() from the caller's
// SourceLocation, not by sd-journal's macros (which would name this
// file).
#define SD_JOURNAL_SUPPRESS_LOCATION 1
#include <sys/stat.h>
#include <sys/uio.h>
#include <syslog.h>
#include <systemd/sd-journal.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdlib>
#include <string>

#include "common/utf8.h"

namespace ipoibd::runtime {

namespace {
constexpr const char* kJournalSocket = "/run/systemd/journal/socket";
}  // namespace

std::string_view log_level_name(LogLevel level) {
    switch (level) {
        case LogLevel::debug: return "debug";
        case LogLevel::info: return "info";
        case LogLevel::notice: return "notice";
        case LogLevel::warning: return "warning";
        case LogLevel::error: return "error";
    }
    return "error";
}

int syslog_priority(LogLevel level) {
    switch (level) {
        case LogLevel::debug: return LOG_DEBUG;
        case LogLevel::info: return LOG_INFO;
        case LogLevel::notice: return LOG_NOTICE;
        case LogLevel::warning: return LOG_WARNING;
        case LogLevel::error: return LOG_ERR;
    }
    return LOG_ERR;
}

expected<LogLevel, std::string> parse_log_level(std::string_view text) {
    if (text == "debug") return LogLevel::debug;
    if (text == "info") return LogLevel::info;
    if (text == "notice") return LogLevel::notice;
    if (text == "warning" || text == "warn") return LogLevel::warning;
    if (text == "error" || text == "err") return LogLevel::error;
    return unexpected("unknown log level '" + std::string(text) + "' (debug, info, notice, warning, error)");
}

bool is_journal_stream(int fd, const char* journal_stream) {
    if (journal_stream == nullptr) return false;
    const std::string_view text(journal_stream);
    const auto colon = text.find(':');
    if (colon == std::string_view::npos) return false;
    std::uint64_t dev = 0;
    std::uint64_t ino = 0;
    const char* end = text.data() + text.size();
    auto d = std::from_chars(text.data(), text.data() + colon, dev);
    auto i = std::from_chars(text.data() + colon + 1, end, ino);
    if (d.ec != std::errc() || d.ptr != text.data() + colon || i.ec != std::errc() || i.ptr != end) return false;
    struct stat st {};
    if (::fstat(fd, &st) < 0) return false;
    return static_cast<std::uint64_t>(st.st_dev) == dev && static_cast<std::uint64_t>(st.st_ino) == ino;
}

std::string journal_field_name(std::string_view name) {
    std::string out;
    if (name.empty() || name.front() == '_' || (name.front() >= '0' && name.front() <= '9')) out = "F";
    for (char c : name) {
        if (c >= 'a' && c <= 'z')
            out += static_cast<char>(c - 'a' + 'A');
        else if ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9'))
            out += c;
        else
            out += '_';
    }
    if (out.size() > 64) out.resize(64);
    return out;
}

std::vector<std::string> journal_entry(std::string_view identifier, LogLevel level, std::string_view message,
                                       std::span<const LogField> fields, std::optional<MessageId> id,
                                       const SourceLocation& where) {
    std::vector<std::string> entry;
    entry.reserve(7 + fields.size());
    entry.push_back("MESSAGE=" + std::string(message));
    entry.push_back("PRIORITY=" + std::to_string(syslog_priority(level)));
    entry.push_back("SYSLOG_IDENTIFIER=" + std::string(identifier));
    if (id) entry.push_back("MESSAGE_ID=" + std::string(id->hex));
    entry.push_back("CODE_FILE=" + std::string(where.file));
    entry.push_back("CODE_LINE=" + std::to_string(where.line));
    entry.push_back("CODE_FUNC=" + std::string(where.function));
    for (const auto& f : fields) entry.push_back(journal_field_name(f.name) + "=" + std::string(f.value));
    return entry;
}

namespace {

void append_escaped(std::string& out, char c) {
    static constexpr char kHex[] = "0123456789abcdef";
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
        case '\n': out += "\\n"; return;
        case '\t': out += "\\t"; return;
        case '\r': out += "\\r"; return;
        default: break;
    }
    if (u < 0x20 || u >= 0x7f) {  // the bytes of UTF-8 text come through append_text()
        out += "\\x";
        out += kHex[u >> 4];
        out += kHex[u & 0xf];
    } else {
        out += c;
    }
}

// `text` escaped for one line of a terminal: controls (C1 too) and bytes
// that are not UTF-8 as \xNN, well-formed characters as they are. A
// backslash or quote is preceded by a backslash where `quote` says so.
void append_text(std::string& out, std::string_view text, bool quote) {
    while (!text.empty()) {
        const std::size_t n = utf8_sequence_length(text);
        if (n > 1 && !starts_with_c1_control(text)) {
            out += text.substr(0, n);
            text.remove_prefix(n);
            continue;
        }
        if (quote && (text[0] == '"' || text[0] == '\\')) out += '\\';
        append_escaped(out, text[0]);
        text.remove_prefix(1);
    }
}

bool needs_quotes(std::string_view value) {
    if (value.empty()) return true;
    for (char c : value) {
        const auto u = static_cast<unsigned char>(c);
        if (c == ' ' || c == '"' || c == '\\' || c == '=' || c == '(' || c == ')' || u < 0x20 || u >= 0x7f)
            return true;
    }
    return false;
}

void append_value(std::string& out, std::string_view value) {
    if (!needs_quotes(value)) {
        out += value;
        return;
    }
    out += '"';
    append_text(out, value, true);
    out += '"';
}

}  // namespace

std::string stderr_line(std::string_view identifier, int pid, LogLevel level, std::string_view message,
                        std::span<const LogField> fields) {
    std::string line;
    line.reserve(64 + message.size() + 32 * fields.size());
    line += identifier;
    line += '[';
    line += std::to_string(pid);
    line += "]: ";
    line += log_level_name(level);
    line += ": ";
    append_text(line, message, false);  // one message, one line
    if (!fields.empty()) {
        line += " (";
        for (std::size_t i = 0; i < fields.size(); ++i) {
            if (i > 0) line += ' ';
            line += journal_field_name(fields[i].name);
            line += '=';
            append_value(line, fields[i].value);
        }
        line += ')';
    }
    line += '\n';
    return line;
}

expected<void, SysError> send_journal_entry(std::span<const std::string> entry) {
    std::vector<iovec> iov(entry.size());
    for (std::size_t i = 0; i < entry.size(); ++i) {
        iov[i].iov_base = const_cast<char*>(entry[i].data());  // sd_journal_sendv only reads
        iov[i].iov_len = entry[i].size();
    }
    const int r = ::sd_journal_sendv(iov.data(), static_cast<int>(iov.size()));
    if (r < 0) return unexpected(SysError{"send a journal entry", -r});
    return {};
}

Logger::Logger() : Logger(Options{}) {}

Logger::Logger(Options options)
    : identifier_(std::move(options.identifier)), min_level_(options.min_level), stderr_fd_(options.stderr_fd) {
    switch (options.target) {
        case LogTarget::automatic:
            target_ = is_journal_stream(stderr_fd_, std::getenv("JOURNAL_STREAM")) ? LogTarget::journal
                                                                                   : LogTarget::stderr_lines;
            break;
        case LogTarget::journal:
            // sd_journal_sendv() succeeds silently when journald's socket is
            // absent: without it, messages would vanish.
            target_ = ::access(kJournalSocket, F_OK) == 0 ? LogTarget::journal : LogTarget::stderr_lines;
            break;
        case LogTarget::stderr_lines: target_ = options.target; break;
    }
}

void Logger::log(LogLevel level, std::string_view message, std::span<const LogField> fields,
                 std::optional<MessageId> id, const SourceLocation& where) {
    if (!enabled(level)) return;
    if (target_ == LogTarget::journal) {
        if (send_journal_entry(journal_entry(identifier_, level, message, fields, id, where))) return;
        // journald is not answering: the line on stderr is better than nothing.
    }
    write_stderr(level, message, fields);
}

void Logger::write_stderr(LogLevel level, std::string_view message, std::span<const LogField> fields) {
    const std::string line = stderr_line(identifier_, static_cast<int>(::getpid()), level, message, fields);
    std::string_view rest = line;
    while (!rest.empty()) {
        const ssize_t n = ::write(stderr_fd_, rest.data(), rest.size());
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;  // nowhere left to report it
        rest.remove_prefix(static_cast<std::size_t>(n));
    }
}

}  // namespace ipoibd::runtime
