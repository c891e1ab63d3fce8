// ipoibd: the IPoIB daemon. main() is the table of contents; the work is in
// daemon/node.h (flow), daemon/node.cpp and interface/interface.h.
//
// Exit status: 0 after SIGTERM/SIGINT (or --check-config, --help,
// --version); 1 when start-up fails; 2 for a bad command line or
// configuration file.
#include <cstdio>
#include <string>

#include "config/load.h"
#include "runtime/heap.h"
#include "daemon/node.h"

using namespace ipoibd;

namespace {

int fail(runtime::Logger& log, const std::string& message) {
    log.error(message);
    return 1;
}

}  // namespace

int main(int argc, char** argv) {
    auto command_line = config::parse_command_line(argc, argv);
    if (!command_line) {
        std::fprintf(stderr, "ipoibd: %s\n", command_line.error().message.c_str());
        return 2;
    }
    if (command_line->help) {
        std::fputs(config::command_line_help().c_str(), stdout);
        return 0;
    }
    if (command_line->version) {
        std::puts("ipoibd " IPOIBD_VERSION);
        return 0;
    }
    auto config = config::load_config(*command_line);
    if (!config) {
        std::fprintf(stderr, "ipoibd: %s\n", config.error().message.c_str());
        return 2;
    }
    if (command_line->check_config) {
        std::fputs(config::describe(*config).c_str(), stdout);
        return 0;
    }
    const std::string config_file = command_line->config_file.empty()
                                        ? config::default_config_path(command_line->instance)
                                        : command_line->config_file;

    if (auto r = runtime::EventLoop::block_daemon_signals(); !r) {
        std::fprintf(stderr, "ipoibd: %s\n", r.error().message().c_str());
        return 1;
    }
    const runtime::LogTarget target = command_line->foreground || command_line->log_target == "stderr"
                                         ? runtime::LogTarget::stderr_lines
                                     : command_line->log_target == "journal" ? runtime::LogTarget::journal
                                                                             : runtime::LogTarget::automatic;
    runtime::Logger log({.target = target, .min_level = static_cast<runtime::LogLevel>(config->daemon.log_level)});
    if (!runtime::tune_heap()) log.warning("could not set malloc's trim and mmap thresholds: freed message buffers may go back to the kernel");
    runtime::Notifier notify;
    auto loop = runtime::EventLoop::create();
    if (!loop) return fail(log, "could not create the event loop: " + loop.error().message());

    daemon::Node node(*config, config_file, command_line->instance, log, notify, **loop, command_line->overrides);
    if (auto r = node.open_fabric(); !r) return fail(log, r.error());
    if (auto r = node.create_interfaces(); !r) return fail(log, r.error());
    if (auto r = node.open_control(); !r) return fail(log, r.error());
    if (auto r = node.open_metrics(); !r) return fail(log, r.error());
    node.drop_capabilities();
    return node.run();
}
