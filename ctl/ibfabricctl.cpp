// ibfabricctl: asks a running ibfabricd through its control socket and
// prints the answer, as ipoibctl does for ipoibd.
//
//   ibfabricctl [-p PORT | -s SOCKET] [-j] [-t TIMEOUT] status|ports|groups|switches|stats
//
// Exit status: 0 answered; 1 the daemon answered an error; 2 usage; 3 no
// ibfabricd there; 4 other failures.
#include <boost/program_options.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "common/duration.h"
#include "common/option_table.h"
#include "common/utf8.h"
#include "ctl/control_protocol.h"
#include "ctl/ctl_client.h"
#include "ctl/json_parse.h"
#include "ctl/table.h"

namespace po = boost::program_options;
using namespace ipoibd;
using namespace ipoibd::ctl;

namespace {

// ibfabricd's commands (fabric/fabric_control.h; kept here so that the
// client needs no fabric code).
constexpr std::string_view kCommandNames[] = {"status", "ports", "groups", "switches", "stats"};
constexpr control::CommandSet kCommands{kCommandNames, kCommandNames};

// ctl_client speaks of ipoibd; this client's daemon is ibfabricd.
std::string replace_program(std::string message) {
    if (message.starts_with("ipoibd ")) message.replace(0, 6, "ibfabricd");
    return message;
}

// A field of an object as one cell: text as printable() gives it, numbers
// and booleans as written, "-" when absent.
std::string cell(const JsonValue& object, std::string_view key) {
    const JsonValue* v = object.find(key);
    if (!v || v->is_null()) return "-";
    if (v->is_string()) return v->text().empty() ? "-" : printable(v->text());
    if (v->is_bool()) return v->as_bool() ? "yes" : "no";
    if (v->is_number()) return v->text();
    return printable(to_json(*v));
}

// `switches` for a person: the switches, then their inter-switch links,
// each a table (the JSON nests the links in each switch).
std::string switches_text(const JsonValue& answer) {
    Table switches({"name", "guid", "description", "listen", "lid", "ports", "up", "sm", "links"});
    Table links({"switch", "port", "peer", "link", "state"});
    for (const JsonValue& s : answer.items()) {
        const JsonValue* l = s.find("links");
        const std::size_t n = l && l->is_array() ? l->items().size() : 0;
        switches.add_row({cell(s, "name"), cell(s, "guid"), cell(s, "description"), cell(s, "listen"), cell(s, "lid"),
                          cell(s, "ports"), cell(s, "ports_up"), cell(s, "sm"), std::to_string(n)});
        for (std::size_t i = 0; i < n; ++i) {
            const JsonValue& link = l->items()[i];
            links.add_row({cell(s, "name") == "-" ? cell(s, "guid") : cell(s, "name"), cell(link, "port"),
                           cell(link, "peer"), cell(link, "link"), cell(link, "state")});
        }
    }
    std::string out = switches.render();
    if (links.rows() > 0) out += "\ninter-switch links:\n" + links.render("  ");
    return out;
}

std::string command_list() {
    std::string out;
    for (auto c : kCommandNames) out += (out.empty() ? "" : ", ") + std::string(c);
    return out;
}

}  // namespace

int main(int argc, char** argv) {
    po::options_description visible("Options");
    visible.add_options()("help,h", "show this help")(
        "port,p", po::value<unsigned>()->default_value(18516),
        "the UDP port ibfabricd listens on; its socket is /run/ibfabricd/PORT.sock")(
        "socket,s", po::value<std::string>(), "control socket path (instead of -p)")(
        "json,j", "print the daemon's JSON answer as it is")(
        "timeout,t", po::value<std::string>()->default_value("5s"), "how long to wait for the answer");
    po::options_description hidden;
    hidden.add_options()("command", po::value<std::vector<std::string>>());
    po::options_description all;
    all.add(visible).add(hidden);
    po::positional_options_description positional;
    positional.add("command", -1);
    po::variables_map vm;
    const auto usage = [](const std::string& why) {
        std::cerr << "ibfabricctl: " << escape_text(why) << "\nTry 'ibfabricctl --help'.\n";
        return 2;
    };
    if (auto error = cli::parse_arguments(cli::arguments(argc, argv), [&](const std::vector<std::string>& args) {
            po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
            po::notify(vm);
        }))
        return usage(*error);
    if (vm.count("help")) {
        std::cout << "Usage: ibfabricctl [-p PORT | -s SOCKET] [-j] [-t TIMEOUT] COMMAND\nCommands: " << command_list()
                  << "\n\n"
                  << visible
                  << "\nExit status: 0 ok, 1 the daemon answered an error, 2 usage, 3 ibfabricd is not running, 4 "
                     "other failures.\n";
        return 0;
    }
    if (vm.count("socket") && !vm["port"].defaulted()) return usage("give either --port or --socket, not both");
    const unsigned port = vm["port"].as<unsigned>();
    if (port == 0 || port > 65535) return usage("--port " + std::to_string(port) + ": must be 1..65535");
    const std::string socket =
        vm.count("socket") ? vm["socket"].as<std::string>() : "/run/ibfabricd/" + std::to_string(port) + ".sock";
    const auto timeout = parse_duration(vm["timeout"].as<std::string>());
    if (!timeout) return usage("--timeout: " + timeout.error());
    std::string words;
    if (vm.count("command"))
        for (const auto& w : vm["command"].as<std::vector<std::string>>()) words += (words.empty() ? "" : " ") + w;
    if (words.empty()) return usage("no command given (" + command_list() + ")");
    const auto command = control::find_command(words, kCommands);
    if (!command) return usage("unknown command '" + words + "' (" + command_list() + ")");

    auto answer = ctl_request(socket, *command, *timeout);
    if (!answer) {
        std::cerr << "ibfabricctl: " << replace_program(answer.error().message) << "\n";
        return answer.error().kind == CtlError::Kind::not_running ? 3 : 4;
    }
    auto parsed = parse_json(*answer);
    if (!parsed) {
        std::cerr << "ibfabricctl: the daemon's answer is not JSON: " << parsed.error().message() << "\n";
        return 4;
    }
    if (const JsonValue* error = parsed->find("error")) {
        std::cerr << "ibfabricctl: " << printable(error->is_string() ? error->text() : to_json(*error)) << "\n";
        return 1;
    }
    if (vm.count("json")) {
        std::cout << *answer;
        if (answer->empty() || answer->back() != '\n') std::cout << '\n';
        return 0;
    }
    if (*command == "switches" && parsed->is_array())
        std::cout << switches_text(*parsed);
    else
        std::cout << format_json_text(*parsed);
    return 0;
}
