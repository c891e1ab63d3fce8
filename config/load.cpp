// The edge where Boost.Program_options meets ipoibd: option descriptions
// built from the key table (keys.h), Boost's INI and argv parsers, and the
// conversion of what they return into a DaemonConfig with errors that name
// file:line, key and value.
//
// Flow of one file:
//   1. scan_ini() notes the line of every section header and key;
//   2. Boost parses the text (parse_config_file, unknown keys allowed so that
//      this file can name them with their line);
//   3. each option Boost returns is paired with its line;
//   4. the lines are walked in order: unknown sections and keys, repeats and
//      bad values stop the load at the first mistake;
//   5. command-line overrides, then the rules between keys (keys.h).
#include "config/load.h"

#include <fcntl.h>
#include <unistd.h>

#include <boost/program_options.hpp>
#include <algorithm>
#include <cerrno>
#include <map>
#include <set>
#include <sstream>
#include <system_error>

#include "common/option_table.h"
#include "common/unique_fd.h"
#include "config/ini_scan.h"
#include "config/keys.h"

namespace ipoibd::config {

namespace po = boost::program_options;

namespace {

constexpr std::size_t kMaxFileSize = 1 << 20;

// Long options only as typed: no abbreviations (--interface.mt is not mtu).
constexpr int kCommandLineStyle = po::command_line_style::unix_style ^ po::command_line_style::allow_guessing;

po::options_description key_options() {
    po::options_description options("Configuration keys (ipoibd.conf(5)); on the command line they override the file");
    for (const KeySpec& key : config_keys()) {
        std::string name = key.full_name();
        if (key.short_option != '\0') name += std::string(",") + key.short_option;
        options.add_options()(name.c_str(), po::value<std::string>()->value_name(std::string(key.value_name)),
                              std::string(key.help).c_str());
    }
    return options;
}

po::options_description generic_options() {
    po::options_description options("Options");
    options.add_options()
        ("help,h", "print this help and exit")
        ("version", "print the version and exit")
        ("instance,i", po::value<std::string>()->value_name("NAME"),
         "the instance (also the lone argument); default ib0")
        ("config,c", po::value<std::string>()->value_name("FILE"),
         "the configuration file; default /etc/ipoibd/INSTANCE.conf")
        ("check-config", "check the configuration, print it with every default, and exit")
        ("foreground,f", "run in the foreground and log to stderr")
        ("log-target", po::value<std::string>()->value_name("auto|journal|stderr"),
         "where log lines go: auto (the journal when started by systemd), journal, stderr");
    return options;
}

// Optimal string alignment distance: typos, including swapped letters.
std::size_t edit_distance(std::string_view a, std::string_view b) {
    std::vector<std::vector<std::size_t>> d(a.size() + 1, std::vector<std::size_t>(b.size() + 1));
    for (std::size_t i = 0; i <= a.size(); ++i) d[i][0] = i;
    for (std::size_t j = 0; j <= b.size(); ++j) d[0][j] = j;
    for (std::size_t i = 1; i <= a.size(); ++i)
        for (std::size_t j = 1; j <= b.size(); ++j) {
            const std::size_t cost = a[i - 1] == b[j - 1] ? 0 : 1;
            d[i][j] = std::min({d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost});
            if (i > 1 && j > 1 && a[i - 1] == b[j - 2] && a[i - 2] == b[j - 1])
                d[i][j] = std::min(d[i][j], d[i - 2][j - 2] + 1);
        }
    return d[a.size()][b.size()];
}

// The candidate `word` is most likely a typo of, or "".
std::string closest(std::string_view word, const std::vector<std::string>& candidates) {
    const std::size_t limit = word.size() <= 4 ? 1 : 2;
    std::string best;
    std::size_t best_distance = limit + 1;
    for (const auto& c : candidates) {
        const std::size_t distance = edit_distance(word, c);
        if (distance < best_distance) {
            best = c;
            best_distance = distance;
        }
    }
    return best;
}

std::string join(const std::vector<std::string>& words, std::string_view separator) {
    std::string out;
    for (const auto& w : words) {
        if (!out.empty()) out += separator;
        out += w;
    }
    return out;
}

std::vector<std::string> keys_of(std::string_view section) {
    std::vector<std::string> out;
    for (const KeySpec& k : config_keys())
        if (k.section == section) out.emplace_back(k.name);
    return out;
}

std::vector<std::string> section_list() {
    std::vector<std::string> out;
    for (auto s : config_sections()) out.emplace_back(s);
    return out;
}

// "; did you mean mtu?", "; reachable-time belongs in [neighbour]", or the
// keys the section has.
std::string unknown_key_hint(std::string_view section, std::string_view key) {
    if (!key.empty() && key.front() == ';') return "; comments start with '#', not ';'";
    for (const KeySpec& k : config_keys())
        if (k.name == key && k.section != section) return "; " + std::string(key) + " belongs in [" + std::string(k.section) + "]";
    const auto names = keys_of(section);
    if (auto best = closest(key, names); !best.empty()) return "; did you mean " + best + "?";
    return "; [" + std::string(section) + "] has " + join(names, ", ");
}

std::string unknown_section_hint(std::string_view section) {
    if (auto best = closest(section, section_list()); !best.empty()) return "; did you mean [" + best + "]?";
    return "; the sections are [" + join(section_list(), "], [") + "]";
}

std::string repeatable_names() {
    std::vector<std::string> names;
    for (const KeySpec& k : config_keys())
        if (k.repeatable) names.emplace_back(k.name);
    return join(names, " and ");
}

// "[section] key = value", as the operator wrote it.
std::string key_text(std::string_view section, std::string_view key, std::string_view value) {
    std::string text = section.empty() ? "" : "[" + std::string(section) + "] ";
    if (!key.empty()) text += std::string(key) + " ";
    return text + "= " + (value.empty() ? std::string("\"\"") : std::string(value));
}

expected<std::vector<po::option>, std::string> boost_parse_config(std::string_view text) {
    std::vector<po::option> options;
    // Boost's messages are safe from a '%' in the file only through
    // cli::parse_arguments (common/option_table.h): the text is its one word.
    auto error = cli::parse_arguments({std::string(text)}, [&](const std::vector<std::string>& words) {
        std::istringstream in{words.front()};
        options = po::parse_config_file(in, key_options(), /*allow_unregistered=*/true).options;
    });
    if (error) return unexpected(*error);
    return options;
}

// Reads a whole file; the error is an errno value.
expected<std::string, int> read_text_file(const std::string& path) {
    UniqueFd fd(::open(path.c_str(), O_RDONLY | O_CLOEXEC));
    if (!fd) return unexpected(errno);
    std::string text;
    char buffer[16384];
    for (;;) {
        const ssize_t n = ::read(fd.get(), buffer, sizeof buffer);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) return unexpected(errno);
        if (n == 0) return text;
        text.append(buffer, static_cast<std::size_t>(n));
        if (text.size() > kMaxFileSize) return unexpected(EFBIG);
    }
}

// Applies the file, then the command line, to a configuration, remembering
// where each key was last set for the errors of check().
class Loader {
public:
    Loader(DaemonConfig initial, std::string_view file) : config_(std::move(initial)), file_(file) {}

    expected<void, ConfigError> read_file(std::string_view text);
    expected<void, ConfigError> apply_overrides(std::span<const ConfigOverride> overrides);
    expected<void, ConfigError> check() const;
    // Children without a mode of their own take the parent's, as the file
    // and the command line finally set it.
    DaemonConfig take() {
        for (ChildSection& c : config_.children)
            if (!child_mode_set_.count(c.name)) {
                c.mode = config_.interface.mode;
                c.mode_from_parent = true;
            }
        return std::move(config_);
    }

private:
    expected<void, ConfigError> apply_file_key(const std::string& section, const std::string& key,
                                               const std::string& value, unsigned line);
    // [child NAME]: a new child (a name used twice is refused).
    expected<void, ConfigError> start_child(const std::string& name, unsigned line);
    expected<void, ConfigError> apply_child_key(const std::string& child, const std::string& key,
                                                const std::string& value, const std::string& where, unsigned line);
    std::string at(unsigned line) const {
        const std::string file = escape_text(file_);
        return line == 0 ? file + ": " : file + ":" + std::to_string(line) + ": ";
    }
    static auto fail(std::string message) { return unexpected(ConfigError{std::move(message)}); }
    // One entry of a repeatable key: "interface.route = 198.19.0.0/24", its
    // value as the key table prints it.
    static std::string entry_name(const std::string& key, const std::string& value) { return key + " = " + value; }

    DaemonConfig config_;
    std::string file_;
    std::map<std::string, unsigned> first_line_;   // full key name -> line it was first set on
    std::map<std::string, std::string> set_where_;  // full key name -> "FILE:7: [s] k = v" or "command line: --s.k=v"
    // Repeatable keys: where each entry was set, by entry_name().
    std::map<std::string, std::string> entry_where_;
    std::map<std::string, unsigned> child_line_;    // child name -> its [child NAME] line
    std::set<std::string> child_mode_set_;          // children whose section sets mode
};

expected<void, ConfigError> Loader::start_child(const std::string& name, unsigned line) {
    const std::string where = at(line) + "[" + std::string(kChildSection) + " " + name + "]";
    if (auto r = check_child_name(name); !r) return fail(where + ": the name " + r.error());
    if (auto first = child_line_.find(name); first != child_line_.end())
        return fail(where + ": a child of this name is already defined on line " + std::to_string(first->second));
    child_line_.emplace(name, line);
    ChildSection child;
    child.name = name;
    config_.children.push_back(std::move(child));
    return {};
}

expected<void, ConfigError> Loader::apply_child_key(const std::string& child, const std::string& key,
                                                    const std::string& value, const std::string& where,
                                                    unsigned line) {
    auto it = std::find_if(config_.children.begin(), config_.children.end(),
                           [&](const ChildSection& c) { return c.name == child; });
    if (it == config_.children.end()) return fail(where + ": key outside its [child] section");
    const ChildKeySpec* spec = find_child_key(key);
    if (spec == nullptr) {
        std::vector<std::string> names;
        for (const ChildKeySpec& k : child_keys()) names.emplace_back(k.name);
        return fail(where + ": unknown key; a [child] section has " + join(names, ", "));
    }
    const std::string name = std::string(kChildSection) + " " + child + "." + key;
    if (!spec->repeatable) {
        if (auto first = first_line_.find(name); first != first_line_.end())
            return fail(where + ": " + key + " is already set" +
                        (first->second != 0 ? " on line " + std::to_string(first->second) : std::string()));
    }
    if (auto r = spec->set(*it, value); !r) return fail(where + ": " + r.error());
    if (key == "mode") child_mode_set_.insert(child);
    first_line_.emplace(name, line);
    set_where_[name] = where;
    if (spec->repeatable) entry_where_[entry_name(name, spec->get(*it).back())] = where;
    return {};
}

std::string syntax_error(const IniLine& line) {
    return line.text + ": syntax error: " +
           (line.text == "[]" ? "empty section name" : "expected [section], key = value or a # comment");
}

expected<void, ConfigError> Loader::read_file(std::string_view text) {
    // A UTF-8 byte order mark (some editors write one) is no part of line 1.
    if (text.starts_with("\xef\xbb\xbf")) text.remove_prefix(3);
    // Text only (a CR before the line break is the line break's): a NUL
    // cut the error message that quoted the line, other controls and bytes
    // that are not UTF-8 went to the terminal and the journal as they were.
    unsigned number = 1;
    for (std::size_t start = 0; start < text.size(); ++number) {
        const std::size_t end = std::min(text.find('\n', start), text.size());
        std::string_view line = text.substr(start, end - start);
        if (line.ends_with('\r')) line.remove_suffix(1);
        if (auto problem = text_problem(line)) return fail(at(number) + *problem + " (ipoibd.conf is UTF-8 text)");
        start = end + 1;
    }
    const std::vector<IniLine> lines = scan_ini(text);
    // A line the scan cannot read is named before Boost parses the text:
    // Boost would refuse it with a message of its own, without the line.
    for (const IniLine& l : lines)
        if (l.kind == IniLine::Kind::invalid && l.text != "[]") return fail(at(l.number) + syntax_error(l));
    auto parsed = boost_parse_config(text);
    if (!parsed) return fail(at(0) + parsed.error());

    // Pair each option with its line: the next key line of that name and value.
    std::vector<const po::option*> option_at(lines.size(), nullptr);
    std::vector<const po::option*> unplaced;
    std::size_t cursor = 0;
    for (const po::option& o : *parsed) {
        const std::string value = o.value.empty() ? std::string() : o.value.front();
        std::size_t i = cursor;
        while (i < lines.size() &&
               !(lines[i].kind == IniLine::Kind::key && lines[i].full_name() == o.string_key && lines[i].value == value))
            ++i;
        if (i == lines.size()) {
            unplaced.push_back(&o);
        } else {
            option_at[i] = &o;
            cursor = i + 1;
        }
    }

    for (std::size_t i = 0; i < lines.size(); ++i) {
        const IniLine& l = lines[i];
        if (l.kind == IniLine::Kind::section) {
            if (auto child = child_name_of(l.section)) {
                if (auto r = start_child(std::string(*child), l.number); !r) return r;
                continue;
            }
            if (std::find(config_sections().begin(), config_sections().end(), l.section) == config_sections().end())
                return fail(at(l.number) + "[" + l.section + "]: unknown section" + unknown_section_hint(l.section));
        } else if (l.kind == IniLine::Kind::key && option_at[i] != nullptr) {
            if (auto r = apply_file_key(l.section, l.key, l.value, l.number); !r) return r;
        } else if (l.kind == IniLine::Kind::invalid) {
            // Boost 1.74 lets "[]" pass (the keys after it get "." as their
            // section); later Boost refuses it, and so does ipoibd.
            return fail(at(l.number) + syntax_error(l));
        }
    }
    // Options the scan could not place (only if Boost's rules drift from
    // ini_scan.h's): still applied, named without a line.
    for (const po::option* o : unplaced) {
        const auto dot = o->string_key.rfind('.');
        const std::string section = dot == std::string::npos ? "" : o->string_key.substr(0, dot);
        const std::string key = dot == std::string::npos ? o->string_key : o->string_key.substr(dot + 1);
        if (auto r = apply_file_key(section, key, o->value.empty() ? "" : o->value.front(), 0); !r) return r;
    }
    return {};
}

expected<void, ConfigError> Loader::apply_file_key(const std::string& section, const std::string& key,
                                                   const std::string& value, unsigned line) {
    const std::string where = at(line) + key_text(section, key, value);
    if (section.empty()) {
        const KeySpec* owner = nullptr;
        for (const KeySpec& k : config_keys())
            if (k.name == key && owner == nullptr) owner = &k;
        return fail(where + ": key outside any section" +
                    (owner ? "; " + key + " belongs in [" + std::string(owner->section) + "]"
                           : std::string("; keys follow a [section] line")));
    }
    if (auto child = child_name_of(section)) return apply_child_key(std::string(*child), key, value, where, line);
    if (std::find(config_sections().begin(), config_sections().end(), section) == config_sections().end())
        return fail(where + ": unknown section" + unknown_section_hint(section));
    const KeySpec* spec = find_key(section, key);
    if (spec == nullptr) return fail(where + ": unknown key" + unknown_key_hint(section, key));
    const std::string name = spec->full_name();
    if (!spec->repeatable) {
        if (auto first = first_line_.find(name); first != first_line_.end())
            return fail(where + ": " + key + " is already set" +
                        (first->second != 0 ? " on line " + std::to_string(first->second) : std::string()) +
                        " (only " + repeatable_names() + " may repeat)");
    }
    if (auto r = spec->set(config_, value); !r) return fail(where + ": " + r.error());
    first_line_.emplace(name, line);
    set_where_[name] = where;
    if (spec->repeatable) entry_where_[entry_name(name, spec->get(config_).back())] = where;
    return {};
}

expected<void, ConfigError> Loader::apply_overrides(std::span<const ConfigOverride> overrides) {
    std::set<std::string> seen;
    for (const ConfigOverride& o : overrides) {
        const std::string token = o.token.empty() ? "--" + o.key + "=" + o.value : o.token;
        const std::string where = "command line: " + escape_text(token);
        if (auto problem = text_problem(o.value)) return fail(where + ": the value has a " + *problem);
        const auto dot = o.key.find('.');
        const KeySpec* spec =
            dot == std::string::npos ? nullptr : find_key(o.key.substr(0, dot), o.key.substr(dot + 1));
        if (spec == nullptr) return fail(where + ": unknown option");
        // The value must survive describe() -> file -> parse unchanged.
        if (o.value.find_first_of("#\r\n") != std::string::npos ||
            (!o.value.empty() && (o.value.front() == ' ' || o.value.front() == '\t' || o.value.back() == ' ' ||
                                  o.value.back() == '\t')))
            return fail(where + ": ipoibd.conf could not hold this value ('#', a line break, or white space at an end)");
        const bool first = seen.insert(o.key).second;
        if (!first && !spec->repeatable) return fail(where + ": --" + o.key + " is given twice");
        if (first && spec->repeatable) spec->clear(config_);
        if (auto r = spec->set(config_, o.value); !r) return fail(where + ": " + r.error());
        set_where_[spec->full_name()] = where;
        if (spec->repeatable) entry_where_[entry_name(spec->full_name(), spec->get(config_).back())] = where;
    }
    return {};
}

expected<void, ConfigError> Loader::check() const {
    if (const auto child = check_children(config_)) {
        const std::string name = std::string(kChildSection) + " " + child->child;
        const auto entry = child->value.empty() ? entry_where_.end()
                                                : entry_where_.find(entry_name(name + "." + child->key, child->value));
        const auto set = set_where_.find(name + "." + child->key);
        const auto line = child_line_.find(child->child);
        const std::string where =
            entry != entry_where_.end() ? entry->second
            : set != set_where_.end()   ? set->second
                                        : at(line != child_line_.end() ? line->second : 0) + "[" + name + "] " + child->key;
        return fail(where + ": " + child->reason);
    }
    if (const auto route = check_routes(config_)) {
        const auto set = entry_where_.find(entry_name(route->section + ".route", route->route));
        const std::string where =
            set != entry_where_.end() ? set->second : at(0) + key_text(route->section, "route", route->route);
        return fail(where + ": " + route->reason);
    }
    const auto problem = check_consistency(config_);
    if (!problem) return {};
    const KeySpec& key = *problem->key;
    const auto set = set_where_.find(key.full_name());
    const std::string where = set != set_where_.end()
                                  ? set->second
                                  : at(0) + key_text(key.section, key.name, join(key.get(config_), ", ")) + " (default)";
    return fail(where + ": " + problem->reason);
}

}  // namespace

expected<CommandLine, ConfigError> parse_command_line(int argc, const char* const* argv) {
    po::options_description all;
    all.add(generic_options()).add(key_options());
    po::positional_options_description positional;
    positional.add("instance", 1);
    std::vector<po::option> options;
    bool two_instances = false;
    auto error = cli::parse_arguments(cli::arguments(argc, argv), [&](const std::vector<std::string>& args) {
        try {
            options = po::command_line_parser(args)
                          .options(all)
                          .positional(positional)
                          .style(kCommandLineStyle)
                          .allow_unregistered()
                          .run()
                          .options;
        } catch (const po::too_many_positional_options_error&) {
            two_instances = true;
            throw;
        }
    });
    if (two_instances) return unexpected(ConfigError{"command line: one instance name at most (options start with -)"});
    if (error) return unexpected(ConfigError{"command line: " + *error});

    std::vector<std::string> known{"help", "version", "instance", "config", "check-config", "foreground", "log-target"};
    for (const KeySpec& k : config_keys()) known.push_back(k.full_name());

    CommandLine line;
    bool instance_given = false;
    bool config_given = false;
    for (const po::option& o : options) {
        const std::string where = "command line: " + escape_text(join(o.original_tokens, " ")) + ": ";
        const std::string& key = o.string_key;
        const std::string value = o.value.empty() ? std::string() : o.value.front();
        if (o.unregistered) {
            const std::string best = key.starts_with("-") ? std::string() : closest(key, known);
            return unexpected(ConfigError{where + "unknown option" + (best.empty() ? "" : "; did you mean --" + best + "?")});
        }
        if (key == "help") {
            line.help = true;
        } else if (key == "version") {
            line.version = true;
        } else if (key == "check-config") {
            line.check_config = true;
        } else if (key == "foreground") {
            line.foreground = true;
        } else if (key == "log-target") {
            if (value != "auto" && value != "journal" && value != "stderr")
                return unexpected(ConfigError{where + "expected auto, journal or stderr"});
            line.log_target = value;
        } else if (key == "instance") {
            if (instance_given) return unexpected(ConfigError{where + "the instance is given twice"});
            auto name = parse_interface_name(value);
            if (!name) return unexpected(ConfigError{where + "an instance name " + name.error()});
            line.instance = *name;
            instance_given = true;
        } else if (key == "config") {
            if (config_given) return unexpected(ConfigError{where + "--config is given twice"});
            if (value.empty()) return unexpected(ConfigError{where + "needs a file name"});
            line.config_file = value;
            config_given = true;
        } else {
            line.overrides.push_back({key, value, join(o.original_tokens, " ")});
        }
    }
    return line;
}

std::string command_line_help() {
    po::options_description all;
    all.add(generic_options()).add(key_options());
    std::ostringstream out;
    out << "Usage: ipoibd [OPTIONS] [INSTANCE]\n"
           "IP over InfiniBand on one TUN interface, configured by /etc/ipoibd/INSTANCE.conf\n"
           "(ipoibd.conf(5)); --SECTION.KEY=VALUE sets any key of the file.\n\n"
        << all;
    return out.str();
}

std::string default_config_path(std::string_view instance, std::string_view directory) {
    return std::string(directory) + "/" + std::string(instance) + ".conf";
}

expected<DaemonConfig, ConfigError> parse_config(std::string_view text, std::string_view file_name,
                                                 std::string_view instance,
                                                 std::span<const ConfigOverride> overrides) {
    if (auto name = parse_interface_name(instance); !name)
        return unexpected(ConfigError{"instance '" + escape_text(instance) + "': an instance name " + name.error()});
    Loader loader(default_config(instance), file_name);
    if (auto r = loader.read_file(text); !r) return unexpected(r.error());
    if (auto r = loader.apply_overrides(overrides); !r) return unexpected(r.error());
    if (auto r = loader.check(); !r) return unexpected(r.error());
    return loader.take();
}

expected<DaemonConfig, ConfigError> load_config(const CommandLine& command_line, std::string_view directory) {
    const bool named = !command_line.config_file.empty();
    const std::string path = named ? command_line.config_file : default_config_path(command_line.instance, directory);
    auto text = read_text_file(path);
    if (!text) {
        const int error = text.error();
        if (!named && error == ENOENT && !command_line.overrides.empty())
            return parse_config("", path, command_line.instance, command_line.overrides);
        std::string message = escape_text(path) + ": cannot read: " + std::generic_category().message(error);
        if (!named && error == ENOENT)
            message += " (write it, name another with -c FILE, or set keys with --SECTION.KEY=VALUE)";
        return unexpected(ConfigError{message});
    }
    return parse_config(*text, path, command_line.instance, command_line.overrides);
}

}  // namespace ipoibd::config
