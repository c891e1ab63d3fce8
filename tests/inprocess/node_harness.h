// Whole ipoibd nodes in one process for the in-process layer: each a Node
// (daemon/node.h) with a FakeHostPort, all on one EventLoop, over one of
// two fabrics:
//   memory  transport::MemoryFabric, its first port (LID 1, the SM LID
//           every memory port reports) an SA answering on QP1 with the
//           engine tests' ScriptedSa
//   soft    a FabricService (switch, SM, SA) on 127.0.0.1, driven by the
//           same loop; the nodes open soft ports to it
// The same test bodies run over both (wireguard-go's genTestPair).
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "config/load.h"
#include "runtime/event_loop.h"
#include "runtime/log.h"
#include "daemon/node.h"
#include "runtime/notify.h"
#include "fabric/fabric_service.h"
#include "host/fake_host_port.h"
#include "tests/unit/engine_harness.h"
#include "transport/memory/memory_fabric.h"
#include "transport/port_factory.h"

namespace ipoibd::inprocess {

using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

enum class FabricKind { memory, soft };
std::string to_string(FabricKind k);

// The memory fabric's SA: QP1 of the port at LID 1.
class MemorySa {
public:
    explicit MemorySa(transport::MemoryFabric& fabric);
    // Answers what reached QP1.
    void serve();
    ipoib::test::ScriptedSa& sa() { return sa_; }

private:
    void post(std::uint64_t index);

    std::unique_ptr<transport::MemoryPort> port_;
    std::unique_ptr<transport::UdQp> gsi_;
    std::vector<std::vector<std::uint8_t>> buffers_;
    ipoib::test::ScriptedSa sa_;
    std::uint64_t next_wr_id_ = 1000;
};

struct TestNode {
    std::string name;
    std::uint64_t guid = 0;
    runtime::Logger log;
    runtime::Notifier notify;
    std::unique_ptr<daemon::Node> node;
    host::FakeHostPort* host = nullptr;  // owned by the node's interface
    // [child NAME] interfaces', in the file's order, then those reloads
    // added (a removed child's stays, dangling: do not use it).
    std::vector<host::FakeHostPort*> child_hosts;
    std::string config_file;  // the node's ipoibd.conf: absent until reload() writes it

    // SIGHUP with `text` as the node's file.
    void reload(const std::string& text);

    iface::Interface& interface() const { return *node->interfaces().front(); }
    // What the node's (first) host was given, removed from its list when
    // `match` holds; the rest stays written.
    std::optional<std::vector<std::uint8_t>> take_written(
        const std::function<bool(const std::vector<std::uint8_t>&)>& match) const;
    bool link_up() const { return interface().engine().link().up; }
    // One counter of `ipoibctl stats` (the node's answer), 0 when absent.
    std::uint64_t counter(const std::string& section, const std::string& key) const;
    std::uint32_t qpn() const { return interface().engine().link().qpn; }
};

class Fabric {
public:
    // `tune` adjusts the soft fabric's options (sweep interval, ...).
    explicit Fabric(FabricKind kind, std::function<void(fabric::FabricServiceOptions&)> tune = {});
    // Applied to every node's configuration from now on.
    std::function<void(config::DaemonConfig&)> tune_config;
    // Every new node's command line (--SECTION.KEY=VALUE): on top of its
    // configuration, after tune_config, and again at each reload.
    std::vector<config::ConfigOverride> overrides;
    // The queues each new node's fake host offers (FakeHostPort::set_queues;
    // data threads need more than 1).
    std::size_t host_queues = 1;
    ~Fabric();

    // A node named `name` with the given addresses (IPv4 and IPv6 prefixes)
    // and port GUID; started.
    TestNode& add_node(const std::string& name, const std::vector<std::string>& addresses, std::uint64_t guid);
    // Stops and destroys node `i` and starts a new one with the same name,
    // addresses and GUID (a restarted daemon: a new QPN).
    TestNode& restart_node(std::size_t i);

    // Runs the loop (and, on the memory fabric, the ports and the SA) until
    // `done` holds or `timeout` passes; returns `done()`.
    bool run_until(const std::function<bool()>& done, Clock::duration timeout = 10s);
    // Runs for `d`.
    void run_for(Clock::duration d);

    std::vector<std::unique_ptr<TestNode>>& nodes() { return nodes_; }
    FabricKind kind() const { return kind_; }

private:
    void turn();
    void tick_service();  // every kTickInterval while the soft fabric lives
    std::unique_ptr<TestNode> make_node(const std::string& name, const std::vector<std::string>& addresses,
                                        std::uint64_t guid);

    FabricKind kind_;
    std::string config_dir_;  // the nodes' configuration files
    std::unique_ptr<runtime::EventLoop> loop_;
    // memory
    std::unique_ptr<transport::MemoryFabric> memory_;
    std::unique_ptr<MemorySa> memory_sa_;
    std::uint16_t next_lid_ = 2;
    std::map<std::uint64_t, std::uint16_t> lids_;  // by GUID: a restarted port keeps its LID
    // soft
    std::unique_ptr<fabric::FabricService> service_;
    std::optional<runtime::TimerId> tick_;
    std::vector<std::vector<std::string>> addresses_;
    std::vector<std::unique_ptr<TestNode>> nodes_;
};

}  // namespace ipoibd::inprocess
