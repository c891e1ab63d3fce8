#include "tests/hw/fake_umad.h"

#include <fcntl.h>
#include <infiniband/umad.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <deque>
#include <vector>

#include "sa_client/sa_mad.h"

namespace fake_umad {

constexpr int kPortId = 3;
constexpr int kAgent = 7;
constexpr int kCmAgent = 8;

namespace {

struct State {
    Config config;
    ipoibd::ipoib::test::ScriptedSa sa;
    std::deque<std::vector<std::uint8_t>> answers;
    int pipe_fds[2] = {-1, -1};
    Stats stats;
};

}  // namespace

State& state() {
    static State s;
    return s;
}

namespace {

std::uint64_t to_be64(std::uint64_t v) {
    std::uint8_t b[8];
    ipoibd::store_be64(b, v);
    std::uint64_t out;
    std::memcpy(&out, b, sizeof out);
    return out;
}

}  // namespace

void reset(const Config& config) {
    State& s = state();
    if (s.pipe_fds[0] >= 0) {
        ::close(s.pipe_fds[0]);
        ::close(s.pipe_fds[1]);
    }
    s.config = config;
    s.sa = ipoibd::ipoib::test::ScriptedSa();
    s.answers.clear();
    s.stats = {};
    if (::pipe2(s.pipe_fds, O_NONBLOCK | O_CLOEXEC) != 0) s.pipe_fds[0] = s.pipe_fds[1] = -1;
}

ipoibd::ipoib::test::ScriptedSa& sa() { return state().sa; }

void inject_cm(const std::array<std::uint8_t, 256>& mad, std::uint16_t from_lid) {
    State& s = state();
    std::vector<std::uint8_t> buf(sizeof(ib_user_mad_t) + mad.size());
    ib_user_mad_t hdr{};
    hdr.agent_id = kCmAgent;
    hdr.length = static_cast<uint32_t>(mad.size());
    hdr.addr.lid = htobe16(from_lid);
    hdr.addr.qpn = htobe32(1);
    std::memcpy(buf.data(), &hdr, sizeof hdr);
    std::memcpy(buf.data() + sizeof hdr, mad.data(), mad.size());
    s.answers.push_back(std::move(buf));
    const char one = 1;
    (void)!::write(s.pipe_fds[1], &one, 1);
}
const Stats& stats() { return state().stats; }

}  // namespace fake_umad

using fake_umad::state;
using fake_umad::to_be64;
using fake_umad::kPortId;
using fake_umad::kAgent;
using fake_umad::kCmAgent;

extern "C" {

int umad_init(void) { return 0; }

int umad_get_port(const char* ca_name, int portnum, umad_port_t* port) {
    if (ca_name && std::strcmp(ca_name, "fake_ib0") != 0) return -ENODEV;
    if (portnum != 0 && portnum != 1) return -EINVAL;
    std::memset(port, 0, sizeof *port);
    std::strncpy(port->ca_name, "fake_ib0", sizeof port->ca_name - 1);
    port->portnum = 1;
    port->base_lid = state().config.lid;
    port->sm_lid = state().config.sm_lid;
    port->state = 4;  // ACTIVE
    port->gid_prefix = to_be64(0xFE80000000000000ULL);
    port->port_guid = to_be64(state().config.port_guid);
    return 0;
}

int umad_release_port(umad_port_t*) { return 0; }

int umad_open_port(const char* ca_name, int) {
    if (ca_name && std::strcmp(ca_name, "fake_ib0") != 0) return -ENODEV;
    ++state().stats.open_ports;
    return kPortId;
}

int umad_close_port(int portid) {
    if (portid != kPortId) return -EINVAL;
    --state().stats.open_ports;
    return 0;
}

int umad_register(int portid, int mgmt_class, int class_version, uint8_t, long* method_mask) {
    if (portid != kPortId) return -EINVAL;
    if (mgmt_class == 0x03) {
        const bool reports = method_mask && (method_mask[0] & (1L << 6));
        if (reports && !state().config.sa_reports_free) return -EINVAL;
        ++state().stats.registered;
        state().stats.sa_takes_reports = reports;
        return kAgent;
    }
    // The CM's class: its Send (method 3) in the mask, version 2, and free.
    if (mgmt_class == 0x07 && class_version == 2 && method_mask && (method_mask[0] & (1L << 3)) &&
        state().config.cm_class_free) {
        ++state().stats.registered;
        return kCmAgent;
    }
    return -EINVAL;
}

ib_mad_addr_t* umad_get_mad_addr(void* umad) { return &static_cast<ib_user_mad_t*>(umad)->addr; }
int umad_set_grh(void* umad, void* mad_addr) {
    auto* u = static_cast<ib_user_mad_t*>(umad);
    const auto* a = static_cast<const ib_mad_addr_t*>(mad_addr);
    u->addr.grh_present = 1;
    std::memcpy(u->addr.gid, a->gid, sizeof u->addr.gid);
    u->addr.hop_limit = a->hop_limit;
    return 0;
}

int umad_get_fd(int portid) { return portid == kPortId ? state().pipe_fds[0] : -EINVAL; }

size_t umad_size(void) { return sizeof(ib_user_mad_t); }
void* umad_get_mad(void* umad) { return static_cast<ib_user_mad_t*>(umad)->data; }
int umad_status(void* umad) { return static_cast<int>(static_cast<ib_user_mad_t*>(umad)->status); }
int umad_set_pkey(void* umad, int pkey_index) {
    static_cast<ib_user_mad_t*>(umad)->addr.pkey_index = static_cast<uint16_t>(pkey_index);
    return 0;
}
int umad_set_addr(void* umad, int dlid, int, int sl, int) {
    static_cast<ib_user_mad_t*>(umad)->addr.lid = static_cast<__be16>(dlid);  // opaque to the fake
    static_cast<ib_user_mad_t*>(umad)->addr.sl = static_cast<uint8_t>(sl);
    return 0;
}

int umad_send(int portid, int agentid, void* umad, int length, int, int) {
    auto& s = state();
    if (portid == kPortId && agentid == kCmAgent && length == 256) {
        fake_umad::SentMad m;
        m.dlid = static_cast<std::uint16_t>(static_cast<ib_user_mad_t*>(umad)->addr.lid);  // as umad_set_addr stored it
        std::memcpy(m.mad.data(), umad_get_mad(umad), m.mad.size());
        s.stats.cm_sent.push_back(m);
        ++s.stats.sent;
        return 0;
    }
    if (portid != kPortId || agentid != kAgent) return -EINVAL;
    if (length != static_cast<int>(ipoibd::sa::kSaMadSize)) return -EINVAL;
    ++s.stats.sent;
    const auto mad = ipoibd::sa::SaMad::read_from(static_cast<const std::uint8_t*>(umad_get_mad(umad)));
    if (auto answer = s.sa.handle(mad, std::chrono::steady_clock::now())) {
        std::vector<std::uint8_t> buf(sizeof(ib_user_mad_t) + ipoibd::sa::kSaMadSize);
        ib_user_mad_t hdr{};
        hdr.agent_id = kAgent;
        hdr.length = static_cast<uint32_t>(ipoibd::sa::kSaMadSize);
        std::memcpy(buf.data(), &hdr, sizeof hdr);
        // The kernel's MAD layer puts its own agent number into the high 32
        // bits of the TID: only the low 32 come back as they were sent.
        answer->header.transaction_id = (answer->header.transaction_id & 0xFFFFFFFFu) | 0x00C0FFEE00000000ULL;
        answer->write_to(buf.data() + sizeof(ib_user_mad_t));
        s.answers.push_back(std::move(buf));
        const char one = 1;
        (void)::write(s.pipe_fds[1], &one, 1);
    }
    return 0;
}

int umad_recv(int portid, void* umad, int* length, int) {
    auto& s = state();
    if (portid != kPortId) return -EINVAL;
    if (s.answers.empty()) {
        char drain[64];
        while (::read(s.pipe_fds[0], drain, sizeof drain) > 0) {
        }
        return -EWOULDBLOCK;
    }
    const std::vector<std::uint8_t>& a = s.answers.front();
    const std::size_t mad_len = a.size() - sizeof(ib_user_mad_t);
    if (*length < static_cast<int>(mad_len)) {
        *length = static_cast<int>(mad_len);
        return -ENOSPC;
    }
    std::memcpy(umad, a.data(), a.size());
    *length = static_cast<int>(mad_len);
    const int agent = static_cast<int>(reinterpret_cast<const ib_user_mad_t*>(a.data())->agent_id);
    s.answers.pop_front();
    ++s.stats.received;
    return agent;
}

}  // extern "C"
