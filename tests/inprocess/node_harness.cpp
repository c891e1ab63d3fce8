#include "tests/inprocess/node_harness.h"

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "config/daemon_config.h"
#include "ipoib/mac_table.h"
#include "sa_client/sa_mad.h"
#include "transport/wire/mad.h"

namespace ipoibd::inprocess {

namespace {

constexpr std::size_t kSaBuffers = 32;
constexpr std::size_t kSaBufferSize = transport::kGrhSlotSize + sa::kSaMadSize;

}  // namespace

std::string to_string(FabricKind k) { return k == FabricKind::memory ? "memory" : "soft"; }

// ---------------------------------------------------------------------------
// MemorySa

MemorySa::MemorySa(transport::MemoryFabric& fabric)
    : port_(fabric.add_port()), buffers_(kSaBuffers, std::vector<std::uint8_t>(kSaBufferSize)) {
    auto gsi = port_->create_gsi_qp(64, 64);
    if (!gsi) throw std::runtime_error("QP1 of the memory SA: " + gsi.error().message());
    gsi_ = std::move(*gsi);
    for (std::uint64_t i = 0; i < buffers_.size(); ++i) post(i);
}

void MemorySa::post(std::uint64_t index) {
    const transport::ReceiveBuffer b{.wr_id = index, .buffer = buffers_[index]};
    (void)gsi_->post_receive({&b, 1});
}

void MemorySa::serve() {
    transport::Completion completions[16];
    for (std::size_t n = gsi_->poll(completions); n > 0; n = gsi_->poll(completions)) {
        for (std::size_t c = 0; c < n; ++c) {
            const transport::Completion& done = completions[c];
            if (done.kind != transport::CompletionKind::receive) continue;
            if (done.status == transport::CompletionStatus::success &&
                done.byte_len >= transport::kGrhSlotSize + sa::kSaMadSize) {
                const auto mad = sa::SaMad::read_from(buffers_[done.wr_id].data() + transport::kGrhSlotSize);
                if (auto answer = sa_.handle(mad, Clock::now())) {
                    std::vector<std::uint8_t> wire(sa::kSaMadSize);
                    answer->write_to(wire.data());
                    const transport::SendRequest req{.wr_id = next_wr_id_++,
                                                     .ah = {.dlid = done.slid},
                                                     .remote_qpn = ib::kQp1,
                                                     .remote_qkey = ib::kGsiQKey,
                                                     .payload = wire};
                    (void)gsi_->post_send({&req, 1});
                }
            }
            post(done.wr_id);
        }
    }
}

// ---------------------------------------------------------------------------
// Fabric

Fabric::Fabric(FabricKind kind, std::function<void(fabric::FabricServiceOptions&)> tune) : kind_(kind) {
    char dir[] = "/tmp/ipoibd-inprocess-XXXXXX";
    if (::mkdtemp(dir) == nullptr) throw std::runtime_error("mkdtemp failed");
    config_dir_ = dir;
    auto loop = runtime::EventLoop::create();
    if (!loop) throw std::runtime_error(loop.error().message());
    loop_ = std::move(*loop);
    if (kind_ == FabricKind::memory) {
        memory_ = std::make_unique<transport::MemoryFabric>();
        memory_sa_ = std::make_unique<MemorySa>(*memory_);  // the first port: LID 1
        return;
    }
    fabric::FabricServiceOptions o;
    o.listen = *parse_socket_address("127.0.0.1:0");
    if (tune) tune(o);
    auto service = fabric::FabricService::open(std::move(o));
    if (!service) throw std::runtime_error(service.error());
    service_ = std::move(*service);
    (void)loop_->add_fd(service_->fd(), [this] {
        service_->on_readable(Clock::now());
        service_->after_wakeup(Clock::now());
    });
    tick_service();
}

void Fabric::tick_service() {
    service_->tick(Clock::now());
    service_->after_wakeup(Clock::now());
    tick_ = loop_->add_timer_after(fabric::FabricService::kTickInterval, [this] { tick_service(); });
}

Fabric::~Fabric() {
    nodes_.clear();  // before the loop and the fabric they are registered with
    if (tick_) loop_->cancel_timer(*tick_);
    if (service_) loop_->remove_fd(service_->fd());
    std::error_code ignored;
    std::filesystem::remove_all(config_dir_, ignored);
}

std::unique_ptr<TestNode> Fabric::make_node(const std::string& name, const std::vector<std::string>& addresses,
                                            std::uint64_t guid) {
    auto t = std::make_unique<TestNode>();
    t->name = name;
    t->guid = guid;
    t->log.set_min_level(runtime::LogLevel::warning);
    config::DaemonConfig c = config::default_config(name);
    for (const std::string& a : addresses) c.interface.addresses.push_back(*parse_ip_prefix(a));
    c.daemon.watchdog = false;  // one loop, several nodes: nobody's watchdog
    c.fabric.port_guid = guid;
    c.fabric.transport = config::Transport::soft;
    if (service_) c.fabric.address = service_->local_address();
    if (tune_config) tune_config(c);
    if (!overrides.empty()) {
        // As main() loads them: the command line on top of the file.
        auto with = config::parse_config(config::describe(c), "harness", name, overrides);
        if (!with) throw std::runtime_error(with.error().message);
        c = std::move(*with);
    }
    t->config_file = config_dir_ + "/" + name + ".conf";
    t->node = std::make_unique<daemon::Node>(c, t->config_file, name, t->log, t->notify, *loop_, overrides);
    // The children a reload adds get fake hosts too.
    t->node->set_host_opener([node = t.get()](const daemon::Node::InterfaceSpec& spec) {
        std::optional<MacAddress> mac;
        if (spec.mode == config::InterfaceMode::tap) mac = ipoib::synthetic_mac(node->node->port().attributes().gid());
        auto host = std::make_unique<host::FakeHostPort>(spec.name, mac);
        node->child_hosts.push_back(host.get());
        return expected<std::unique_ptr<host::HostPort>, std::string>(std::move(host));
    });
    if (kind_ == FabricKind::memory) {
        auto [it, fresh] = lids_.try_emplace(guid, next_lid_);
        if (fresh) ++next_lid_;
        transport::PortOptions po;
        po.kind = transport::PortOptions::Kind::memory;
        po.memory = memory_.get();
        po.guid = guid;
        po.lid = it->second;
        auto port = transport::open_port(po);
        if (!port) throw std::runtime_error(port.error().message());
        memory_sa_->sa().add_port(port->port->attributes().gid(), port->port->attributes().lid);
        auto r = t->node->attach_port(std::move(*port));
        if (!r) throw std::runtime_error(r.error());
    } else if (auto r = t->node->open_fabric(); !r) {
        throw std::runtime_error(r.error());
    }
    std::optional<MacAddress> mac;  // TAP mode: a fake TAP with our port's synthetic MAC
    if (c.interface.mode == config::InterfaceMode::tap) {
        ib::Gid gid{0xfe, 0x80};
        for (std::size_t i = 0; i < 8; ++i) gid[8 + i] = static_cast<std::uint8_t>(guid >> (56 - 8 * i));
        mac = ipoib::synthetic_mac(gid);
    }
    auto host = std::make_unique<host::FakeHostPort>("ib0", mac);
    t->host = host.get();
    host->set_queues(host_queues);
    if (auto r = t->node->add_interface(std::move(host)); !r) throw std::runtime_error(r.error());
    // P_Key children ([child NAME]): a fake host each.
    for (const config::ChildSection& child : c.children) {
        auto child_host = std::make_unique<host::FakeHostPort>(child.name);
        t->child_hosts.push_back(child_host.get());
        if (auto r = t->node->add_interface(std::move(child_host), daemon::Node::child_spec(child)); !r)
            throw std::runtime_error(r.error());
    }
    t->node->start();
    return t;
}

std::optional<std::vector<std::uint8_t>> TestNode::take_written(
    const std::function<bool(const std::vector<std::uint8_t>&)>& match) const {
    std::optional<std::vector<std::uint8_t>> found;
    for (auto& p : host->take_written()) {
        if (!found && match(p)) {
            found = p;
        } else {
            host->write(p);
        }
    }
    return found;
}

void TestNode::reload(const std::string& text) {
    std::ofstream(config_file, std::ios::trunc) << text;
    node->reload();
}

std::uint64_t TestNode::counter(const std::string& section, const std::string& key) const {
    const std::string stats = node->answer("stats");
    const auto s = stats.find("\"" + section + "\":{");
    if (s == std::string::npos) return 0;
    const auto e = stats.find('}', s);
    const auto k = stats.find("\"" + key + "\":", s);
    if (k == std::string::npos || k > e) return 0;
    return std::stoull(stats.substr(k + key.size() + 3));
}

TestNode& Fabric::add_node(const std::string& name, const std::vector<std::string>& addresses, std::uint64_t guid) {
    addresses_.push_back(addresses);
    nodes_.push_back(make_node(name, addresses, guid));
    return *nodes_.back();
}

TestNode& Fabric::restart_node(std::size_t i) {
    const std::string name = nodes_[i]->name;
    const std::uint64_t guid = nodes_[i]->guid;
    nodes_[i].reset();
    run_for(50ms);  // the old port's last packets drain away
    nodes_[i] = make_node(name, addresses_[i], guid);
    return *nodes_[i];
}

void Fabric::turn() {
    (void)loop_->run_once(std::chrono::milliseconds(1));
    if (kind_ != FabricKind::memory) return;
    for (auto& n : nodes_)
        if (n) n->node->port_ready();
    memory_->run();
    memory_sa_->serve();
    memory_->run();
}

bool Fabric::run_until(const std::function<bool()>& done, Clock::duration timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!done()) {
        if (Clock::now() >= deadline) return false;
        turn();
    }
    return true;
}

void Fabric::run_for(Clock::duration d) {
    const auto end = Clock::now() + d;
    while (Clock::now() < end) turn();
}

}  // namespace ipoibd::inprocess
