// One IPoIB interface (ib0, and one day ib0.8001): a partition's engine, its
// link on the node's port (a UD QP today; RC connections beside it in
// connected mode), its host port (TUN today; TAP beside it) and their
// counters. The data path lives here; the node (daemon/node.h) wires
// interfaces to the port, the MAD path and the event loop, and carries no
// packets.
//
// Flow of one loop turn, as the node drives it:
//  1. host readable: read_host() takes a batch of the host's IP datagrams
//     (host_port.h) into the engine, which sends IPoIB frames on the link;
//     after a quiet spell only one, with no read that finds nothing after
//     it; a long run is handed to the wire before the send queue fills
//     (after_host_read); then the sends leave and their completions are
//     reaped;
//  2. port readable: the node calls poll_link() before and after every
//     Port::process(), so the receive queue never runs dry; each datagram
//     goes to the engine, which writes IP packets to the host;
//  3. SA MADs from the node's MAD path: on_sa_mad();
//  4. port events (LID change, client reregister, ...): on_port_event();
//  5. at the end of the turn, flush_host() writes what the host port holds
//     and the node flushes the port's sends;
//  6. timers: tick() at next_deadline().
//
// The interface's configuration (addresses, routes, link-local address,
// admin up) is applied to the host through the host port, so the whole
// interface runs against a fake host in tests.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/counters.h"
#include "common/expected.h"
#include "common/ip_address.h"
#include "host/host_port.h"
#include "host/read_pacing.h"
#include "interface/data_worker.h"
#include "cm/cm_access.h"
#include "ipoib/connected_link.h"
#include "ipoib/engine.h"
#include "ipoib/ethernet_host.h"
#include "ipoib/port_link.h"
#include "sa_client/mad_agent.h"
#include "sa_client/sa_mad.h"
#include "transport/port.h"

namespace ipoibd::iface {

using Clock = std::chrono::steady_clock;

struct InterfaceConfig {
    ipoib::EngineConfig engine;
    sa::SaClient::Config sa;
    ipoib::PortLink::Config link;
    ipoib::ConnectedLink::Config connected;  // engine.connected turns it on
    unsigned requested_mtu = 0;      // [interface] mtu; 0: the group's
    std::vector<IpPrefix> addresses;
    std::vector<host::HostRoute> routes;
    std::size_t host_max_batch = 64;  // reads from the host per wake-up
    ipoib::EthernetHost::Config ethernet;  // TAP mode: a host port with a MAC
};

// What an interface asks of its node.
class InterfaceEvents {
public:
    virtual ~InterfaceEvents() = default;
    // One SA MAD from `from` (the interface's SA client) to send through
    // the node's MAD agent; false when the path refused it.
    virtual bool send_sa(sa::MadClient& from, const sa::SaMad& mad) = 0;
    // The engine's link came up or went down (the node tells systemd).
    virtual void link_changed(const std::string& ifname, const ipoib::LinkStatus& status) = 0;
    // An engine event to log (journald), with its structured fields.
    virtual void engine_event(const std::string& ifname, const ipoib::EngineEvent& event) = 0;
    // A warning about the host side ("could not set the MTU of ib0: ...").
    virtual void host_warning(const std::string& ifname, const std::string& message) = 0;
    // Packets moved: busy polling may keep the loop awake.
    virtual void traffic() = 0;
    // Serve the port now, in the middle of a long host batch (connected
    // mode: the peers' ACKs and credits): reap every interface's link,
    // process the port, take the MADs, reap again.
    virtual void serve_port() = 0;
};

// Counters that are the interface's own (not the engine's, link's or host's).
struct InterfaceCounters {
    std::uint64_t sa_send_errors = 0;    // the node's MAD path refused a MAD
    std::uint64_t host_config_errors = 0;  // MTU, carrier, address or route changes the host refused
};
// As "sa_send_errors", "host_config_errors".
void visit(const InterfaceCounters& c, CounterSink& out);

class Interface final : public ipoib::EngineIo,
                        public ipoib::EngineLink,
                        public sa::MadClient,
                        private host::HostReceiver,
                        private ipoib::EthernetHostIo {
public:
    // `cm`: the node's connection manager, where there is one (connected
    // mode needs it; without, the interface is datagram only).
    Interface(InterfaceConfig config, transport::Port& port, std::unique_ptr<host::HostPort> host,
              InterfaceEvents& events, cm::CmAccess* cm = nullptr, std::uint64_t seed = 1);
    ~Interface() override;
    Interface(const Interface&) = delete;
    Interface& operator=(const Interface&) = delete;

    const std::string& name() const { return host_->name(); }

    // Start-up: the configured addresses and routes, the RFC 4391 link-local
    // address formed from `port_guid`, admin up. The engine learns the
    // addresses too. Fails naming what the host refused.
    expected<void, std::string> configure_host(std::uint64_t port_guid);

    // The port is ACTIVE with an SM: join the broadcast group.
    void start(const transport::PortAttributes& attributes, Clock::time_point now);
    bool started() const { return started_; }
    void on_port_event(transport::PortEvent event, const transport::PortAttributes& attributes,
                       Clock::time_point now);
    // sa::MadClient: an SA MAD for this interface's SA client (the node's
    // MAD agent dispatches by TID and method).
    void on_mad(bytes mad) override { engine_->on_sa_mad(mad, Clock::now()); }
    void on_mad_from(bytes mad, const sa::MadAddress& from) override {
        engine_->on_sa_mad(mad, Clock::now(), from.lid);
    }

    // Step 1: the host port is readable.
    void read_host(Clock::time_point now);
    // Step 2: up to `max` link completions; returns how many (IPoIB
    // datagrams received, sends completed).
    std::size_t poll_link(Clock::time_point now, std::size_t max = 1024);
    // Step 5; with data threads, the forwarding snapshot is published too
    // when this turn changed it.
    void flush_host() {
        host_->flush();
        if (!workers_.empty()) publish_forwarding(Clock::now());
    }

    // Data threads (data_worker.h): `threads` - 1 workers, each on another
    // queue of the host port with a send queue of the port. Fails naming
    // what the host or the port refused (then none runs).
    expected<void, std::string> start_data_threads(std::size_t threads);
    // The data threads' busy polling ([daemon] busy-poll; the event loop's
    // is the node's): now, and for threads started later.
    void set_busy_poll(Clock::duration window);
    std::size_t data_threads() const { return workers_.size() + 1; }
    // Readable when the workers handed datagrams back; -1 without workers.
    int miss_fd() const { return plane_ ? plane_->misses().fd() : -1; }
    // The workers' misses (the engine's path, as if read here) and touches.
    void serve_misses(Clock::time_point now);
    // A new forwarding snapshot for the workers when forwarding changed.
    void publish_forwarding(Clock::time_point now);
    // Stops the data threads (they read nothing more); idempotent.
    void stop_data_threads();
    // The node was told its host device is gone (Node::host_gone): the
    // host's refusals from now on are expected, not warnings.
    bool host_gone() const { return host_gone_; }
    void set_host_gone() { host_gone_ = true; }

    // The host's addresses and routes, as rtnetlink reports them changing
    // (the admin's `ip addr add`): the engine answers ARP/ND for them.
    void host_address_added(const IpPrefix& address, Clock::time_point now);
    void host_address_removed(const IpPrefix& address, Clock::time_point now);
    void host_routes_changed() {
        host_->routes_changed();
        for (auto& w : workers_) w->routes_changed();
    }
    // Notifications were lost (the netlink monitor's ENOBUFS): the host's
    // addresses are read again, and the engine takes the new ones and
    // forgets those that are gone.
    void resync_host(Clock::time_point now);

    // Reload: the addresses and routes the file now names (the difference
    // is applied to the host), the neighbour timers and send-only join
    // state. Returns what failed, "" when nothing did; addresses() and
    // routes() then say what the host holds (a refused change is tried
    // again by the next reconfigure()).
    std::string reconfigure(const std::vector<IpPrefix>& addresses, const std::vector<host::HostRoute>& routes,
                            const ipoib::NeighbourCache::Config& neighbour, std::uint8_t send_only_join_state);
    const std::vector<IpPrefix>& addresses() const { return config_.addresses; }
    const std::vector<host::HostRoute>& routes() const { return config_.routes; }
    // Connected mode on or off (reload); "" or why it cannot be on.
    std::string set_connected(bool on, Clock::time_point now);

    void tick(Clock::time_point now);
    std::optional<Clock::time_point> next_deadline() const;
    // Leaves every group and closes the connections (SIGTERM).
    void stop(Clock::time_point now);
    bool sa_idle() const { return engine_->sa_idle(); }
    void flush_neighbours(Clock::time_point now) { engine_->flush_neighbours(now); }
    void flush_paths(Clock::time_point now) { engine_->flush_paths(now); }
    // Asks the SA whether the SM is alive (ipoib::Engine::probe_sa).
    void probe_sa(Clock::time_point now) { engine_->probe_sa(now); }

    const ipoib::Engine& engine() const { return *engine_; }
    const host::HostPort& host() const { return *host_; }
    const ipoib::PortLink& link() const { return link_; }
    // The connected half; nullptr without a connection manager.
    const ipoib::ConnectedLink* connected() const { return connected_.get(); }
    // TAP mode's translation; nullptr for a TUN.
    const ipoib::EthernetHost* ethernet() const { return ethernet_.get(); }
    const InterfaceCounters& counters() const { return counters_; }
    // Every counter of the interface, by section: engine, neighbour, path,
    // multicast, sa_client (the MAD path's are the node's), qp, tun.
    template <class Section>
    void visit_sections(Section&& section) const;

    // EngineIo
    void write_tun(bytes ip_packet, const ipoib::PacketSource& from) override;
    void neighbour_learned(const IpAddress& ip, const ipoib::HwAddress& hw, std::uint16_t slid) override;
    void send_sa(const sa::SaMad& mad) override {
        if (!events_.send_sa(*this, mad)) ++counters_.sa_send_errors;
    }
    void link_changed(const ipoib::LinkStatus& status) override;
    void event(const ipoib::EngineEvent& e) override { events_.engine_event(name(), e); }

    // EngineLink: the UD QP (PortLink) and the RC connections (ConnectedLink).
    void send_datagram(const transport::AddressHandle& ah, std::uint32_t remote_qpn, bytes frame) override {
        link_.send(ah, remote_qpn, frame);
    }
    expected<std::uint32_t, std::string> open_qp(std::uint32_t qkey, std::uint16_t pkey) override;
    void attach(const ib::Gid& mgid, std::uint16_t mlid) override { link_.attach(mgid, mlid); }
    void detach(const ib::Gid& mgid, std::uint16_t mlid) override { link_.detach(mgid, mlid); }
    bool connected_connects() const override { return connected_ && connected_->is_open(); }
    bool connected_accepts() const override { return connected_ && connected_->is_listening(); }
    ipoib::ConnectedSend send_connected(const ipoib::HwAddress& to, const ipoib::PathInfo& path, bytes frame,
                                        Clock::time_point now, bool fits_datagram) override {
        return connected_ ? connected_->send(to, path, frame, now, fits_datagram) : ipoib::ConnectedSend{};
    }

private:
    void open_connected(std::uint32_t qpn, std::uint16_t pkey, Clock::time_point now);
    // HostReceiver
    void on_host_packet(bytes ip_packet, const std::optional<IpAddress>& next_hop) override;
    void after_host_read(std::size_t datagrams, std::size_t read_index) override;
    void on_host_frame(bytes ethernet_frame) override;
    // EthernetHostIo
    void write_frame(const EthernetHeader& header, bytes payload) override { host_->write_frame(header, payload); }
    void host_result(const expected<void, std::string>& r);

    InterfaceConfig config_;
    transport::Port& port_;
    std::unique_ptr<host::HostPort> host_;
    InterfaceEvents& events_;
    ipoib::PortLink link_;
    std::unique_ptr<ipoib::ConnectedLink> connected_;
    bool connected_on_ = false;  // [interface] connected-mode
    std::unique_ptr<ipoib::Engine> engine_;
    std::unique_ptr<ipoib::EthernetHost> ethernet_;  // TAP mode
    bool started_ = false;
    bool host_gone_ = false;
    Clock::time_point now_{};  // of the host batch being read
    host::ReadPacing host_reads_{config_.host_max_batch};
    std::size_t host_bytes_ = 0;  // read from the host since the port was last served (connected mode)
    InterfaceCounters counters_;
    std::shared_ptr<DataPlane> plane_;  // with data threads
    std::optional<std::uint64_t> published_;  // the fingerprint of the snapshot last published
    std::vector<std::unique_ptr<DataWorker>> workers_;
    bool workers_on_ = true;  // their queues attached (not in connected mode)
    Clock::duration busy_poll_{};  // the workers' busy-polling window
};

template <class Section>
void Interface::visit_sections(Section&& section) const {
    section("engine", [&](CounterSink& out) { visit(engine_->counters(), out); });
    section("neighbour", [&](CounterSink& out) {
        out.counter("entries", engine_->neighbours().size());
        out.counter("reachable_time_ms", static_cast<std::uint64_t>(engine_->neighbours().reachable_time().count()));
        visit(engine_->neighbours().counters(), out);
    });
    section("path", [&](CounterSink& out) {
        out.counter("entries", engine_->paths().size());
        visit(engine_->paths().counters(), out);
    });
    section("multicast", [&](CounterSink& out) {
        out.counter("groups", engine_->multicast().groups().size());
        visit(engine_->multicast().counters(), out);
    });
    section("sa_client", [&](CounterSink& out) { visit(engine_->sa_client().counters(), out); });
    section("qp", [&](CounterSink& out) { visit(link_.counters(), out); });
    if (connected_) section("connected", [&](CounterSink& out) { connected_->visit_counters(out); });
    if (ethernet_) {
        section("ethernet", [&](CounterSink& out) {
            out.counter("pending", ethernet_->pending());
            visit(ethernet_->counters(), out);
        });
        section("mac_table", [&](CounterSink& out) {
            out.counter("entries", ethernet_->table().size());
            visit(ethernet_->table().counters(), out);
        });
    }
    section(ethernet_ ? "tap" : "tun", [&](CounterSink& out) { host_->visit_counters(out); });
    if (!workers_.empty()) {
        section("data_threads", [&](CounterSink& out) {
            out.counter("threads", workers_.size() + 1);
            out.counter("miss_queue_passed", plane_->misses().passed());
            out.counter("miss_queue_dropped", plane_->misses().dropped());
            SummingSink sum;
            for (const auto& w : workers_) w->visit_counters(sum);
            sum.visit(out);
        });
    }
    section("interface", [&](CounterSink& out) { visit(counters_, out); });
}

}  // namespace ipoibd::iface
