// The verbs port: device discovery, port attributes, the event fd and async
// events.
//
// Opening, step by step (each failure names the step, device and port):
//  1. ibv_get_device_list(); pick the device by name, or the first
//  2. ibv_open_device(); ibv_query_device() for the port count and limits
//  3. ibv_query_port(): the port must exist and speak InfiniBand
//  4. protection domain and one completion channel shared by every CQ
//  5. the channel's fd and the async event fd made non-blocking; both, plus a
//     wake-up eventfd, put in one epoll fd: Port::fd()
//  6. first attribute query (state, LID, SM, MTU, GID 0, P_Key table)
//
// process() then drains the three fds: completion events are acked at once
// and their CQ re-armed (the QP polls the CQ itself); async events for this
// port become PortEvents and refresh the data path's view of the port.
#include "transport/verbs/verbs_port.h"

#include <fcntl.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <cerrno>
#include <deque>

#include "transport/verbs/verbs_device.h"
#include "transport/verbs/verbs_qp.h"
#include "transport/verbs/verbs_rc.h"
#include "transport/verbs/verbs_send_queue.h"

namespace ipoibd::transport {

namespace verbs {
namespace {

// Per process() call, at most this many of each kind of event are handled;
// the epoll fd stays readable for the rest (guideline 6: bounded batches).
constexpr int kEventBatch = 64;
constexpr std::size_t kMaxPendingEvents = 64;

// Verbs calls report failure as a positive errno, or as -1 with errno set.
int error_number(int rc) { return rc > 0 ? rc : (errno != 0 ? errno : EIO); }

expected<void, Error> set_nonblocking(int fd, const std::string& what) {
    const int flags = ::fcntl(fd, F_GETFL);
    if (flags < 0 || ::fcntl(fd, F_SETFL, flags | O_NONBLOCK) < 0)
        return unexpected(verbs_error("fcntl O_NONBLOCK on the " + what, errno));
    return {};
}

expected<void, Error> watch(int epoll_fd, int fd, const std::string& what) {
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.fd = fd;
    if (::epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) return unexpected(verbs_error("epoll_ctl ADD " + what, errno));
    return {};
}

// The device to open from the list: by name, or the first.
expected<ibv_device*, Error> pick_device(ibv_device** list, int count, const std::string& name, const std::string& who) {
    if (count <= 0) return unexpected(Error{Errc::not_supported, "cannot open " + who + ": no RDMA devices present", ENODEV});
    if (name.empty()) return list[0];
    std::string present;
    for (int i = 0; i < count; ++i) {
        const char* n = ibv_get_device_name(list[i]);
        if (n != nullptr && name == n) return list[i];
        present += (i ? ", " : "") + std::string(n != nullptr ? n : "?");
    }
    return unexpected(Error{Errc::invalid_argument, "no RDMA device named '" + name + "' (present: " + present + ")", ENODEV});
}

class VerbsPort final : public Port {
public:
    explicit VerbsPort(std::shared_ptr<DeviceState> device) : device_(std::move(device)) {}

    // Steps 5 and 6 of opening.
    expected<void, Error> init();

    // Queries the HCA afresh (ibv_query_port, GID 0, the P_Key table); if
    // that fails (the device went away) returns the last known attributes
    // with the state DOWN.
    PortAttributes attributes() const override;

    // Checks the P_Key index against the current table, then builds the QP
    // (verbs_qp.h).
    expected<std::unique_ptr<UdQp>, Error> create_ud_qp(const UdQpConfig& config) override;

    std::size_t poll_events(std::span<PortEvent> out) override;
    int fd() const override { return epoll_.get(); }
    void process() override;
    // Processed on a timer as well as on fd(): ipoibd has always done so on
    // HCAs, and no hardware run has yet shown that the completion channel
    // alone never leaves a completion unreported.
    bool needs_periodic_process() const override { return true; }

    // A data thread's send queue: a send-only UD QP of its own
    // (verbs_send_queue.h).
    expected<std::unique_ptr<UdSendQueue>, Error> create_send_queue() override {
        return VerbsSendQueue::create(device_);
    }

    // RC (verbs_rc.h): the P_Key index checked against the current table.
    expected<std::unique_ptr<RcQueuePair>, Error> create_rc_qp(std::uint16_t pkey_index) override;
    // ibv_reg_mr in the port's protection domain; the region's address is
    // the memory's own (the VA a peer names).
    expected<rc::MemoryRegion, Error> register_memory(std::span<std::uint8_t> memory, std::uint32_t access) override;
    expected<void, Error> deregister_memory(std::uint32_t rkey) override;

private:
    expected<PortAttributes, Error> query() const;
    void refresh_state() const;
    void drain_wake_ups();
    void drain_completion_events();
    void drain_async_events();
    void raise(PortEvent e);

    std::shared_ptr<DeviceState> device_;
    UniqueFd epoll_;
    std::deque<PortEvent> events_;  // bounded: kMaxPendingEvents, oldest dropped
    std::uint64_t events_dropped_ = 0;
    mutable PortAttributes last_known_;
};

expected<void, Error> VerbsPort::init() {
    DeviceState& dev = *device_;
    if (auto ok = set_nonblocking(dev.channel->fd, "completion channel"); !ok) return ok;
    if (auto ok = set_nonblocking(dev.context->async_fd, "async event fd"); !ok) return ok;
    dev.wake.reset(::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC));
    if (!dev.wake) return unexpected(verbs_error("eventfd", errno));
    epoll_.reset(::epoll_create1(EPOLL_CLOEXEC));
    if (!epoll_) return unexpected(verbs_error("epoll_create1", errno));
    if (auto ok = watch(epoll_.get(), dev.channel->fd, "completion channel"); !ok) return ok;
    if (auto ok = watch(epoll_.get(), dev.context->async_fd, "async event fd"); !ok) return ok;
    if (auto ok = watch(epoll_.get(), dev.wake.get(), "wake-up eventfd"); !ok) return ok;

    auto first = query();
    if (!first) return unexpected(first.error());
    last_known_ = std::move(*first);
    return {};
}

expected<PortAttributes, Error> VerbsPort::query() const {
    DeviceState& dev = *device_;
    ibv_context* ctx = dev.context.get();
    ibv_port_attr pa{};
    if (int rc = ibv_query_port(ctx, dev.port_num, &pa); rc != 0)
        return unexpected(verbs_error("ibv_query_port on " + dev.where(), error_number(rc)));

    PortAttributes a;
    a.state = port_state_from_verbs(pa.state);
    a.lid = pa.lid;
    a.lmc = pa.lmc;
    a.sm_lid = pa.sm_lid;
    a.sm_sl = pa.sm_sl;
    a.port_num = dev.port_num;
    a.node_guid = dev.node_guid;
    a.active_mtu = mtu_from_verbs(pa.active_mtu);

    ibv_gid gid{};
    if (int rc = ibv_query_gid(ctx, dev.port_num, 0, &gid); rc != 0)
        return unexpected(verbs_error("ibv_query_gid 0 on " + dev.where(), error_number(rc)));
    a.subnet_prefix = load_be64(gid.raw);
    a.port_guid = load_be64(gid.raw + 8);

    // Index i of the table is P_Key index i. Hardware tables are long (often
    // 128) and mostly empty (0); trailing empty entries are left out.
    a.pkey_table.clear();
    for (int i = 0; i < pa.pkey_tbl_len; ++i) {
        __be16 pkey{};
        if (int rc = ibv_query_pkey(ctx, dev.port_num, i, &pkey); rc != 0)
            return unexpected(verbs_error("ibv_query_pkey " + std::to_string(i) + " on " + dev.where(), error_number(rc)));
        a.pkey_table.push_back(be16_to_host(pkey));
    }
    while (!a.pkey_table.empty() && a.pkey_table.back() == 0) a.pkey_table.pop_back();

    dev.state = a.state;
    dev.active_mtu = a.active_mtu;
    dev.pkey_table = a.pkey_table;
    return a;
}

PortAttributes VerbsPort::attributes() const {
    if (auto now = query()) {
        last_known_ = std::move(*now);
    } else {
        last_known_.state = PortState::down;
        device_->state = PortState::down;
    }
    return last_known_;
}

void VerbsPort::refresh_state() const {
    ibv_port_attr pa{};
    if (ibv_query_port(device_->context.get(), device_->port_num, &pa) != 0) {
        device_->state = PortState::down;
        return;
    }
    device_->state = port_state_from_verbs(pa.state);
    device_->active_mtu = mtu_from_verbs(pa.active_mtu);
}

expected<std::unique_ptr<UdQp>, Error> VerbsPort::create_ud_qp(const UdQpConfig& config) {
    auto now = query();
    if (!now) return unexpected(now.error());
    last_known_ = *now;
    const auto& table = now->pkey_table;
    if (config.pkey_index >= table.size() || table[config.pkey_index] == 0)
        return unexpected(Error{Errc::bad_pkey_index, "P_Key index " + std::to_string(config.pkey_index) + " is empty in a " +
                                                          std::to_string(table.size()) + "-entry table"});
    return VerbsUdQp::create(device_, config);
}

expected<std::unique_ptr<RcQueuePair>, Error> VerbsPort::create_rc_qp(std::uint16_t pkey_index) {
    auto now = query();
    if (!now) return unexpected(now.error());
    last_known_ = *now;
    const auto& table = now->pkey_table;
    if (pkey_index >= table.size() || table[pkey_index] == 0)
        return unexpected(Error{Errc::bad_pkey_index, "P_Key index " + std::to_string(pkey_index) + " is empty in a " +
                                                          std::to_string(table.size()) + "-entry table"});
    return VerbsRcQp::create(device_, pkey_index);
}

expected<rc::MemoryRegion, Error> VerbsPort::register_memory(std::span<std::uint8_t> memory, std::uint32_t access) {
    if (memory.empty() || memory.size() > 0xFFFFFFFFu)
        return unexpected(Error{Errc::invalid_argument, "a region of " + std::to_string(memory.size()) + " bytes"});
    if (access & ~(rc::access::local_write | rc::access::remote_write | rc::access::remote_read))
        return unexpected(Error{Errc::invalid_argument, "unknown access flags"});
    const int flags = access_to_verbs(access);
    MrPtr mr((ibv_reg_mr)(device_->pd.get(), memory.data(), memory.size(), flags));
    if (!mr)
        return unexpected(verbs_error("ibv_reg_mr of " + std::to_string(memory.size()) + " bytes on " + device_->where() +
                                          " (locked memory is limited by ulimit -l / LimitMEMLOCK=)",
                                      errno));
    rc::MemoryRegion r{.va = reinterpret_cast<std::uintptr_t>(memory.data()),
                       .length = static_cast<std::uint32_t>(memory.size()),
                       .rkey = mr->rkey,
                       .access = access,
                       .data = memory.data()};
    const std::uint32_t rkey = mr->rkey;
    device_->regions[rkey] = DeviceState::UserRegion{std::move(mr), flags};
    return r;
}

expected<void, Error> VerbsPort::deregister_memory(std::uint32_t rkey) {
    if (device_->regions.erase(rkey) == 0)
        return unexpected(Error{Errc::invalid_argument, "no memory region with that R_Key"});
    return {};
}

std::size_t VerbsPort::poll_events(std::span<PortEvent> out) {
    std::size_t n = 0;
    while (n < out.size() && !events_.empty()) {
        out[n++] = events_.front();
        events_.pop_front();
    }
    return n;
}

void VerbsPort::raise(PortEvent e) {
    if (events_.size() >= kMaxPendingEvents) {
        events_.pop_front();
        ++events_dropped_;
    }
    events_.push_back(e);
}

void VerbsPort::process() {
    drain_wake_ups();
    drain_completion_events();
    drain_async_events();
}

void VerbsPort::drain_wake_ups() {
    std::uint64_t count = 0;
    [[maybe_unused]] const ssize_t n = ::read(device_->wake.get(), &count, sizeof count);
}

void VerbsPort::drain_completion_events() {
    for (int i = 0; i < kEventBatch; ++i) {
        ibv_cq* cq = nullptr;
        void* cq_context = nullptr;
        if (ibv_get_cq_event(device_->channel.get(), &cq, &cq_context) != 0) break;  // EAGAIN: drained
        // Acked at once: ibv_destroy_cq() waits for every event it got to be
        // acked, and a QP may be destroyed before the next process().
        ibv_ack_cq_events(cq, 1);
        // Re-armed before the QP polls, so a completion arriving after that
        // poll raises a new event rather than being missed.
        ibv_req_notify_cq(cq, 0);
    }
}

void VerbsPort::drain_async_events() {
    bool port_changed = false;
    for (int i = 0; i < kEventBatch; ++i) {
        ibv_async_event event{};
        if (ibv_get_async_event(device_->context.get(), &event) != 0) break;  // EAGAIN: drained
        std::optional<PortEvent> mapped;
        if (event_concerns_port(event, device_->port_num)) mapped = port_event_from_verbs(event.event_type);
        // QP, CQ and SRQ events (QP_FATAL ...) are acked and otherwise left:
        // a QP in error flushes its work requests, which the user sees.
        ibv_ack_async_event(&event);
        if (mapped) {
            raise(*mapped);
            port_changed = true;
        }
    }
    if (port_changed) refresh_state();
}

}  // namespace
}  // namespace verbs

expected<std::vector<std::string>, Error> list_verbs_devices() {
    int count = 0;
    errno = 0;
    verbs::DeviceListPtr list(ibv_get_device_list(&count));
    if (!list) {
        const int err = errno != 0 ? errno : ENOSYS;
        if (err == ENOSYS)
            return unexpected(Error{Errc::not_supported, "the kernel has no RDMA support (ibv_get_device_list)", err});
        return unexpected(verbs::verbs_error("ibv_get_device_list", err));
    }
    std::vector<std::string> names;
    for (int i = 0; i < count; ++i) {
        const char* n = ibv_get_device_name(list.get()[i]);
        names.emplace_back(n != nullptr ? n : "?");
    }
    return names;
}

expected<std::unique_ptr<Port>, Error> open_verbs_port(const std::string& device_name, std::uint8_t port_num) {
    using namespace verbs;
    const std::string who = (device_name.empty() ? std::string("the first RDMA device") : "RDMA device '" + device_name + "'") +
                            " port " + std::to_string(port_num);
    if (port_num == 0) return unexpected(Error{Errc::invalid_argument, "cannot open " + who + ": HCA ports count from 1"});

    // 1. find the device
    int count = 0;
    errno = 0;
    DeviceListPtr list(ibv_get_device_list(&count));
    if (!list) {
        const int err = errno != 0 ? errno : ENOSYS;
        if (err == ENOSYS)
            return unexpected(Error{Errc::not_supported, "cannot open " + who + ": the kernel has no RDMA support", err});
        return unexpected(verbs_error("ibv_get_device_list (opening " + who + ")", err));
    }
    auto device = pick_device(list.get(), count, device_name, who);
    if (!device) return unexpected(device.error());

    // 2. open it and learn its limits
    auto state = std::make_shared<DeviceState>();
    state->device_name = ibv_get_device_name(*device);
    state->port_num = port_num;
    state->context.reset(ibv_open_device(*device));
    if (!state->context) return unexpected(verbs_error("ibv_open_device " + state->device_name, errno));
    list.reset();  // the open context no longer needs the list

    ibv_device_attr dattr{};
    if (int rc = ibv_query_device(state->context.get(), &dattr); rc != 0)
        return unexpected(verbs_error("ibv_query_device " + state->device_name, error_number(rc)));
    if (port_num > dattr.phys_port_cnt)
        return unexpected(Error{Errc::invalid_argument, "cannot open " + state->where() + ": the device has " +
                                                            std::to_string(dattr.phys_port_cnt) + " port(s)"});
    state->node_guid = be64_to_host(dattr.node_guid);
    state->max_qp_wr = dattr.max_qp_wr > 0 ? static_cast<std::uint32_t>(dattr.max_qp_wr) : 0;
    state->max_cqe = dattr.max_cqe > 0 ? static_cast<std::uint32_t>(dattr.max_cqe) : 0;
    state->max_rd_atomic = dattr.max_qp_rd_atom > 0 ? static_cast<std::uint32_t>(dattr.max_qp_rd_atom) : 0;
    state->max_init_rd_atomic =
        dattr.max_qp_init_rd_atom > 0 ? static_cast<std::uint32_t>(dattr.max_qp_init_rd_atom) : 0;

    // 3. the port must speak InfiniBand
    ibv_port_attr pattr{};
    if (int rc = ibv_query_port(state->context.get(), port_num, &pattr); rc != 0)
        return unexpected(verbs_error("ibv_query_port on " + state->where(), error_number(rc)));
    if (!is_infiniband_link_layer(pattr.link_layer))
        return unexpected(Error{Errc::not_supported, "cannot open " + state->where() +
                                                         ": its link layer is Ethernet (RoCE); IPoIB needs InfiniBand"});
    state->max_mtu = mtu_from_verbs(pattr.max_mtu);

    // 4. protection domain and completion channel
    state->pd.reset(ibv_alloc_pd(state->context.get()));
    if (!state->pd) return unexpected(verbs_error("ibv_alloc_pd on " + state->where(), errno));
    state->channel.reset(ibv_create_comp_channel(state->context.get()));
    if (!state->channel) return unexpected(verbs_error("ibv_create_comp_channel on " + state->where(), errno));

    // 5, 6. the event fd and the first look at the port
    auto port = std::make_unique<VerbsPort>(std::move(state));
    if (auto ok = port->init(); !ok) return unexpected(ok.error());
    return std::unique_ptr<Port>(std::move(port));
}

}  // namespace ipoibd::transport
