// ipoibd's node: one port and everything that is per port, wiring the
// interfaces (interface/interface.h) that carry the packets. It owns the
// event loop's registrations, the port and its MAD path, the embedded
// fabric, rtnetlink (the monitor and the socket the host ports configure
// through), the control socket, signals and reload, and fans port events
// and SA MADs out to its interfaces. It carries no packets itself.
//
// Start-up (ipoibd.cpp's main() calls these in order; each fails with
// "could not X: reason"):
//  1. open_fabric(): the embedded fabric service when configured; the port
//     from the factory (verbs, soft, or auto: verbs when an HCA answers,
//     else soft); its MAD path (the port's QP1, or libibumad); an optional
//     capture tap.
//  2. create_interfaces(): the host port (a TUN, carrier off until the
//     broadcast join) and the Interface on it, configured (addresses with
//     NODAD: the engine does DAD on the fabric; the RFC 4391 link-local
//     address; routes; admin up); the netlink monitor.
//  3. open_control(): /run/ipoibd/<instance>.sock.
//  4. run(): the loop. When the port is ACTIVE each interface joins its
//     broadcast group; its link coming up sets the MTU and the carrier and
//     sends READY=1. SIGTERM/SIGINT: leave every group (waiting at most 1 s
//     for the SA's answers), STOPPING=1, exit 0. SIGHUP: reload what can
//     change live. SIGUSR1: counters to the log.
//
// Per wake-up: the port fd (port events, IPoIB datagrams, SA MADs), each
// host port's fd, the netlink monitor, the control socket, and one timer
// armed for the earliest of the interfaces' engine deadlines, the embedded
// fabric's tick, the periodic passes a backend asks for (verbs, a MAD path
// that cannot be polled) and the node's own housekeeping (rate-limited log
// windows, the capture file), at most a second away. The watchdog is
// pinged from the loop's iteration hook.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/expected.h"
#include "config/daemon_config.h"
#include "config/load.h"
#include "runtime/control.h"
#include "daemon/engine_event_log.h"
#include "runtime/metrics_http.h"
#include "runtime/event_loop.h"
#include "runtime/log.h"
#include "runtime/notify.h"
#include "runtime/rate_limit.h"
#include "interface/interface.h"
#include "netlink/monitor.h"
#include "netlink/netlink_socket.h"
#include "daemon/cm_service.h"
#include "daemon/pma_service.h"
#include "sa_client/mad_agent.h"
#include "transport/capture/erf_pcap.h"
#include "transport/port.h"
#include "transport/port_factory.h"

namespace ipoibd::fabric {
class FabricService;
}
namespace ipoibd::cm {
class RdmaCmAccess;
}

namespace ipoibd::daemon {

// The node's own counters.
struct NodeCounters {
    std::uint64_t capture_errors = 0;  // packets the capture file did not take
};
void visit(const NodeCounters& c, CounterSink& out);

class Node final : private iface::InterfaceEvents {
public:
    // `overrides`: the command line's --SECTION.KEY=VALUE, which `config`
    // holds and every reload applies again on top of the file.
    Node(config::DaemonConfig config, std::string config_file, std::string instance, runtime::Logger& log, runtime::Notifier& notify,
         runtime::EventLoop& loop, std::vector<config::ConfigOverride> overrides = {});
    ~Node() override;
    Node(const Node&) = delete;
    Node& operator=(const Node&) = delete;

    expected<void, std::string> open_fabric();
    // The second half of open_fabric(): a port opened elsewhere (tests: an
    // in-memory fabric's) becomes the node's, with its MAD path and capture.
    expected<void, std::string> attach_port(transport::OpenedPort opened);
    expected<void, std::string> create_interfaces();
    expected<void, std::string> open_control();
    void drop_capabilities();
    // Runs until SIGTERM/SIGINT (exit status 0) or until one of its devices
    // is deleted under it (1: the service manager starts it again).
    int run();
    // What run() does before it loops: the interfaces start when the port
    // is ACTIVE, the timer is armed. Tests that drive a shared loop call it
    // instead of run().
    void start();
    // The port's fd is readable: reap, process, reap (tests call it for
    // ports without an fd, between the node's periodic passes).
    void port_ready();
    // Reap, process, reap, MADs, reap; the caller ends the turn.
    void process_port();

    // For tests: the node's parts.
    transport::Port& port() { return *port_; }
    // The connection manager; nullptr where the platform's holds class 0x07.
    CmService* cm() { return cm_.get(); }
    // What connected mode connects through: our CM, else librdmacm's on an
    // HCA (connecting only), else nothing.
    cm::CmAccess* connection_manager() const;
    const std::vector<std::unique_ptr<iface::Interface>>& interfaces() const { return interfaces_; }
    // Adds the parent interface on an existing host port (tests: a fake host).
    expected<void, std::string> add_interface(std::unique_ptr<host::HostPort> host);
    // What one interface is: the parent ([interface], [fabric] pkey) or a
    // P_Key child ([child NAME]).
    struct InterfaceSpec {
        std::string name;
        std::uint16_t pkey = 0xffff;
        config::InterfaceMode mode = config::InterfaceMode::tun;
        unsigned mtu = 0;
        bool connected_mode = false;
        std::vector<IpPrefix> addresses;
        std::vector<config::Route> routes;
    };
    InterfaceSpec parent_spec() const;
    static InterfaceSpec child_spec(const config::ChildSection& child);
    // An interface on `host` as `spec` says (tests: a fake host for a child).
    expected<void, std::string> add_interface(std::unique_ptr<host::HostPort> host, const InterfaceSpec& spec);
    // How an interface's TUN or TAP device is opened: by default through
    // rtnetlink (create_interfaces() opens it); tests give fake hosts, for
    // the children a reload adds too.
    using HostOpener = std::function<expected<std::unique_ptr<host::HostPort>, std::string>(const InterfaceSpec&)>;
    void set_host_opener(HostOpener opener) { host_opener_ = std::move(opener); }
    // A child goes (reload): it leaves its groups, its device goes away.
    void remove_interface(const std::string& name, runtime::Clock::time_point now);
    // The control socket's answer to a request (control_protocol.h: a
    // command and an optional interface name), as ipoibctl gets it.
    std::string answer(std::string_view request);
    void stop(const std::string& why);
    // One of the node's TUN/TAP devices was deleted (ip link del; seen by
    // netlink or by a read): the node stops with exit status 1, as the
    // device cannot come back under it.
    void host_gone(iface::Interface& i, const char* seen_by);
    int exit_status() const { return exit_status_; }
    void reload();
    // The netlink monitor lost notifications (ENOBUFS): every interface
    // reads its host's addresses and routes again (tests call it).
    void resync_hosts(runtime::Clock::time_point now);
    void check_sm_contact(runtime::Clock::time_point now);

public:
    // Every counter in the Prometheus text format (docs/metrics.md).
    std::string metrics() const;
    // [daemon] metrics-listen and metrics-file; errors name the key.
    expected<void, std::string> open_metrics();
    // The port has heard no SM for [fabric] sm-silence (check_sm_contact).
    bool sm_silent() const { return sm_silent_; }
    // When the SM last showed it is alive to this node: an SMP to the
    // port's SMA, or an answer of its SA to an interface; nullopt where the
    // port cannot tell (an HCA's SMA is the kernel's) or before either.
    std::optional<runtime::Clock::time_point> last_sm_contact() const;

private:

private:
    // InterfaceEvents
    bool send_sa(sa::MadClient& from, const sa::SaMad& mad) override;
    void link_changed(const std::string& ifname, const ipoib::LinkStatus& status) override;
    void engine_event(const std::string& ifname, const ipoib::EngineEvent& event) override;
    void host_warning(const std::string& ifname, const std::string& message) override;
    void traffic() override { loop_.keep_polling(); }
    void serve_port() override { process_port(); }

    void handle_port_events(runtime::Clock::time_point now);
    void receive_mads();
    std::size_t poll_links(runtime::Clock::time_point now, std::size_t max);
    void on_monitor_readable();
    void start_interfaces_if_ready(runtime::Clock::time_point now);
    // The TUN or TAP device of an interface.
    expected<std::unique_ptr<host::HostPort>, std::string> open_host(const InterfaceSpec& spec);
    // Reload, step by step, towards `target` (what the node runs with
    // after it: apply_live()); each returns what failed and puts back in
    // `target` the running value of what it could not apply.
    std::string reload_parent(config::DaemonConfig& target);
    std::string reload_children(config::DaemonConfig& target);
    std::string reload_capture(config::DaemonConfig& target);
    // Adds "fabric key" to `applied` when the key file's keys were taken.
    std::string reload_fabric_keys(std::vector<std::string>& applied);
    std::string reload_embedded_partitions(std::vector<std::string>& applied);
    void log_reloaded(const std::vector<std::string>& applied, const std::vector<std::string>& restart,
                      const std::string& failed);
    // An interface built with `settings`: [neighbour], [multicast], [queues]
    // and the rest beside the spec's own keys.
    expected<void, std::string> add_interface(std::unique_ptr<host::HostPort> host, const InterfaceSpec& spec,
                                              const config::DaemonConfig& settings);
    void end_of_turn();
    // Timers: arms the loop's one timer for next_wakeup(); at most once per
    // kRescheduleHoldoff the deadlines are read again, otherwise the timer
    // is pulled in to that point.
    void schedule(runtime::Clock::time_point now);
    // [daemon] busy-poll: the event loop's and every data thread's.
    void set_busy_poll(runtime::Clock::duration window);
    void arm(runtime::Clock::time_point at);
    runtime::Clock::time_point next_wakeup(runtime::Clock::time_point now) const;
    void housekeeping();
    void log_counters();
    iface::Interface* interface_named(std::string_view name);

    struct CaptureError {
        bool unsupported = false;  // the port's packets are not ours to see (verbs)
        std::string message;
    };
    expected<void, CaptureError> open_capture(const std::string& path);

    // node_answers.cpp: the control socket's JSON
    std::string answer_interfaces() const;
    std::string answer_status(const iface::Interface& i) const;
    std::string answer_neigh(const std::vector<const iface::Interface*>& chosen) const;
    std::string answer_paths(const std::vector<const iface::Interface*>& chosen) const;
    std::string answer_mcast(const std::vector<const iface::Interface*>& chosen) const;
    std::string answer_stats(const iface::Interface& i) const;
    // The node's own counter sections (mad, cm or rdmacm, port, netlink, busy_poll,
    // control, metrics_http), each through `section(name, visit)`.
    template <class Section>
    void visit_node_sections(Section&& section) const;

    config::DaemonConfig config_;
    std::string config_file_;
    std::string instance_;
    std::vector<config::ConfigOverride> overrides_;  // the command line's, for reload
    runtime::Logger& log_;
    runtime::Notifier& notify_;
    runtime::EventLoop& loop_;
    runtime::Clock::time_point started_at_ = runtime::Clock::now();

    std::unique_ptr<fabric::FabricService> fabric_service_;
    std::unique_ptr<transport::Port> port_;
    std::string port_name_;    // "soft 0x...", "mlx5_0 port 1"
    std::string port_device_;  // "soft", "mlx5_0": IB_DEVICE
    std::unique_ptr<sa::MadAgent> mad_;  // QP1, shared by the interfaces' SA clients and the CM
    std::unique_ptr<CmService> cm_;      // none where the platform's CM holds class 0x07 (HCAs)
    std::unique_ptr<PmaService> pma_;    // none on an HCA (its adapter answers PerfMgt)
    std::unique_ptr<cm::RdmaCmAccess> rdma_cm_;  // there: librdmacm (connected mode's active side)
    void open_rdma_cm();
    bool mad_pollable_ = true;
    std::optional<netlink::NetlinkSocket> nl_;
    HostOpener host_opener_;  // set: opens hosts instead of nl_
    std::unique_ptr<netlink::RtnlMonitor> monitor_;
    std::vector<std::unique_ptr<iface::Interface>> interfaces_;
    std::size_t data_threads_ = 1;  // [daemon] data-threads, auto resolved
    std::uint32_t interfaces_created_ = 0;  // numbers each interface's SA TIDs
    bool started_ = false;  // start() ran: the loop's iteration hook is ours
    bool ready_sent_ = false;
    bool stopping_ = false;
    int exit_status_ = 0;
    bool sm_silent_ = false;  // check_sm_contact() said the SM stopped sweeping
    std::optional<runtime::Clock::time_point> sa_probed_;  // when check_sm_contact() last asked the SA
    runtime::Clock::time_point stop_deadline_{};

    std::optional<runtime::TimerId> timer_;
    runtime::Clock::time_point armed_for_{};
    runtime::Clock::time_point evaluated_at_{};

    std::unique_ptr<runtime::ControlServer> control_;
    std::unique_ptr<runtime::MetricsHttpServer> metrics_http_;
    std::optional<runtime::TimerId> metrics_file_timer_;
    void write_metrics_file();
    std::optional<capture::ErfPcapWriter> capture_;
    std::unique_ptr<runtime::RateLimitedLog> drops_log_;
    std::unique_ptr<runtime::RateLimitedLog> fabric_drops_log_;  // what the port refused for its source (warning)
    std::unique_ptr<EngineEventLog> event_log_;         // the engines' events, those from the fabric rate-limited
    NodeCounters counters_;
};

}  // namespace ipoibd::daemon
