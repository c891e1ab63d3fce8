// ipoibd's running state: the transport port, the SA MAD path, the TUN and
// netlink, the IPoIB engine, the control socket, all on one EventLoop.
//
// Start-up (ipoibd.cpp's main() calls these in order; each fails with
// "could not X: reason"):
//  1. open_fabric(): the embedded fabric service when configured, the port
//     (verbs, soft, or auto: verbs when an HCA answers, else soft), its UD
//     link (PortLink) and the SA MAD transport, an optional capture tap.
//  2. create_interface(): the TUN (carrier off until the broadcast join),
//     addresses (IPv6 with NODAD: the engine does DAD on the fabric), the
//     link-local address of RFC 4391 8, routes, admin up; the netlink
//     monitor and the next-hop cache.
//  3. open_control(): /run/ipoibd/<instance>.sock.
//  4. run(): the loop. When the port is ACTIVE the engine joins the
//     broadcast group; its link_changed(up) sets the MTU, turns the carrier
//     on and sends READY=1. SIGTERM/SIGINT: leave every group (waiting at
//     most 1 s for the SA's answers), STOPPING=1, exit 0; the TUN goes with
//     its fd. SIGHUP: reload what can change live. SIGUSR1: counters to the
//     log.
//
// Per wake-up: the port fd (port events, UD receives, SA MADs), the TUN fd
// (a batch of IP datagrams, their next hop from the kernel's routing table),
// the netlink monitor (addresses the admin adds or removes, route changes),
// and a 50 ms housekeeping timer (engine timers, umad polling, capture
// flush). The watchdog is pinged from the loop's iteration hook.
#pragma once

#include <array>
#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/expected.h"
#include "config/daemon_config.h"
#include "daemon/control.h"
#include "daemon/event_loop.h"
#include "daemon/log.h"
#include "daemon/notify.h"
#include "daemon/rate_limit.h"
#include "ipoib/engine.h"
#include "ipoib/port_link.h"
#include "netlink/monitor.h"
#include "netlink/netlink_socket.h"
#include "netlink/next_hop_cache.h"
#include "netlink/tun.h"
#include "netlink/tun_offload.h"
#include "sa_client/mad_transport.h"
#include "transport/capture/erf_pcap.h"
#include "transport/port.h"
#include "transport/soft/soft_port.h"

namespace ipoibd::fabric {
class FabricService;
}

namespace ipoibd::daemon {

struct TunCounters {
    std::uint64_t rx_packets = 0;      // read from the TUN
    std::uint64_t rx_errors = 0;       // read() failed
    std::uint64_t tx_packets = 0;      // written to the TUN
    std::uint64_t tx_errors = 0;       // write() failed (the kernel's queue full, ...)
    std::uint64_t next_hop_failures = 0;  // RTM_GETROUTE failed: sent as on-link
    std::uint64_t sa_send_errors = 0;
    std::uint64_t capture_errors = 0;
    std::uint64_t rx_segmented = 0;       // datagrams cut from TSO super-packets
    std::array<std::uint64_t, netlink::kOffloadErrorCount> offload_errors{};
};

class Daemon final : public ipoib::EngineIo {
public:
    Daemon(config::DaemonConfig config, std::string config_file, std::string instance, Logger& log,
           Notifier& notify, EventLoop& loop);
    ~Daemon() override;
    Daemon(const Daemon&) = delete;
    Daemon& operator=(const Daemon&) = delete;

    expected<void, std::string> open_fabric();
    expected<void, std::string> create_interface();
    expected<void, std::string> open_control();
    void drop_capabilities();
    // Runs until SIGTERM/SIGINT; the exit status.
    int run();

    // EngineIo
    void send_datagram(const transport::AddressHandle& ah, std::uint32_t remote_qpn, bytes frame) override;
    void write_tun(bytes ip_packet) override;
    void send_sa(const sa::SaMad& mad) override;
    expected<std::uint32_t, std::string> open_qp(std::uint32_t qkey, std::uint16_t pkey) override;
    void attach(const ib::Gid& mgid, std::uint16_t mlid) override { link_->attach(mgid, mlid); }
    void detach(const ib::Gid& mgid, std::uint16_t mlid) override { link_->detach(mgid, mlid); }
    void link_changed(const ipoib::LinkStatus& status) override;
    void event(const ipoib::EngineEvent& e) override;

private:
    // daemon.cpp
    void on_port_ready();
    void handle_port_events(Clock::time_point now);
    void on_tun_readable();
    void on_tun_datagram(bytes packet, Clock::time_point now);
    void on_monitor_readable();
    void housekeeping();
    void start_engine_if_ready(Clock::time_point now);
    void stop(const char* why);
    void reload();
    void log_counters();
    expected<void, std::string> apply_routes(const std::vector<config::Route>& routes, bool add);
    expected<void, std::string> apply_addresses(const std::vector<config::IpPrefix>& addresses, bool add);
    void set_carrier(bool on);
    // Sends what this loop turn queued (soft port: one sendmmsg batch).
    void flush_sends();
    // Writes what the TUN coalescer holds (every handler ends with it).
    void flush_tun();
    void write_tun_raw(bytes data);
    expected<void, std::string> open_capture(const std::string& path);

    // answers.cpp: the control socket's JSON
    std::string answer(std::string_view command);
    std::string answer_status() const;
    std::string answer_neigh() const;
    std::string answer_paths() const;
    std::string answer_mcast() const;
    std::string answer_stats() const;

    config::DaemonConfig config_;
    std::string config_file_;
    std::string instance_;
    Logger& log_;
    Notifier& notify_;
    EventLoop& loop_;
    Clock::time_point started_at_ = Clock::now();

    std::unique_ptr<fabric::FabricService> fabric_service_;
    std::unique_ptr<transport::Port> port_;
    transport::SoftPort* soft_port_ = nullptr;  // port_ when it is the soft backend
    std::string port_name_;  // "soft 0x...", "mlx5_0 port 1"
    std::unique_ptr<sa::MadTransport> mad_;
    bool mad_pollable_ = true;
    std::unique_ptr<ipoib::PortLink> link_;
    std::unique_ptr<ipoib::Engine> engine_;
    bool engine_started_ = false;
    bool ready_sent_ = false;
    bool stopping_ = false;
    Clock::time_point stop_deadline_{};

    std::optional<netlink::TunDevice> tun_;
    std::optional<netlink::NetlinkSocket> nl_;
    std::unique_ptr<netlink::RtnlMonitor> monitor_;
    std::unique_ptr<netlink::NextHopCache> next_hops_;
    std::vector<std::uint8_t> tun_buffer_;
    std::vector<std::uint8_t> segment_buffer_;
    std::unique_ptr<netlink::TunCoalescer> coalescer_;  // offload TUNs: GRO-like writes
    std::unique_ptr<ControlServer> control_;
    std::optional<capture::ErfPcapWriter> capture_;
    std::unique_ptr<RateLimitedLog> drops_log_;
    TunCounters tun_counters_;
};

}  // namespace ipoibd::daemon
