// ipoibctl: asks a running ipoibd for its state over the control socket.
//
//   ipoibctl [-i INSTANCE | -s SOCKET] [-j] [-t TIMEOUT] COMMAND
//
// -j prints the daemon's JSON as it came, once it parses (an answer that
// is not JSON is reported, never printed); otherwise the answer is shown as
// tables and "key: value" lines built generically from the JSON (table.h),
// so a field the daemon adds shows up without a change here.
//
// Exit status: 0 answered; 1 the daemon answered with an error, or the
// answer was not valid JSON; 2 usage; 3 ipoibd is not running (LSB's
// "program is not running", as systemctl status uses it); 4 other failures
// (permission, timeout).
#include <boost/program_options.hpp>

#include <chrono>
#include <cstdio>
#include <iostream>
#include <optional>
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

constexpr int kExitOk = 0;
constexpr int kExitAnswerError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotRunning = 3;
constexpr int kExitFailed = 4;

struct Options {
    std::string socket;
    bool json = false;
    std::chrono::milliseconds timeout{5000};
    std::string command;  // with the interface name, when one is given
};

std::string command_list() {
    std::string out;
    for (auto c : control::kCommands) out += (out.empty() ? "" : ", ") + std::string(c);
    return out;
}

// Fails with a message for the user; nullopt with an empty message means
// --help was printed.
expected<std::optional<Options>, std::string> parse_options(int argc, char** argv) {
    po::options_description visible("Options");
    visible.add_options()
        ("help,h", "show this help")
        ("instance,i", po::value<std::string>()->default_value("ib0"),
         "daemon instance (its interface); the socket is /run/ipoibd/INSTANCE.sock")
        ("socket,s", po::value<std::string>(), "control socket path (instead of -i)")
        ("interface,I", po::value<std::string>(),
         "the interface to ask about (ib0, ib0.8001); default: every interface, the first for status and stats")
        ("json,j", "print the daemon's JSON answer as it is")
        ("timeout,t", po::value<std::string>()->default_value("5s"), "how long to wait for the answer");
    po::options_description hidden;
    hidden.add_options()("command", po::value<std::vector<std::string>>());
    po::options_description all;
    all.add(visible).add(hidden);
    po::positional_options_description positional;
    positional.add("command", -1);

    po::variables_map vm;
    if (auto error = cli::parse_arguments(cli::arguments(argc, argv), [&](const std::vector<std::string>& args) {
            po::store(po::command_line_parser(args).options(all).positional(positional).run(), vm);
            po::notify(vm);
        }))
        return unexpected(*error);
    if (vm.count("help")) {
        std::cout << "Usage: ipoibctl [-i INSTANCE | -s SOCKET] [-I INTERFACE] [-j] [-t TIMEOUT] COMMAND\n"
                  << "Commands: " << command_list() << "\n\n"
                  << visible << "\nExit status: 0 ok, 1 the daemon answered an error, 2 usage, "
                  << "3 ipoibd is not running, 4 other failures.\n";
        return std::optional<Options>();
    }

    Options o;
    o.json = vm.count("json") > 0;
    if (vm.count("socket") && !vm["instance"].defaulted())
        return unexpected(std::string("give either --instance or --socket, not both"));
    if (vm.count("socket")) {
        o.socket = vm["socket"].as<std::string>();
    } else {
        const auto& instance = vm["instance"].as<std::string>();
        if (!control::valid_instance_name(instance))
            return unexpected("invalid instance name '" + instance + "' (letters, digits, '_', '.', ':', '@', '-')");
        o.socket = control::socket_path(instance);
    }
    auto timeout = parse_duration(vm["timeout"].as<std::string>());
    if (!timeout) return unexpected("--timeout: " + timeout.error());
    o.timeout = *timeout;

    std::string words;
    if (vm.count("command"))
        for (const auto& w : vm["command"].as<std::vector<std::string>>()) words += (words.empty() ? "" : " ") + w;
    if (words.empty()) return unexpected("no command given (" + command_list() + ")");
    const auto command = control::find_command(words);
    if (!command) return unexpected("unknown command '" + words + "' (" + command_list() + ")");
    control::Request request{*command, {}};
    if (vm.count("interface")) request.interface = vm["interface"].as<std::string>();
    if (!control::parse_request(request.text()))
        return unexpected("'" + request.text() + "': " +
                          (request.interface.empty() ? std::string("not a request")
                                                     : "'" + std::string(*command) +
                                                           "' takes no interface, or '" + request.interface +
                                                           "' is not an interface name"));
    o.command = request.text();
    return std::optional<Options>(std::move(o));
}

int exit_code(const CtlError& e) {
    return e.kind == CtlError::Kind::not_running ? kExitNotRunning : kExitFailed;
}

}  // namespace

int main(int argc, char** argv) {
    auto options = parse_options(argc, argv);
    if (!options) {
        std::cerr << "ipoibctl: " << escape_text(options.error()) << "\nTry 'ipoibctl --help'.\n";
        return kExitUsage;
    }
    if (!*options) return kExitOk;  // --help
    const Options& o = **options;

    auto answer = ctl_request(o.socket, o.command, o.timeout);
    if (!answer) {
        std::cerr << "ipoibctl: " << answer.error().message << "\n";
        return exit_code(answer.error());
    }
    auto document = parse_json(*answer);
    if (!document) {  // not printed, not even with -j: it could drive the terminal
        std::cerr << "ipoibctl: the daemon's answer is not JSON: " << document.error().message() << "\n";
        return kExitAnswerError;
    }
    if (o.json) std::cout << *answer << (answer->ends_with('\n') ? "" : "\n");
    if (const JsonValue* error = document->find("error")) {
        const std::string text = error->is_string() ? error->text() : to_json(*error);
        if (!o.json) std::cerr << "ipoibctl: " << printable(text) << "\n";
        return kExitAnswerError;
    }
    if (!o.json) std::cout << format_json_text(*document);
    return kExitOk;
}
