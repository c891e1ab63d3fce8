// ibfabricd's ibsim-protocol server (fabric/sim_server.h) in one process
// with a real FabricService on 127.0.0.1: fake libumad2sim clients (plain
// abstract AF_UNIX datagram sockets, as the shim opens them) connect, read
// their node's NodeInfo/PortInfo/P_Keys, send MADs into the fabric and get
// the answers back; the refusals and bounds are counted.
#include <gtest/gtest.h>

#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/byte_io.h"
#include "common/prometheus.h"
#include "common/socket_address.h"
#include "common/unique_fd.h"
#include "fabric/fabric_control.h"
#include "fabric/fabric_service.h"
#include "fabric/sim_server.h"
#include "fabric/sim_wire.h"
#include "sa_client/sa_mad.h"
#include "transport/wire/mad.h"
#include "transport/wire/smp.h"

namespace ipoibd::simtest {
namespace {

using namespace std::chrono_literals;
using SteadyClock = std::chrono::steady_clock;
namespace sim = fabric::sim;
using fabric::SimDrop;
using fabric::SimServerOptions;
using sim::CtlMessage;
using sim::CtlType;
using sim::SimRequest;

constexpr std::uint16_t kSwitchLid = 1;
constexpr std::uint8_t kPortStateActive = 4;

// Distinct "pids" for the fake clients of this process, and a socket base
// name per test (parallel ctest runs each have their own pid).
std::uint32_t next_client_id() {
    static std::uint32_t next = 900000;
    return next++;
}
std::string unique_base_name() {
    static unsigned next = 0;
    return "ipoibd-simtest-" + std::to_string(::getpid()) + "-" + std::to_string(next++);
}

sockaddr_un unix_address(const std::string& name, socklen_t& length) {
    sockaddr_un a{};
    a.sun_family = AF_UNIX;
    const auto path = sim::abstract_address(name);
    std::memcpy(a.sun_path, path.data(), std::min(path.size(), sizeof a.sun_path));
    length = static_cast<socklen_t>(sim::abstract_address_length(name));
    return a;
}

UniqueFd dgram_socket() { return UniqueFd(::socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0)); }

bool bind_to(int fd, const std::string& name) {
    socklen_t len = 0;
    const sockaddr_un a = unix_address(name, len);
    return ::bind(fd, reinterpret_cast<const sockaddr*>(&a), len) == 0;
}
bool connect_to(int fd, const std::string& name) {
    socklen_t len = 0;
    const sockaddr_un a = unix_address(name, len);
    return ::connect(fd, reinterpret_cast<const sockaddr*>(&a), len) == 0;
}

// Non-blocking receive of one datagram (its whole size, MSG_TRUNC), or
// nullopt when none is waiting.
std::optional<std::vector<std::uint8_t>> receive(int fd, std::size_t room) {
    std::vector<std::uint8_t> buf(room);
    const ssize_t n = ::recv(fd, buf.data(), buf.size(), MSG_DONTWAIT | MSG_TRUNC);
    if (n < 0) return std::nullopt;
    buf.resize(static_cast<std::size_t>(n));  // the size as sent (a longer one: zero-padded)
    return buf;
}

// A libumad2sim process: B:ctl<id> connected to B:ctl, B:in<id> connected
// to B:out<slot> once CONNECT named the slot.
class FakeClient {
public:
    FakeClient(std::string base, std::uint32_t id) : base_(std::move(base)), id_(id) {
        ctl_ = dgram_socket();
        data_ = dgram_socket();
        EXPECT_TRUE(ctl_ && data_);
        EXPECT_TRUE(bind_to(ctl_.get(), sim::client_ctl_name(base_, id_))) << std::strerror(errno);
        EXPECT_TRUE(connect_to(ctl_.get(), sim::server_ctl_name(base_))) << std::strerror(errno);
        EXPECT_TRUE(bind_to(data_.get(), sim::client_in_name(base_, id_))) << std::strerror(errno);
    }

    std::uint32_t id() const { return id_; }
    std::optional<unsigned> slot() const { return slot_; }

    void send_ctl_raw(bytes datagram) const {
        EXPECT_EQ(::send(ctl_.get(), datagram.data(), datagram.size(), MSG_NOSIGNAL),
                  static_cast<ssize_t>(datagram.size()))
            << std::strerror(errno);
    }
    void send_ctl(const CtlMessage& m) const {
        auto b = sim::encode_ctl(m);
        ASSERT_TRUE(b.has_value());
        send_ctl_raw(bytes(b->data(), b->size()));
    }
    // The raw reply (80 bytes expected), if one is waiting.
    std::optional<std::vector<std::uint8_t>> take_ctl() const { return receive(ctl_.get(), sim::kCtlMessageSize + 16); }

    void attach_data(unsigned slot) {
        slot_ = slot;
        EXPECT_TRUE(connect_to(data_.get(), sim::server_out_name(base_, slot))) << std::strerror(errno);
    }
    void send_data_raw(bytes datagram) const {
        EXPECT_EQ(::send(data_.get(), datagram.data(), datagram.size(), MSG_NOSIGNAL),
                  static_cast<ssize_t>(datagram.size()))
            << std::strerror(errno);
    }
    void send_data(const SimRequest& r) const {
        auto b = sim::encode_request(r);
        ASSERT_TRUE(b.has_value());
        send_data_raw(bytes(b->data(), b->size()));
    }
    int data_fd() const { return data_.get(); }
    std::optional<std::vector<std::uint8_t>> take_data() const {
        return receive(data_.get(), sim::kSimRequestSize + 16);
    }

    void close_ctl() { ctl_.reset(); }
    // A new socket under the old B:in<id>, connected nowhere: the server's
    // slot socket, still connected to the old one, is refused from now on,
    // while the name (and this process) lives on.
    void replace_data_socket() {
        data_ = dgram_socket();
        EXPECT_TRUE(bind_to(data_.get(), sim::client_in_name(base_, id_))) << std::strerror(errno);
    }
    // Gone without DISCONNECT (a SIGKILLed process).
    void vanish() {
        ctl_.reset();
        data_.reset();
    }

private:
    std::string base_;
    std::uint32_t id_;
    UniqueFd ctl_;
    UniqueFd data_;
    std::optional<unsigned> slot_;
};

CtlMessage connect_message(const std::string& nodeid, std::uint32_t id, bool issm) {
    CtlMessage m;
    sim::ClientInfo info;
    info.id = id;
    info.issm = issm ? 1 : 0;
    info.nodeid = nodeid;
    EXPECT_TRUE(sim::put_client_info(info, m).has_value());
    m.client_id = 0;
    return m;
}

CtlMessage request_message(CtlType type, std::uint32_t slot) {
    CtlMessage m;
    m.client_id = slot;
    m.type = type;
    m.len = static_cast<std::uint32_t>(sim::ctl_payload_size(type));
    return m;  // data all zero: GET_PORTINFO's data[0] = 0, "my port"
}

std::uint64_t tid_of(const SimRequest& r) { return load_be64(r.mad.data() + 8); }

// A 256-byte MAD in a SimRequest.
SimRequest request_with(std::uint16_t dlid, std::uint32_t qp, const std::array<std::uint8_t, ib::kMadSize>& mad) {
    SimRequest r;
    r.dlid = dlid;
    r.slid = 0;
    r.dqp = qp;
    r.sqp = qp;
    r.length = ib::kMadSize;
    std::copy(mad.begin(), mad.end(), r.mad.begin());
    return r;
}

std::array<std::uint8_t, ib::kMadSize> smp_get(std::uint8_t mgmt_class, std::uint16_t attribute, std::uint64_t tid) {
    ib::Smp s;
    s.mgmt_class = mgmt_class;
    s.method = ib::method::get;
    s.attribute_id = attribute;
    s.transaction_id = tid;
    s.hop_count = 0;
    s.hop_pointer = 0;
    std::array<std::uint8_t, ib::kMadSize> mad{};
    s.write_to(mad.data());
    return mad;
}

std::array<std::uint8_t, ib::kMadSize> sa_request(std::uint8_t method, std::uint16_t attribute, std::uint64_t tid) {
    sa::SaMad m;
    m.header.method = method;
    m.header.attribute_id = attribute;
    m.header.transaction_id = tid;
    std::array<std::uint8_t, ib::kMadSize> mad{};
    m.write_to(mad.data());
    return mad;
}

// A GMP Get of any class (its header only).
std::array<std::uint8_t, ib::kMadSize> gmp_get(std::uint8_t mgmt_class, std::uint16_t attribute, std::uint64_t tid) {
    ib::MadHeader h;
    h.mgmt_class = mgmt_class;
    h.class_version = 1;
    h.method = ib::method::get;
    h.attribute_id = attribute;
    h.transaction_id = tid;
    std::array<std::uint8_t, ib::kMadSize> mad{};
    h.write_to(mad.data());
    return mad;
}

// A directed-route Set PortInfo of HopCount 0 with M_Key 0: the client's
// own SMA refuses it once the SM has given the port a key.
SimRequest set_port_info_without_m_key(std::uint64_t tid) {
    auto set = smp_get(ib::mgmt_class::subn_directed_route, ib::smp_attr::port_info, tid);
    set[3] = ib::method::set;
    return request_with(ib::kLidPermissive, 0, set);
}

class SimServer : public ::testing::Test {
protected:
    void SetUp() override {
        fabric::FabricServiceOptions o;
        o.listen = *parse_socket_address("127.0.0.1:0");
        auto service = fabric::FabricService::open(std::move(o));
        ASSERT_TRUE(service.has_value()) << service.error();
        service_ = std::move(*service);
        base_ = unique_base_name();
    }

    void TearDown() override {
        if (HasFailure())
            for (const std::string& line : log_) std::fprintf(stderr, "  log: %s\n", line.c_str());
    }

    // Opens the sim server on base_, connected to the fabric.
    void start(const std::function<void(SimServerOptions&)>& tune = {}) {
        SimServerOptions o;
        o.base_name = base_;
        o.fabric = service_->local_address();
        if (tune) tune(o);
        auto sim = fabric::SimServer::open(std::move(o), [this](const std::string& l) { log_.push_back(l); });
        ASSERT_TRUE(sim.has_value()) << sim.error();
        sim_ = std::move(*sim);
    }

    fabric::SimServer& sim() { return *sim_; }
    std::uint64_t dropped(SimDrop d) const { return sim_->counters().dropped_for(d); }

    // One turn of the loop: at most 5 ms waiting for the fabric's or the
    // server's fd, their handlers, the 50 ms ticks, the end of the wake-up.
    void turn() {
        std::array<pollfd, 2> fds{};
        fds[0] = {fabric_running_ ? service_->fd() : -1, POLLIN, 0};
        fds[1] = {sim_ ? sim_->fd() : -1, POLLIN, 0};
        (void)::poll(fds.data(), fds.size(), 5);
        const auto now = SteadyClock::now();
        if (fabric_running_ && (fds[0].revents & POLLIN) != 0) service_->on_readable(now);
        if (sim_ && (fds[1].revents & POLLIN) != 0) sim_->process(now);
        if (now >= next_tick_) {
            next_tick_ = now + fabric::FabricService::kTickInterval;
            if (fabric_running_) service_->tick(now);
            if (sim_) sim_->tick(now);
        }
        if (fabric_running_) service_->after_wakeup(now);
    }

    // Drives the loop until `done` holds; false after `timeout`.
    bool run_until(const std::function<bool()>& done, SteadyClock::duration timeout = 5s) {
        const auto deadline = SteadyClock::now() + timeout;
        while (!done()) {
            if (SteadyClock::now() >= deadline) return false;
            turn();
        }
        return true;
    }
    void run_for(SteadyClock::duration d) {
        const auto end = SteadyClock::now() + d;
        while (SteadyClock::now() < end) turn();
    }

    FakeClient& new_client(std::optional<std::uint32_t> id = std::nullopt) {
        clients_.push_back(std::make_unique<FakeClient>(base_, id.value_or(next_client_id())));
        return *clients_.back();
    }

    // The 80-byte reply to a control message the client sends, the loop
    // running meanwhile.
    std::optional<CtlMessage> exchange_raw(const FakeClient& c, bytes datagram) {
        c.send_ctl_raw(datagram);
        return await_ctl(c);
    }
    std::optional<CtlMessage> exchange(const FakeClient& c, const CtlMessage& m) {
        c.send_ctl(m);
        return await_ctl(c);
    }
    std::optional<CtlMessage> await_ctl(const FakeClient& c) {
        std::optional<std::vector<std::uint8_t>> got;
        if (!run_until([&] { return (got = c.take_ctl()).has_value(); })) {
            ADD_FAILURE() << "no control reply";
            return std::nullopt;
        }
        EXPECT_EQ(got->size(), sim::kCtlMessageSize);
        auto parsed = sim::parse_ctl(bytes(got->data(), got->size()));
        if (!parsed) {
            ADD_FAILURE() << "reply does not parse: " << sim::to_string(parsed.error());
            return std::nullopt;
        }
        return *parsed;
    }

    // CONNECT; on success the client's data socket is connected to its slot.
    std::optional<CtlMessage> connect_client(FakeClient& c, const std::string& nodeid, bool issm = false) {
        auto reply = exchange(c, connect_message(nodeid, c.id(), issm));
        if (reply && reply->type == CtlType::connect) c.attach_data(reply->client_id);
        return reply;
    }

    // GET_PORTINFO (answered once the SM has made the port ACTIVE).
    std::optional<ib::PortInfo> port_info(const FakeClient& c) {
        auto reply = exchange(c, request_message(CtlType::get_portinfo, *c.slot()));
        if (!reply || reply->type != CtlType::get_portinfo) return std::nullopt;
        return ib::PortInfo::read_from(reply->data.data());
    }

    // CONNECT and wait for the node's port to be ACTIVE: its LID.
    std::uint16_t attach(FakeClient& c, const std::string& nodeid, bool issm = false) {
        auto reply = connect_client(c, nodeid, issm);
        if (!reply || reply->type != CtlType::connect) {
            ADD_FAILURE() << "CONNECT of " << nodeid << " refused";
            return 0;
        }
        auto pi = port_info(c);
        if (!pi) {
            ADD_FAILURE() << "no PortInfo for " << nodeid;
            return 0;
        }
        EXPECT_EQ(pi->port_state, kPortStateActive) << nodeid;
        return pi->lid;
    }

    // The next data datagram to the client (288 bytes expected), parsed.
    std::optional<SimRequest> await_data(const FakeClient& c, SteadyClock::duration timeout = 5s) {
        std::optional<std::vector<std::uint8_t>> got;
        if (!run_until([&] { return (got = c.take_data()).has_value(); }, timeout)) return std::nullopt;
        EXPECT_EQ(got->size(), sim::kSimRequestSize);
        auto parsed = sim::parse_request(bytes(got->data(), got->size()));
        if (!parsed) {
            ADD_FAILURE() << "data reply does not parse";
            return std::nullopt;
        }
        return *parsed;
    }

    std::vector<std::string> log_;  // the server's lines, printed when a test fails
    std::unique_ptr<fabric::FabricService> service_;
    std::unique_ptr<fabric::SimServer> sim_;
    std::string base_;
    std::vector<std::unique_ptr<FakeClient>> clients_;
    SteadyClock::time_point next_tick_{};
    bool fabric_running_ = true;  // false: the switch never answers (no link, no SM)
};

// ---------------------------------------------------------------------------
// Control channel

TEST_F(SimServer, ConnectAttachesTheClientToAnActiveNodeAndAnswersItsQueries) {
    start();
    FakeClient& c = new_client();
    auto reply = connect_client(c, "hostA");
    ASSERT_TRUE(reply.has_value());
    ASSERT_EQ(reply->type, CtlType::connect);
    EXPECT_EQ(reply->client_id, 0u);
    auto info = sim::read_client_info(*reply);
    ASSERT_TRUE(info.has_value());
    EXPECT_EQ(info->id, 0u);  // the slot
    EXPECT_EQ(info->nodeid, "hostA");
    EXPECT_EQ(sim().client_count(), 1u);
    EXPECT_NE(sim().node_port("hostA"), nullptr);

    auto ni_reply = exchange(c, request_message(CtlType::get_nodeinfo, 0));
    ASSERT_TRUE(ni_reply.has_value());
    ASSERT_EQ(ni_reply->type, CtlType::get_nodeinfo);
    EXPECT_EQ(ni_reply->len, 64u);
    const auto ni = ib::NodeInfo::read_from(ni_reply->data.data());
    const std::uint64_t guid = fabric::SimServer::derived_node_guid("hostA");
    EXPECT_EQ(ni.node_type, ib::node_type::channel_adapter);
    EXPECT_EQ(ni.node_guid, guid);
    EXPECT_EQ(ni.port_guid, guid + 1);
    EXPECT_EQ(ni.local_port_num, 1u);

    auto pi = port_info(c);
    ASSERT_TRUE(pi.has_value());
    EXPECT_NE(pi->lid, 0u);
    EXPECT_EQ(pi->master_sm_lid, kSwitchLid);
    EXPECT_EQ(pi->port_state, kPortStateActive);
    EXPECT_EQ(pi->m_key, 0u);  // never shown

    auto pkeys = exchange(c, request_message(CtlType::get_pkeys, 0));
    ASSERT_TRUE(pkeys.has_value());
    ASSERT_EQ(pkeys->type, CtlType::get_pkeys);
    EXPECT_EQ(pkeys->len, 64u);
    EXPECT_EQ(load_be16(pkeys->data.data()), 0xFFFFu);

    auto vendor_reply = exchange(c, request_message(CtlType::get_vendor, 0));
    ASSERT_TRUE(vendor_reply.has_value());
    ASSERT_EQ(vendor_reply->type, CtlType::get_vendor);
    auto vendor = sim::read_vendor(*vendor_reply);
    ASSERT_TRUE(vendor.has_value());
    EXPECT_EQ(vendor->fw_ver, 1u);
    EXPECT_EQ(vendor->vendor_id, ni.vendor_id);

    EXPECT_EQ(sim().counters().clients_connected, 1u);
    EXPECT_EQ(sim().counters().nodes_opened, 1u);
    const std::string stats = sim().stats();
    EXPECT_NE(stats.find("1 of 10 client slots"), std::string::npos) << stats;
    EXPECT_NE(stats.find("sim node hostA"), std::string::npos) << stats;
    EXPECT_NE(stats.find("ACTIVE"), std::string::npos) << stats;
}

TEST_F(SimServer, OpenRefusesATakenNameAndABadSlotCount) {
    start();
    SimServerOptions o;
    o.base_name = base_;
    o.fabric = service_->local_address();
    auto second = fabric::SimServer::open(o);
    ASSERT_FALSE(second.has_value());
    EXPECT_NE(second.error().find("another ibsim or ibfabricd"), std::string::npos) << second.error();
    o.base_name = base_ + "-other";
    o.max_clients = 0;
    EXPECT_FALSE(fabric::SimServer::open(o).has_value());
    o.max_clients = fabric::kMaxSimClients + 1;
    EXPECT_FALSE(fabric::SimServer::open(o).has_value());
}

TEST_F(SimServer, ANodeGuidGivenForTheNameIsUsed) {
    start([](SimServerOptions& o) { o.node_guids["hostB"] = 0x0002c90300001230ULL; });
    FakeClient& c = new_client();
    auto reply = connect_client(c, "hostB");
    ASSERT_TRUE(reply.has_value());
    ASSERT_EQ(reply->type, CtlType::connect);
    auto ni_reply = exchange(c, request_message(CtlType::get_nodeinfo, reply->client_id));
    ASSERT_TRUE(ni_reply.has_value());
    ASSERT_EQ(ni_reply->type, CtlType::get_nodeinfo);
    const auto ni = ib::NodeInfo::read_from(ni_reply->data.data());
    EXPECT_EQ(ni.node_guid, 0x0002c90300001230ULL);
    EXPECT_EQ(ni.port_guid, 0x0002c90300001231ULL);
}

TEST_F(SimServer, AnEmptyNodeIdAttachesToTheDefaultNode) {
    start();
    FakeClient& c = new_client();
    auto reply = connect_client(c, "");
    ASSERT_TRUE(reply.has_value());
    ASSERT_EQ(reply->type, CtlType::connect);
    EXPECT_EQ(sim::read_client_info(*reply)->nodeid, "sim");
    EXPECT_NE(sim().node_port("sim"), nullptr);
}

TEST_F(SimServer, ClientsOfOneNodeShareItsPortUntilTheLastDisconnects) {
    start();
    FakeClient& a = new_client();
    FakeClient& b = new_client();
    ASSERT_NE(attach(a, "hostA"), 0u);
    const transport::SoftPort* port = sim().node_port("hostA");
    ASSERT_NE(port, nullptr);
    auto reply = connect_client(b, "hostA");
    ASSERT_TRUE(reply.has_value());
    ASSERT_EQ(reply->type, CtlType::connect);
    EXPECT_EQ(reply->client_id, 1u);
    EXPECT_EQ(sim().node_port("hostA"), port);
    EXPECT_EQ(sim().client_count(), 2u);
    EXPECT_EQ(sim().counters().nodes_opened, 1u);

    auto bye_a = exchange(a, request_message(CtlType::disconnect, 0));
    ASSERT_TRUE(bye_a.has_value());
    EXPECT_EQ(bye_a->type, CtlType::disconnect);
    EXPECT_EQ(sim().node_port("hostA"), port);  // b still uses it
    EXPECT_EQ(sim().client_count(), 1u);

    auto bye_b = exchange(b, request_message(CtlType::disconnect, 1));
    ASSERT_TRUE(bye_b.has_value());
    EXPECT_EQ(bye_b->type, CtlType::disconnect);
    EXPECT_EQ(sim().node_port("hostA"), nullptr);
    EXPECT_EQ(sim().client_count(), 0u);
    EXPECT_EQ(sim().counters().nodes_closed, 1u);
    EXPECT_EQ(sim().counters().clients_disconnected, 2u);
    EXPECT_EQ(sim().counters().clients_reaped, 0u);
}

TEST_F(SimServer, MalformedControlMessagesGetAnErrorReplyAndAreCounted) {
    start();
    FakeClient& c = new_client();
    const CtlMessage valid = request_message(CtlType::get_nodeinfo, 0);
    const sim::CtlBytes good = *sim::encode_ctl(valid);

    auto expect_error = [&](std::vector<std::uint8_t> datagram, SimDrop why, const char* what) {
        auto reply = exchange_raw(c, bytes(datagram.data(), datagram.size()));
        ASSERT_TRUE(reply.has_value()) << what;
        EXPECT_EQ(reply->type, CtlType::error) << what;
        EXPECT_EQ(dropped(why), 1u) << what << ": " << fabric::to_string(why);
    };

    expect_error(std::vector<std::uint8_t>(good.begin(), good.begin() + 79), SimDrop::ctl_wrong_size, "79 bytes");
    {
        std::vector<std::uint8_t> d(good.begin(), good.end());
        d[0] = 0x00;  // magic 0xDEADBE00
        expect_error(d, SimDrop::ctl_bad_magic, "bad magic");
    }
    {
        std::vector<std::uint8_t> d(good.begin(), good.end());
        d[sim::ctl_offset::type] = 77;
        expect_error(d, SimDrop::ctl_unknown_type, "type 77");
    }
    {
        std::vector<std::uint8_t> d(good.begin(), good.end());
        d[sim::ctl_offset::len] = 65;
        expect_error(d, SimDrop::ctl_bad_length, "len 65");
    }
    // A well-formed request from a client id that holds no slot.
    {
        auto reply = exchange(c, request_message(CtlType::get_nodeinfo, 3));
        ASSERT_TRUE(reply.has_value());
        EXPECT_EQ(reply->type, CtlType::error);
        EXPECT_EQ(dropped(SimDrop::ctl_unknown_client), 1u);
    }
    EXPECT_EQ(sim().client_count(), 0u);

    // The server keeps serving.
    auto reply = connect_client(c, "hostA");
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->type, CtlType::connect);
    EXPECT_EQ(sim().client_count(), 1u);
    EXPECT_EQ(sim().counters().control_messages, 6u);
}

TEST_F(SimServer, ARequestFromAnotherSocketThanTheSlotsClientIsRefused) {
    start();
    FakeClient& a = new_client();
    FakeClient& b = new_client();
    auto reply = connect_client(a, "hostA");
    ASSERT_TRUE(reply.has_value());
    ASSERT_EQ(reply->type, CtlType::connect);
    // b claims a's slot.
    auto refused = exchange(b, request_message(CtlType::disconnect, 0));
    ASSERT_TRUE(refused.has_value());
    EXPECT_EQ(refused->type, CtlType::error);
    EXPECT_EQ(dropped(SimDrop::ctl_unknown_client), 1u);
    EXPECT_EQ(sim().client_count(), 1u);
}

TEST_F(SimServer, AConnectFromAUserNotAllowedIsRefused) {
    // The abstract names have no permissions: the server checks the
    // sender's credentials. Here only a uid that is not ours may attach.
    const uid_t other = ::geteuid() == 4242 ? 4243 : 4242;
    start([other](SimServerOptions& o) { o.client_uids = {other}; });
    FakeClient& c = new_client();
    auto reply = connect_client(c, "hostA");
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->type, CtlType::error);
    EXPECT_EQ(dropped(SimDrop::ctl_not_permitted), 1u);
    EXPECT_EQ(sim().client_count(), 0u);
    EXPECT_EQ(sim().node_port("hostA"), nullptr);  // no node plugged in for it
    // Counted every time, logged once per user.
    for (int k = 0; k < 3; ++k) EXPECT_EQ(exchange(c, connect_message("hostA", c.id(), false))->type, CtlType::error);
    EXPECT_EQ(dropped(SimDrop::ctl_not_permitted), 4u);
    EXPECT_EQ(std::count_if(log_.begin(), log_.end(),
                            [](const std::string& l) { return l.find("CONNECT refused") != std::string::npos; }),
              1);
}

TEST_F(SimServer, AnotherUsersSenderThatNeverReadsItsRepliesCannotStarveTheClients) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root, to send as another user";
    start();
    // A process of user nobody sends 2,000 control messages (bad magic,
    // each refused with an ERROR) and reads none of the replies, which
    // stay charged to B:ctl's send buffer.
    const std::string flood_name = base_ + ":flood";
    const std::string ctl_name = sim::server_ctl_name(base_);
    const pid_t child = ::fork();
    if (child == 0) {
        if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
        const int s = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);  // blocking: paced by the server
        if (s < 0 || !bind_to(s, flood_name) || !connect_to(s, ctl_name)) ::_exit(3);
        const std::array<std::uint8_t, sim::kCtlMessageSize> junk{};
        for (int k = 0; k < 2000; ++k) (void)::send(s, junk.data(), junk.size(), MSG_NOSIGNAL);
        ::pause();
        ::_exit(0);
    }
    ASSERT_GT(child, 0);
    const bool flooded = run_until([&] { return sim().counters().control_messages >= 2000; }, 20s);
    FakeClient& c = new_client();
    auto reply = flooded ? connect_client(c, "hostA") : std::nullopt;
    ::kill(child, SIGKILL);
    (void)::waitpid(child, nullptr, 0);
    ASSERT_TRUE(flooded);
    ASSERT_TRUE(reply.has_value());  // the client is answered
    EXPECT_EQ(reply->type, CtlType::connect);
    EXPECT_EQ(dropped(SimDrop::ctl_bad_magic), 2000u);
    EXPECT_GT(dropped(SimDrop::ctl_no_reply), 0u);
}

TEST_F(SimServer, AnotherUserHoldingAClientsControlSocketNameCannotSpeakForIt) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root, to send as another user";
    start();
    FakeClient& c = new_client();
    ASSERT_EQ(connect_client(c, "hostA")->type, CtlType::connect);
    // Its control socket goes (its data socket stays: the client is not
    // reaped), and a process of user nobody binds the free name.
    c.close_ctl();
    const std::string ctl_name = sim::client_ctl_name(base_, c.id());
    const std::string server = sim::server_ctl_name(base_);
    const CtlMessage set_issm = [] {
        CtlMessage m;
        sim::put_set_issm(true, m);
        m.client_id = 0;
        return m;
    }();
    const pid_t child = ::fork();
    if (child == 0) {
        if (::setgid(65534) != 0 || ::setuid(65534) != 0) ::_exit(2);
        const int s = ::socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (s < 0 || !bind_to(s, ctl_name) || !connect_to(s, server)) ::_exit(3);
        const timeval wait{5, 0};
        (void)::setsockopt(s, SOL_SOCKET, SO_RCVTIMEO, &wait, sizeof wait);
        const auto m = sim::encode_ctl(set_issm);
        std::array<std::uint8_t, sim::kCtlMessageSize> reply{};
        if (!m || ::send(s, m->data(), m->size(), 0) != static_cast<ssize_t>(m->size()) ||
            ::recv(s, reply.data(), reply.size(), 0) != static_cast<ssize_t>(reply.size()))
            ::_exit(4);
        ::_exit(load_le32(reply.data() + sim::ctl_offset::type) == static_cast<std::uint32_t>(CtlType::error) ? 0 : 5);
    }
    ASSERT_GT(child, 0);
    int status = -1;
    ASSERT_TRUE(run_until([&] { return ::waitpid(child, &status, WNOHANG) == child; }));
    ASSERT_TRUE(WIFEXITED(status));
    EXPECT_EQ(WEXITSTATUS(status), 0);  // refused
    EXPECT_EQ(dropped(SimDrop::ctl_not_permitted), 1u);
    EXPECT_FALSE(sim().stats().find("IsSM") != std::string::npos) << sim().stats();
}

TEST_F(SimServer, RootAndTheServersOwnUserMayConnectByDefault) {
    start();
    EXPECT_EQ(sim().options().client_uids, (std::vector<uid_t>{0, ::geteuid()}));
    FakeClient& c = new_client();
    auto reply = connect_client(c, "hostA");
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->type, CtlType::connect);
}

TEST_F(SimServer, NobodyTakesASlotsSocketNameOrQueuesDatagramsForItsNextClient) {
    start([](SimServerOptions& o) { o.max_clients = 2; });
    // The slots' names are the server's from the start: a squatter on
    // B:out0 would make every CONNECT given slot 0 fail.
    UniqueFd squatter = dgram_socket();
    EXPECT_FALSE(bind_to(squatter.get(), sim::server_out_name(base_, 0)));
    // Nor can anyone queue MADs on a free slot for its next client.
    UniqueFd stranger = dgram_socket();
    const auto mad = *sim::encode_request(
        request_with(kSwitchLid, 1, sa_request(ib::method::get, sa::sa_attr::class_port_info, 5)));
    socklen_t len = 0;
    const sockaddr_un out0 = unix_address(sim::server_out_name(base_, 0), len);
    EXPECT_LT(::sendto(stranger.get(), mad.data(), mad.size(), MSG_NOSIGNAL, reinterpret_cast<const sockaddr*>(&out0),
                       len),
              0);

    FakeClient& c = new_client();
    auto reply = connect_client(c, "hostA");
    ASSERT_TRUE(reply.has_value());
    ASSERT_EQ(reply->type, CtlType::connect);
    EXPECT_EQ(reply->client_id, 0u);
    EXPECT_EQ(dropped(SimDrop::attach_failed), 0u);

    // A client that said goodbye can no longer send to the slot.
    auto bye = exchange(c, request_message(CtlType::disconnect, 0));
    ASSERT_TRUE(bye.has_value());
    ASSERT_EQ(bye->type, CtlType::disconnect);
    EXPECT_LT(::send(c.data_fd(), mad.data(), mad.size(), MSG_NOSIGNAL), 0);
}

TEST_F(SimServer, WhatAClientLeftUnreadOnItsSlotIsCountedWhenItGoes) {
    start();
    FakeClient& c = new_client();
    ASSERT_EQ(connect_client(c, "hostA")->type, CtlType::connect);
    // More datagrams than the server reads before it handles the
    // DISCONNECT (up to 64 a wake-up, and 64 more for the DISCONNECT).
    const std::vector<std::uint8_t> junk(10, 0x01);
    for (int k = 0; k < 200; ++k) c.send_data_raw(bytes(junk.data(), junk.size()));
    auto bye = exchange(c, request_message(CtlType::disconnect, 0));
    ASSERT_TRUE(bye.has_value());
    ASSERT_EQ(bye->type, CtlType::disconnect);
    EXPECT_GT(dropped(SimDrop::request_stale), 0u);
    EXPECT_EQ(dropped(SimDrop::request_stale) + dropped(SimDrop::request_wrong_size), 200u);
}

TEST_F(SimServer, SlotsAreBoundedByMaxClients) {
    start([](SimServerOptions& o) { o.max_clients = 2; });
    FakeClient& a = new_client();
    FakeClient& b = new_client();
    FakeClient& c = new_client();
    auto ra = connect_client(a, "hostA");
    auto rb = connect_client(b, "hostB");
    ASSERT_TRUE(ra && rb);
    EXPECT_EQ(ra->type, CtlType::connect);
    EXPECT_EQ(rb->type, CtlType::connect);
    auto rc = connect_client(c, "hostC");
    ASSERT_TRUE(rc.has_value());
    EXPECT_EQ(rc->type, CtlType::error);
    EXPECT_EQ(dropped(SimDrop::clients_full), 1u);
    EXPECT_EQ(sim().client_count(), 2u);
    EXPECT_EQ(sim().node_port("hostC"), nullptr);
}

TEST_F(SimServer, ASecondIsSmClientOnOneNodeIsRefused) {
    start();
    FakeClient& a = new_client();
    FakeClient& b = new_client();
    auto ra = connect_client(a, "hostA", true);
    ASSERT_TRUE(ra.has_value());
    EXPECT_EQ(ra->type, CtlType::connect);
    auto rb = connect_client(b, "hostA", true);
    ASSERT_TRUE(rb.has_value());
    EXPECT_EQ(rb->type, CtlType::error);
    EXPECT_EQ(dropped(SimDrop::node_has_sm), 1u);
    EXPECT_EQ(sim().client_count(), 1u);
}

TEST_F(SimServer, SetIssmOnANodeWithAnSmIsRefused) {
    start();
    FakeClient& a = new_client();
    FakeClient& b = new_client();
    ASSERT_EQ(connect_client(a, "hostA", true)->type, CtlType::connect);
    auto rb = connect_client(b, "hostA");
    ASSERT_TRUE(rb.has_value());
    ASSERT_EQ(rb->type, CtlType::connect);
    CtlMessage m;
    sim::put_set_issm(true, m);
    m.client_id = rb->client_id;
    auto reply = exchange(b, m);
    ASSERT_TRUE(reply.has_value());
    EXPECT_EQ(reply->type, CtlType::error);
    EXPECT_EQ(dropped(SimDrop::node_has_sm), 1u);
    // Once a gives IsSM up, b may take it.
    CtlMessage clear;
    sim::put_set_issm(false, clear);
    clear.client_id = 0;
    ASSERT_EQ(exchange(a, clear)->type, CtlType::set_issm);
    auto again = exchange(b, m);
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->type, CtlType::set_issm);
}

// ---------------------------------------------------------------------------
// Data channel

TEST_F(SimServer, AnSaQueryCrossesTheFabricAndComesBackToItsSlot) {
    start();
    FakeClient& a = new_client();
    FakeClient& c = new_client();  // slot 1: the slot bits are not zero
    ASSERT_NE(attach(a, "hostA"), 0u);
    const std::uint16_t lid = attach(c, "hostC");
    ASSERT_NE(lid, 0u);
    ASSERT_EQ(c.slot().value_or(99), 1u);

    const std::uint64_t tid = 0x0000'0003'1234'5678ULL;  // agent 3
    c.send_data(request_with(kSwitchLid, 1, sa_request(ib::method::get_table, sa::sa_attr::mc_member_record, tid)));
    auto r = await_data(c);
    ASSERT_TRUE(r.has_value()) << "no SA answer";
    EXPECT_EQ(r->status, sim::kStatusOk);
    EXPECT_EQ(r->slid, kSwitchLid);
    EXPECT_EQ(r->dlid, lid);
    EXPECT_EQ(r->sqp, 1u);
    const auto h = ib::MadHeader::read_from(r->mad.data());
    EXPECT_EQ(h.mgmt_class, ib::mgmt_class::subn_adm);
    EXPECT_EQ(h.method, ib::method::get_table | ib::method::response_bit);
    EXPECT_EQ(h.attribute_id, sa::sa_attr::mc_member_record);
    EXPECT_EQ(h.status, 0u) << sa::describe_sa_status(h.status);
    EXPECT_EQ(h.transaction_id & 0xFFFF'FFFFULL, 0x1234'5678ULL);
    EXPECT_EQ(sim::agent_of(h.transaction_id), 3u);
    EXPECT_EQ(sim::slot_of(h.transaction_id), 1u);
    // The default partition's broadcast group, the records that fit the
    // client's 224 bytes, and the length counting them.
    const auto sa_mad = sa::SaMad::read_from(r->mad.data());
    const std::size_t stride = std::size_t{sa_mad.attribute_offset} * 8;
    ASSERT_GE(stride, 52u);
    ASSERT_GE(r->length, sa::kSaHeaderSize + stride);
    EXPECT_EQ((r->length - sa::kSaHeaderSize) % stride, 0u) << r->length;
    EXPECT_LE(r->length, sim::kClientReceiveLimit);
    const ib::Gid broadcast{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
    ib::Gid mgid{};
    std::copy_n(sa_mad.data.begin(), mgid.size(), mgid.begin());
    EXPECT_EQ(mgid, broadcast);

    EXPECT_EQ(sim().counters().mads_from_clients, 1u);
    EXPECT_EQ(sim().counters().mads_to_clients, 1u);
    EXPECT_EQ(sim().counters().timeouts, 0u);
}

TEST_F(SimServer, AnSaGetOfOneRecordComesBackAsOneMad) {
    start();
    FakeClient& c = new_client();
    ASSERT_NE(attach(c, "hostA"), 0u);
    const ib::Gid broadcast{0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff};
    const std::uint64_t tid = 0x0000'0001'0000'00ABULL;
    sa::SaMad q;
    q.header.method = ib::method::get;
    q.header.attribute_id = sa::sa_attr::mc_member_record;
    q.header.transaction_id = tid;
    q.component_mask = 1;  // MGID
    std::copy(broadcast.begin(), broadcast.end(), q.data.begin());
    std::array<std::uint8_t, ib::kMadSize> mad{};
    q.write_to(mad.data());
    c.send_data(request_with(kSwitchLid, 1, mad));
    auto r = await_data(c);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, sim::kStatusOk);
    EXPECT_EQ(r->length, ib::kMadSize);  // no RMPP: the MAD as it came
    const auto answer = sa::SaMad::read_from(r->mad.data());
    EXPECT_EQ(answer.header.method, ib::method::get_resp);
    EXPECT_EQ(answer.header.status, 0u) << sa::describe_sa_status(answer.header.status);
    EXPECT_EQ(answer.header.transaction_id, tid);  // slot 0: the TID as sent
    EXPECT_FALSE(answer.rmpp.active());
    ib::Gid mgid{};
    std::copy_n(answer.data.begin(), mgid.size(), mgid.begin());
    EXPECT_EQ(mgid, broadcast);
}

TEST_F(SimServer, ADirectedRouteSmpOfHopCountZeroIsAnsweredByTheNodesOwnSma) {
    start();
    FakeClient& c = new_client();
    ASSERT_NE(attach(c, "hostA"), 0u);
    const std::uint64_t tid = 0x0000'0000'1234'0001ULL;
    c.send_data(request_with(ib::kLidPermissive, 0,
                             smp_get(ib::mgmt_class::subn_directed_route, ib::smp_attr::node_info, tid)));
    auto r = await_data(c);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, sim::kStatusOk);
    EXPECT_EQ(r->dlid, ib::kLidPermissive);
    EXPECT_EQ(r->slid, ib::kLidPermissive);
    const auto smp = ib::Smp::read_from(r->mad.data());
    EXPECT_TRUE(smp.direction);
    EXPECT_NE(load_be16(r->mad.data() + ib::smp_offset::status) & ib::kSmpDirectionBit, 0u);
    EXPECT_EQ(smp.method, ib::method::get_resp);
    EXPECT_EQ(smp.transaction_id, tid);
    EXPECT_EQ(smp.status, 0u);
    const auto ni = ib::NodeInfo::read_from(smp.data.data());
    EXPECT_EQ(ni.node_guid, fabric::SimServer::derived_node_guid("hostA"));
    EXPECT_EQ(sim().counters().local_smps, 1u);
    // Answered: nothing times out later.
    run_for(1200ms);
    EXPECT_EQ(sim().counters().timeouts, 0u);
    EXPECT_FALSE(c.take_data().has_value());
}

TEST_F(SimServer, AHopCountZeroSmpItsNodesSmaRefusesIsCountedAndTimesOut) {
    start([](SimServerOptions& o) { o.request_timeout = 200ms; });
    FakeClient& c = new_client();
    ASSERT_NE(attach(c, "hostA"), 0u);
    // The SM gave the port an M_Key (protect bits 1): a Set without it is
    // refused, and nothing answers.
    ASSERT_NE(sim().node_port("hostA")->managed().sma().port_info().m_key, 0u);
    c.send_data(set_port_info_without_m_key(0x0000'0000'1234'0003ULL));
    auto r = await_data(c, 10s);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, sim::kStatusTimedOut);
    EXPECT_EQ(dropped(SimDrop::local_smp_refused), 1u);
    EXPECT_EQ(sim().node_port("hostA")->sma_counters().dropped[static_cast<std::size_t>(transport::SmaDrop::m_key_mismatch)],
              1u);
}

TEST_F(SimServer, TheNodesOwnCountersShowInStatsAndMetricsAndOutliveTheNode) {
    start();
    FakeClient& c = new_client();
    ASSERT_NE(attach(c, "hostA"), 0u);
    c.send_data(set_port_info_without_m_key(0x0000'0000'1234'0005ULL));
    ASSERT_TRUE(run_until([&] { return dropped(SimDrop::local_smp_refused) == 1; }, 10s));
    const fabric::FabricDaemonInfo info{.started = SteadyClock::now(), .key_file = "", .sim = &sim()};
    auto shown = [&] {
        const std::string stats = fabric::fabric_answer(*service_, info, "stats");
        PrometheusText text("ibfabricd");
        fabric::visit_sim_sections(sim(), [&](std::string_view name, const auto& visit_section) {
            PrometheusText::Sink sink(text, std::string(name), {});
            visit_section(sink);
        });
        const std::string metrics = text.render();
        const std::size_t section = stats.find("\"sim_nodes\":{");
        EXPECT_NE(section, std::string::npos) << stats;
        EXPECT_NE(stats.find("\"sma_dropped_m_key_mismatch\":1", section), std::string::npos) << stats;
        EXPECT_NE(stats.find("\"sma_traps_sent\":1", section), std::string::npos) << stats;  // its Trap 256
        EXPECT_NE(metrics.find("\nibfabricd_sim_nodes_sma_dropped_m_key_mismatch 1\n"), std::string::npos) << metrics;
        EXPECT_NE(metrics.find("\nibfabricd_sim_dropped_local_smp_refused 1\n"), std::string::npos) << metrics;
    };
    shown();
    // Gone with its only client, the node's counts stay.
    c.vanish();
    ASSERT_TRUE(run_until([&] { return sim().node_port("hostA") == nullptr; }, 10s));
    shown();
    EXPECT_NE(sim().stats().find("sim_nodes sma_dropped_m_key_mismatch 1\n"), std::string::npos) << sim().stats();
}

TEST_F(SimServer, ADirectedRouteResponseOfHopCountZeroIsDroppedAndCounted) {
    start();
    FakeClient& c = new_client();
    ASSERT_NE(attach(c, "hostA"), 0u);
    ib::Smp s;
    s.mgmt_class = ib::mgmt_class::subn_directed_route;
    s.method = ib::method::get_resp;
    s.direction = true;
    s.attribute_id = ib::smp_attr::node_info;
    s.transaction_id = 0x0000'0000'1234'0004ULL;
    s.hop_count = 0;
    s.hop_pointer = 1;  // where a response of HopCount 0 is, after its responder (C14-13:3)
    std::array<std::uint8_t, ib::kMadSize> mad{};
    s.write_to(mad.data());
    c.send_data(request_with(ib::kLidPermissive, 0, mad));
    ASSERT_TRUE(run_until([&] { return dropped(SimDrop::local_response) == 1; }, 10s));
    EXPECT_EQ(sim().counters().local_smps, 0u);
    EXPECT_FALSE(c.take_data().has_value());
}

TEST_F(SimServer, MadsForAClientWhoseSocketIsGoneAreCounted) {
    start([](SimServerOptions& o) { o.request_timeout = 1s; });
    FakeClient& sm = new_client();
    FakeClient& a = new_client();
    const std::uint16_t lid_s = attach(sm, "hostS", true);
    ASSERT_NE(lid_s, 0u);
    ASSERT_NE(attach(a, "hostA"), 0u);
    // Two SA queries the SM client takes and never answers, sent together:
    // the server reads both in one wake-up, so they have one deadline.
    for (std::uint64_t k = 1; k <= 2; ++k)
        a.send_data(request_with(lid_s, 1, sa_request(ib::method::get, sa::sa_attr::class_port_info, k)));
    // a's socket goes, its name and process stay (before the server has
    // even read the two: nothing reaches a before they time out, however
    // slowly the SM client gets them): both time out in one tick, the
    // first send is refused, the second finds the client gone.
    a.replace_data_socket();
    ASSERT_TRUE(await_data(sm, 10s).has_value());
    ASSERT_TRUE(await_data(sm, 10s).has_value());
    ASSERT_TRUE(run_until([&] { return sim().client_count() == 1; }, 10s));
    EXPECT_EQ(sim().counters().timeouts, 2u);
    EXPECT_EQ(dropped(SimDrop::client_gone), 2u);
    EXPECT_EQ(sim().counters().mads_to_clients, 2u);  // the two requests the SM client got
}

TEST_F(SimServer, ADirectedRouteSmpThroughTheSwitchReachesAnotherNode) {
    start();
    FakeClient& a = new_client();
    FakeClient& b = new_client();
    ASSERT_NE(attach(a, "hostA"), 0u);
    ASSERT_NE(attach(b, "hostB"), 0u);
    const std::uint64_t guid_b = fabric::SimServer::derived_node_guid("hostB");
    std::uint8_t switch_port_b = 0;
    for (const auto& [number, port] : service_->subnet_manager().ports())
        if (port.port_guid == guid_b + 1) switch_port_b = number.port;
    ASSERT_NE(switch_port_b, 0u);
    ib::Smp s;
    s.mgmt_class = ib::mgmt_class::subn_directed_route;
    s.method = ib::method::get;
    s.attribute_id = ib::smp_attr::node_info;
    s.transaction_id = 0x0000'0000'1234'0002ULL;
    s.hop_count = 2;
    s.initial_path[1] = 1;              // out of A's port 1
    s.initial_path[2] = switch_port_b;  // out of the switch to B
    std::array<std::uint8_t, ib::kMadSize> mad{};
    s.write_to(mad.data());
    a.send_data(request_with(ib::kLidPermissive, 0, mad));
    auto r = await_data(a);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, sim::kStatusOk);
    EXPECT_EQ(r->dlid, ib::kLidPermissive);
    const auto smp = ib::Smp::read_from(r->mad.data());
    EXPECT_TRUE(smp.direction);
    EXPECT_EQ(smp.method, ib::method::get_resp);
    EXPECT_EQ(smp.transaction_id, s.transaction_id);
    EXPECT_EQ(ib::NodeInfo::read_from(smp.data.data()).node_guid, guid_b);
    EXPECT_EQ(sim().counters().local_smps, 0u);
    EXPECT_FALSE(b.take_data().has_value());
}

TEST_F(SimServer, WithoutAnSmPortInfoIsAnsweredAfterAttachWaitAndGmpsFailAtOnce) {
    fabric_running_ = false;
    // attach_wait far above the 100 ms the test looks for an early answer.
    start([](SimServerOptions& o) { o.attach_wait = 2s; });
    FakeClient& c = new_client();
    auto reply = connect_client(c, "hostA");
    ASSERT_TRUE(reply.has_value());
    ASSERT_EQ(reply->type, CtlType::connect);
    c.send_ctl(request_message(CtlType::get_portinfo, 0));
    run_for(100ms);
    EXPECT_FALSE(c.take_ctl().has_value());  // held while the port may still come up
    auto pi_reply = await_ctl(c);
    ASSERT_TRUE(pi_reply.has_value());
    ASSERT_EQ(pi_reply->type, CtlType::get_portinfo);
    const auto pi = ib::PortInfo::read_from(pi_reply->data.data());
    EXPECT_NE(pi.port_state, kPortStateActive);
    EXPECT_EQ(pi.lid, 0u);

    const std::uint64_t tid = 0x0000'0001'0000'0001ULL;
    c.send_data(request_with(kSwitchLid, 1, sa_request(ib::method::get_table, sa::sa_attr::mc_member_record, tid)));
    auto r = await_data(c, 10s);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, sim::kStatusTimedOut);
    EXPECT_EQ(dropped(SimDrop::request_port_down), 1u);
}

TEST_F(SimServer, ALidRoutedSmpReachesAnotherNodesSma) {
    start();
    FakeClient& a = new_client();
    FakeClient& b = new_client();
    const std::uint16_t lid_a = attach(a, "hostA");
    const std::uint16_t lid_b = attach(b, "hostB");
    ASSERT_NE(lid_a, 0u);
    ASSERT_NE(lid_b, 0u);
    ASSERT_NE(lid_a, lid_b);
    const std::uint64_t tid = 0x0000'0002'0000'0042ULL;
    a.send_data(request_with(lid_b, 0, smp_get(ib::mgmt_class::subn_lid_routed, ib::smp_attr::node_info, tid)));
    auto r = await_data(a);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, sim::kStatusOk);
    EXPECT_EQ(r->slid, lid_b);
    const auto smp = ib::Smp::read_from(r->mad.data());
    EXPECT_EQ(smp.method, ib::method::get_resp);
    EXPECT_EQ(smp.transaction_id, tid);
    const auto ni = ib::NodeInfo::read_from(smp.data.data());
    EXPECT_EQ(ni.node_guid, fabric::SimServer::derived_node_guid("hostB"));
    EXPECT_FALSE(b.take_data().has_value());  // b's SMA answered; b's client saw nothing
    EXPECT_EQ(sim().counters().local_smps, 0u);
}

TEST_F(SimServer, BadDataDatagramsAreCountedAndABadLidComesBackTimedOut) {
    start();
    FakeClient& c = new_client();
    ASSERT_NE(attach(c, "hostA"), 0u);

    const std::vector<std::uint8_t> short_one(100, 0x01);
    c.send_data_raw(bytes(short_one.data(), short_one.size()));
    ASSERT_TRUE(run_until([&] { return dropped(SimDrop::request_wrong_size) == 1; }));

    const SimRequest good = request_with(kSwitchLid, 1, sa_request(ib::method::get, sa::sa_attr::class_port_info, 7));
    auto too_long = *sim::encode_request(good);
    store_be64(too_long.data() + sim::request_offset::length, 300);
    c.send_data_raw(bytes(too_long.data(), too_long.size()));
    ASSERT_TRUE(run_until([&] { return dropped(SimDrop::request_bad_length) == 1; }));

    const std::uint64_t tid = 0x0000'0001'0000'0099ULL;
    c.send_data(request_with(0, 1, gmp_get(ib::mgmt_class::perf_mgt, 0x0001, tid)));
    auto r = await_data(c);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, sim::kStatusTimedOut);
    EXPECT_EQ(tid_of(*r) & ~sim::kTidSlotMask, tid);
    EXPECT_EQ(dropped(SimDrop::request_bad_lid), 1u);
    EXPECT_EQ(sim().counters().mads_from_clients, 1u);  // only the one that parsed
    EXPECT_FALSE(c.take_data().has_value());  // neither bad datagram got an answer
}

TEST_F(SimServer, UnansweredRequestsTimeOutAndOutstandingIsBounded) {
    start([](SimServerOptions& o) {
        o.request_timeout = 2s;  // far above the test's work before it looks at timeouts
        o.max_outstanding = 2;
    });
    FakeClient& a = new_client();
    FakeClient& b = new_client();
    ASSERT_NE(attach(a, "hostA"), 0u);
    const std::uint16_t lid_b = attach(b, "hostB", true);
    ASSERT_NE(lid_b, 0u);

    // SA Gets to hostB, whose SM client takes them and never answers.
    for (std::uint64_t k = 1; k <= 3; ++k)
        a.send_data(request_with(lid_b, 1, sa_request(ib::method::get, sa::sa_attr::class_port_info,
                                                      0x0000'0004'0000'0000ULL | k)));
    // The third at once: over the bound.
    ASSERT_TRUE(run_until([&] { return dropped(SimDrop::too_many_outstanding) == 1; }, 10s));
    auto third = await_data(a, 2s);
    ASSERT_TRUE(third.has_value());
    EXPECT_EQ(third->status, sim::kStatusTimedOut);
    EXPECT_EQ(tid_of(*third) & 0xFFFF'FFFFULL, 3u);
    EXPECT_EQ(sim().counters().timeouts, 1u);

    // The first two after request_timeout.
    std::vector<std::uint64_t> tids;
    for (int k = 0; k < 2; ++k) {
        auto r = await_data(a, 10s);
        ASSERT_TRUE(r.has_value()) << "request " << k;
        EXPECT_EQ(r->status, sim::kStatusTimedOut);
        EXPECT_EQ(sim::agent_of(tid_of(*r)), 4u);
        tids.push_back(tid_of(*r) & 0xFFFF'FFFFULL);
    }
    std::sort(tids.begin(), tids.end());
    EXPECT_EQ(tids, (std::vector<std::uint64_t>{1, 2}));
    EXPECT_EQ(sim().counters().timeouts, 3u);
    EXPECT_EQ(dropped(SimDrop::too_many_outstanding), 1u);
    // The two reached hostB's SM client, the third never left.
    EXPECT_TRUE(b.take_data().has_value());
    EXPECT_TRUE(b.take_data().has_value());
    EXPECT_FALSE(b.take_data().has_value());
}

TEST_F(SimServer, AClientsTrapToTheSmGetsItsTrapRepress) {
    start([](SimServerOptions& o) { o.request_timeout = 2s; });  // far above the SM's answer
    FakeClient& c = new_client();
    const std::uint16_t lid = attach(c, "hostA");
    ASSERT_NE(lid, 0u);
    // ibsendtrap's way: Trap 144 (capability mask changed) from the
    // client's own LID to the SM's.
    ib::SmpNotice notice;
    notice.type = 4;  // informational
    notice.producer_type = ib::trap::producer_channel_adapter;
    notice.trap_number = 144;
    notice.issuer_lid = lid;
    ib::Smp trap;
    trap.mgmt_class = ib::mgmt_class::subn_lid_routed;
    trap.method = ib::method::trap;
    trap.attribute_id = ib::smp_attr::notice;
    trap.transaction_id = 0x0000'0002'0000'0144ULL;
    notice.write_to(trap.data.data());
    std::array<std::uint8_t, ib::kMadSize> mad{};
    trap.write_to(mad.data());
    c.send_data(request_with(kSwitchLid, 0, mad));
    auto r = await_data(c, 10s);
    ASSERT_TRUE(r.has_value());
    EXPECT_EQ(r->status, sim::kStatusOk);
    EXPECT_EQ(r->slid, kSwitchLid);
    EXPECT_EQ(r->dlid, lid);
    const auto repress = ib::Smp::read_from(r->mad.data());
    EXPECT_EQ(repress.method, ib::method::trap_repress);
    EXPECT_EQ(repress.transaction_id, trap.transaction_id);  // slot 0: as sent
    EXPECT_EQ(repress.attribute_id, ib::smp_attr::notice);
    EXPECT_EQ(repress.m_key, 0u);  // the port's M_Key, which the SM put there, is not shown
    EXPECT_EQ(service_->subnet_manager().counters().traps, 1u);
    EXPECT_EQ(service_->subnet_manager().counters().traps_refused, 0u);
    // Answered: the Trap is no longer in flight, nothing can come back
    // timed out.
    EXPECT_NE(sim().stats().find(" 0 in flight\n"), std::string::npos) << sim().stats();
    run_for(100ms);
    EXPECT_FALSE(c.take_data().has_value());
    EXPECT_EQ(sim().counters().timeouts, 0u);
}

TEST_F(SimServer, UnsolicitedRequestsGoToTheNodesSmClient) {
    start();
    FakeClient& sm = new_client();
    FakeClient& a = new_client();
    const std::uint16_t lid_s = attach(sm, "hostS", true);
    ASSERT_NE(lid_s, 0u);
    const std::uint16_t lid_a = attach(a, "hostA");
    ASSERT_NE(lid_a, 0u);
    const std::uint64_t tid = 0x0000'0005'0000'0077ULL;
    // An SA query addressed to the SM client's node (saquery with that
    // node as its SM LID).
    a.send_data(request_with(lid_s, 1, sa_request(ib::method::get_table, sa::sa_attr::node_record, tid)));
    auto at_sm = await_data(sm);
    ASSERT_TRUE(at_sm.has_value());
    const auto h = ib::MadHeader::read_from(at_sm->mad.data());
    EXPECT_EQ(h.mgmt_class, ib::mgmt_class::subn_adm);
    EXPECT_EQ(h.method, ib::method::get_table);
    EXPECT_EQ(at_sm->slid, lid_a);
    EXPECT_EQ(sim::slot_of(h.transaction_id), a.slot().value_or(99));  // stamped by the server
    EXPECT_EQ(h.transaction_id & ~sim::kTidSlotMask, tid);

    // The SM client answers; the answer goes back to a.
    SimRequest answer = *at_sm;
    answer.dlid = at_sm->slid;
    answer.slid = 0;
    answer.dqp = at_sm->sqp;
    answer.sqp = 1;
    answer.mad[3] = ib::method::get_table_resp;
    sm.send_data(answer);
    auto at_a = await_data(a);
    ASSERT_TRUE(at_a.has_value());
    EXPECT_EQ(at_a->status, sim::kStatusOk);
    EXPECT_EQ(at_a->mad[3], ib::method::get_table_resp);
    EXPECT_EQ(at_a->slid, lid_s);
    EXPECT_EQ(tid_of(*at_a) & ~sim::kTidSlotMask, tid);
    EXPECT_EQ(sim().counters().timeouts, 0u);
}

TEST_F(SimServer, AnSmClientGetsNoUnsolicitedGmpOfAClassOtherThanSubnAdm) {
    start();
    FakeClient& sm = new_client();
    FakeClient& a = new_client();
    const std::uint16_t lid_s = attach(sm, "hostS", true);
    ASSERT_NE(lid_s, 0u);
    ASSERT_NE(attach(a, "hostA"), 0u);
    // A DevMgt Get and a CM Send (as a REQ would be) to the SM's node:
    // libumad2sim has no agent for them and would crash OpenSM.
    a.send_data(request_with(lid_s, 1, gmp_get(ib::mgmt_class::dev_mgt, 0x0001, 0x0000'0001'0000'0001ULL)));
    auto cm = gmp_get(ib::mgmt_class::com_mgt, 0x0010, 0x0000'0001'0000'0002ULL);
    cm[3] = ib::method::send;
    a.send_data(request_with(lid_s, 1, cm));
    ASSERT_TRUE(run_until([&] { return dropped(SimDrop::request_no_agent) == 2; }));
    // An SA request still reaches it.
    a.send_data(request_with(lid_s, 1, sa_request(ib::method::get, sa::sa_attr::class_port_info, 0x0000'0001'0000'0003ULL)));
    auto at_sm = await_data(sm);
    ASSERT_TRUE(at_sm.has_value());
    EXPECT_EQ(at_sm->mad[1], ib::mgmt_class::subn_adm);
    run_for(50ms);
    EXPECT_FALSE(sm.take_data().has_value());
}

TEST_F(SimServer, ARequestOfAClassNobodyOnTheNodeServesIsAnsweredClassNotSupported) {
    // A request timeout far above the answers' round trip: what comes back
    // in time is the node's answer, not the server's timeout.
    start([](SimServerOptions& o) { o.request_timeout = 30s; });
    FakeClient& sm = new_client();
    FakeClient& a = new_client();
    FakeClient& b = new_client();
    const std::uint16_t lid_s = attach(sm, "hostS", true);
    ASSERT_NE(lid_s, 0u);
    ASSERT_NE(attach(a, "hostA"), 0u);
    const std::uint16_t lid_b = attach(b, "hostB");
    ASSERT_NE(lid_b, 0u);
    struct Case {
        const char* name;
        std::uint16_t dlid;
        std::array<std::uint8_t, ib::kMadSize> mad;
        std::uint8_t response_method;
    };
    auto dev_mgt_set = gmp_get(ib::mgmt_class::dev_mgt, 0x0001, 0x0000'0001'0000'0003ULL);
    dev_mgt_set[3] = ib::method::set;
    const Case cases[] = {
        {"DevMgt Get, node without an SM client", lid_b, gmp_get(ib::mgmt_class::dev_mgt, 0x0001, 0x0000'0001'0000'0001ULL),
         ib::method::get_resp},
        {"SA GetTable, node without an SM client", lid_b,
         sa_request(ib::method::get_table, sa::sa_attr::node_record, 0x0000'0001'0000'0002ULL), ib::method::get_table_resp},
        {"DevMgt Set, the SM client's node (its SM takes SubnAdm only)", lid_s, dev_mgt_set, ib::method::get_resp},
    };
    for (const Case& k : cases) {
        SCOPED_TRACE(k.name);
        a.send_data(request_with(k.dlid, 1, k.mad));
        auto r = await_data(a, 10s);  // well within the request_timeout
        ASSERT_TRUE(r.has_value());
        EXPECT_EQ(r->status, sim::kStatusOk);
        EXPECT_EQ(r->slid, k.dlid);
        const auto h = ib::MadHeader::read_from(r->mad.data());
        const auto asked = ib::MadHeader::read_from(k.mad.data());
        EXPECT_EQ(h.mgmt_class, asked.mgmt_class);
        EXPECT_EQ(h.method, k.response_method);
        EXPECT_EQ(h.status, ib::mad_status::bad_version);  // 0x0004: class not supported
        EXPECT_EQ(h.transaction_id & ~sim::kTidSlotMask, asked.transaction_id);  // the slot stamped
        EXPECT_EQ(h.attribute_id, asked.attribute_id);
    }
    // A Send gets no answer.
    auto cm = gmp_get(ib::mgmt_class::com_mgt, 0x0010, 0x0000'0001'0000'0004ULL);
    cm[3] = ib::method::send;
    a.send_data(request_with(lid_b, 1, cm));
    ASSERT_TRUE(run_until([&] { return dropped(SimDrop::request_no_sm) == 3; }));
    run_for(50ms);
    EXPECT_FALSE(a.take_data().has_value());
    EXPECT_FALSE(sm.take_data().has_value());
    EXPECT_FALSE(b.take_data().has_value());
    EXPECT_EQ(sim().counters().class_not_supported_answers, 3u);
    EXPECT_EQ(dropped(SimDrop::request_no_agent), 1u);
    EXPECT_EQ(sim().counters().timeouts, 0u);
}

TEST_F(SimServer, AResponseReachesAClientOnlyWhenItAnswersOneOfItsRequests) {
    start();
    FakeClient& a = new_client();
    FakeClient& b = new_client();
    FakeClient& m = new_client();
    ASSERT_NE(attach(a, "hostA"), 0u);
    const std::uint16_t lid_b = attach(b, "hostB", true);
    ASSERT_NE(lid_b, 0u);
    const std::uint16_t lid_a = sim().node_port("hostA")->attributes().lid;
    ASSERT_NE(attach(m, "hostM"), 0u);

    // a asks hostB's SM client, b, something: the request stays in flight
    // while b answers it falsely and then truly.
    const std::uint64_t tid = sim::with_slot(0x0000'0004'0000'0031ULL, static_cast<std::uint16_t>(*a.slot()));
    a.send_data(request_with(lid_b, 1, gmp_get(ib::mgmt_class::subn_adm, 0x0001, tid)));
    ASSERT_TRUE(await_data(b).has_value());

    auto response = [&](std::uint8_t mgmt_class, std::uint64_t t) {
        SimRequest r = request_with(lid_a, 1, gmp_get(mgmt_class, 0x0001, t));
        r.mad[3] = ib::method::get_resp;
        return r;
    };
    m.send_data(response(ib::mgmt_class::subn_adm, tid));                // a TID a uses, from another LID
    b.send_data(response(ib::mgmt_class::subn_adm, sim::with_slot(0x99, static_cast<std::uint16_t>(*a.slot()))));  // no such request
    b.send_data(response(ib::mgmt_class::perf_mgt, tid));                // another class
    ASSERT_TRUE(run_until([&] { return dropped(SimDrop::response_unexpected) == 3; }));
    b.send_data(response(ib::mgmt_class::subn_adm, tid));                // the answer
    auto got = await_data(a);
    ASSERT_TRUE(got.has_value());
    EXPECT_EQ(got->slid, lid_b);
    EXPECT_EQ(got->mad[1], ib::mgmt_class::subn_adm);
    EXPECT_EQ(got->mad[3], ib::method::get_resp);
    EXPECT_EQ(tid_of(*got), tid);
    EXPECT_EQ(got->status, sim::kStatusOk);
    run_for(50ms);
    EXPECT_FALSE(a.take_data().has_value());  // none of the forged ones came through
    EXPECT_EQ(dropped(SimDrop::response_unexpected), 3u);
}

// ---------------------------------------------------------------------------
// Liveness

TEST_F(SimServer, AClientThatDisappearsIsReapedAndItsNodeClosed) {
    start();
    FakeClient& c = new_client();
    ASSERT_NE(attach(c, "hostA"), 0u);
    ASSERT_NE(sim().node_port("hostA"), nullptr);
    c.vanish();
    ASSERT_TRUE(run_until([&] { return sim().client_count() == 0; }, 10s));
    EXPECT_EQ(sim().counters().clients_reaped, 1u);
    EXPECT_EQ(sim().counters().clients_disconnected, 0u);
    EXPECT_EQ(sim().node_port("hostA"), nullptr);
    EXPECT_EQ(sim().counters().nodes_closed, 1u);
}

TEST_F(SimServer, AClientProcessThatExitedIsReapedEvenWhenItsSocketsNameLivesOn) {
    start();
    // The sockets are made here, then a child process sends the CONNECT
    // on them and exits without DISCONNECT. This process keeps the same
    // sockets, so B:in<id> lives on, as when another process binds the
    // name of a killed client's socket: only the process is gone.
    FakeClient& c = new_client();
    const pid_t child = ::fork();
    if (child == 0) {
        c.send_ctl(connect_message("hostA", c.id(), false));
        for (int k = 0; k < 500; ++k) {
            if (auto reply = c.take_ctl()) {
                auto m = sim::parse_ctl(bytes(reply->data(), reply->size()));
                ::_exit(m && m->type == CtlType::connect ? 0 : 4);
            }
            ::usleep(10000);
        }
        ::_exit(3);
    }
    ASSERT_GT(child, 0);
    int status = -1;
    ASSERT_TRUE(run_until([&] { return ::waitpid(child, &status, WNOHANG) == child; }));
    ASSERT_TRUE(WIFEXITED(status));
    ASSERT_EQ(WEXITSTATUS(status), 0);  // attached
    EXPECT_EQ(sim().counters().clients_connected, 1u);
    ASSERT_TRUE(run_until([&] { return sim().client_count() == 0; }, 10s));
    EXPECT_EQ(sim().counters().clients_reaped, 1u);
    EXPECT_EQ(sim().node_port("hostA"), nullptr);
}

TEST_F(SimServer, APidSeenAgainReplacesItsOldSlot) {
    start();
    FakeClient& old = new_client();
    ASSERT_EQ(connect_client(old, "hostA")->type, CtlType::connect);
    // Its process dies without DISCONNECT and a new one with the same pid
    // connects (whether the reaper or the CONNECT notices first).
    old.vanish();
    FakeClient& c = new_client(old.id());
    auto again = connect_client(c, "hostA");
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->type, CtlType::connect);
    EXPECT_EQ(sim().client_count(), 1u);
    EXPECT_EQ(sim().counters().clients_reaped, 1u);
    auto pi = port_info(c);  // the new client is served
    ASSERT_TRUE(pi.has_value());
    EXPECT_EQ(pi->port_state, kPortStateActive);
}

}  // namespace
}  // namespace ipoibd::simtest
