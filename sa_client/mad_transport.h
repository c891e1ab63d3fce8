// The MAD path of the SA client: 256-byte SA MADs to the subnet manager's
// QP1 and back. The SaClient (sa_client.h) decides what to send and when;
// a MadTransport only moves bytes, so the same client runs over:
//   mad_transport_soft   a transport::Port's GSI QP (QP1): the soft fabric,
//                        and the in-memory fabric in tests
//   mad_transport_umad   libibumad (real HCAs, and OpenSM under ibsim through
//                        libumad2sim); built when libibumad is found, else
//                        open_umad_transport() says not_supported
//
// The owner's loop:
//  1. send() every MAD of SaClient::take_outbound()
//  2. wait: on wait_source().fd in its epoll set, or, when the fd is not
//     epoll_capable (libumad2sim's fake fds), with wait() on this transport
//     alone, in a loop with short timeouts or on a thread of its own
//  3. receive(): each MAD that arrived goes to the callback (SaClient::on_mad)
//  4. SaClient::tick() at SaClient::next_deadline()
//
// Threading: one thread, like transport::Port.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>

#include "common/counters.h"
#include "common/byte_io.h"
#include "common/expected.h"
#include "sa_client/sa_mad.h"
#include "transport/port.h"

namespace ipoibd::sa {

// Where requests go: the local port and the SM it knows (PortInfo's
// MasterSMLID and MasterSMSL).
struct MadPortInfo {
    std::string name;          // "soft 0x0200...", "mlx5_0 port 1", "ibsim0 port 1"
    std::uint16_t lid = 0;
    std::uint16_t sm_lid = 0;  // 0: no SM has programmed the port yet
    std::uint8_t sm_sl = 0;
    ib::Gid gid{};             // GID index 0: subnet prefix + port GUID
    bool active = false;       // PortState ACTIVE
};

struct MadTransportCounters {
    std::uint64_t sent = 0;
    std::uint64_t send_errors = 0;       // refused or failed sends (see last error)
    std::uint64_t received = 0;          // MADs handed to receive()'s callback
    std::uint64_t receive_errors = 0;    // failed receive completions, umad error statuses
    std::uint64_t short_received = 0;    // shorter than 256 bytes: padded with zeros
    std::uint64_t dropped = 0;           // too short to be an SA MAD, or not for us
};
void visit(const MadTransportCounters& c, CounterSink& out); // as "mad_sent", ...

enum class MadTransportErrc : std::uint8_t {
    no_sm,            // the port has no SM LID (not ACTIVE yet)
    queue_full,       // the send queue is full; try again after receive()
    send_failed,      // the backend refused the MAD
    not_supported,    // built without libibumad
    open_failed,      // could not open or register the port
};
const char* to_string(MadTransportErrc e);

struct MadTransportError {
    MadTransportErrc code = MadTransportErrc::send_failed;
    std::string detail;  // "umad_send: Invalid argument", "no SM LID: port is INIT"
    std::string message() const;
};

// The other end of a MAD that is not the SM's: QP1 of a port (the CM's
// peers), by LID and SL, with a GRH when `gid` is set. A received MAD's
// sender as the path knows it (LID 0: it does not).
struct MadAddress {
    std::uint16_t lid = 0;
    std::uint8_t sl = 0;
    std::optional<ib::Gid> gid;
    bool operator==(const MadAddress&) const = default;
};

// How an event loop can wait for received MADs.
struct MadWaitSource {
    int fd = -1;                 // readable (POLLIN) when receive() has work; -1: use wait()
    bool epoll_capable = false;  // false: poll() this fd alone, never in an epoll set or
                                 // a pollfd array with others (libumad2sim, README gotcha 2)
};

class MadTransport {
public:
    using MadCallback = std::function<void(bytes mad)>;
    using SourcedMadCallback = std::function<void(bytes mad, const MadAddress& from)>;

    virtual ~MadTransport() = default;

    // The local port and its SM. The soft transport reads it live; umad
    // reads it at open and on refresh_port().
    virtual MadPortInfo port_info() const = 0;
    // Reads the port's LID and SM again (call on lid_change, sm_change and
    // client_reregister port events).
    virtual void refresh_port() = 0;

    // Sends one MAD to the SM's QP1 (Q_Key 0x80010000, P_Key index 0).
    // Never blocks. A request that expects a response is sent so that the
    // response can come back (umad: with a kernel timeout); RMPP ACKs and
    // ABORTs and responses go out without one.
    virtual expected<void, MadTransportError> send(const SaMad& mad) = 0;

    // Hands every MAD received so far, at most `max`, to `on_mad`, oldest
    // first, as 256 bytes (a shorter one padded with zeros; the bytes a
    // simulator does not carry zeroed, see valid_bytes()). Never blocks;
    // returns how many were handed over. Does the backend's pending I/O
    // first (soft: Port::process()).
    virtual std::size_t receive(const MadCallback& on_mad, std::size_t max = 64) = 0;

    // receive() with each MAD's sender (soft: the completion's SLID, SL and
    // GRH). The default names none (LID 0).
    virtual std::size_t receive_from(const SourcedMadCallback& on_mad, std::size_t max = 64);
    // Sends a whole 256-byte MAD to QP1 of `to` (Q_Key 0x80010000, P_Key
    // index 0), as the connection manager talks to its peers; the MAD goes
    // as it is (no request bookkeeping), through the agent of its class.
    // not_supported where the path cannot address ports (libumad2sim).
    virtual expected<void, MadTransportError> send_to(bytes mad, const MadAddress& to);
    virtual bool can_address_peers() const { return false; }

    virtual MadWaitSource wait_source() const = 0;
    // Blocks until a MAD may be ready to receive() or `timeout` passes,
    // waiting on this transport alone. Returns false on timeout.
    virtual bool wait(std::chrono::milliseconds timeout) = 0;

    // Bytes of a received MAD that carry data: 256, or 224 under
    // libumad2sim, which copies only those (no RMPP: a table longer than
    // that is cut there, README gotchas 4 and 6).
    virtual std::size_t valid_bytes() const { return kSaMadSize; }

    virtual const MadTransportCounters& counters() const = 0;

    // Receive the MADs of another management class too (the MAD agent's
    // clients: mad_agent.h), requests with `unsolicited_methods` included
    // (a peer's CM Send). QP1 on the soft and in-memory fabrics carries
    // every class already; libibumad registers one more agent with the
    // kernel's MAD layer, which refuses a class and method another agent
    // holds (the kernel's ib_cm holds the CM's Send).
    virtual expected<void, MadTransportError> register_class(std::uint8_t mgmt_class, std::uint8_t class_version,
                                                             std::span<const std::uint8_t> unsolicited_methods = {}) {
        (void)mgmt_class;
        (void)class_version;
        (void)unsolicited_methods;
        return {};
    }
};

// ---------------------------------------------------------------------------
// libibumad (mad_transport_umad.cpp, or mad_transport_noumad.cpp when the
// build has no libibumad).
struct UmadTransportConfig {
    std::string ca;         // empty: the first CA
    unsigned port_num = 0;  // 0: the first ACTIVE port
    // Kernel timeout of a request: how long the kernel keeps a send open
    // for its response. Longer than the SaClient's longest retry interval,
    // so a late response still gets through; the SaClient times out itself.
    std::chrono::milliseconds response_window{8000};
    // The SA's Reports (method 0x06, unsolicited) come in too: what a
    // subscriber needs (ibsaquery subscribe --listen). The kernel's MAD
    // layer gives a class's method to one agent per port, so only a
    // subscriber asks; opening fails while another agent holds it.
    bool take_reports = false;
};
expected<std::unique_ptr<MadTransport>, MadTransportError> open_umad_transport(const UmadTransportConfig& config);
bool umad_transport_built();

// ---------------------------------------------------------------------------
// The MAD path for a transport::Port: the port's own QP1 where the backend
// hands it out (soft fabric, in-memory fabric), else libibumad on the same
// HCA port (verbs: the kernel's MAD layer owns QP1).
struct MadPathOptions {
    std::string ca;         // umad: the HCA ([fabric] device); empty: the first
    unsigned port_num = 1;  // umad: its port
    // QP1: receive() processes the port first (mad_transport_soft.h); false
    // when the owner processes the port itself.
    bool process_port = true;
};
expected<std::unique_ptr<MadTransport>, MadTransportError> open_mad_path(transport::Port& port,
                                                                         const MadPathOptions& options);

}  // namespace ipoibd::sa
