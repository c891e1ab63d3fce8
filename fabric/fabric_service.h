// The soft fabric as a service for someone else's event loop: the switch,
// its subnet manager and subnet administrator, the UDP socket the ports
// reach them on, and the optional capture file. ibfabricd runs one in its
// own loop; ipoibd hosts one in its loop with `[fabric] embedded = yes`.
//
// The owner's contract (one thread, one level-triggered epoll loop):
//  1. open() binds the socket and opens the capture file, then wires the
//     switch, SM, SA and management port together. Nothing is sent until
//     a port's first link packet arrives.
//  2. fd() goes into the owner's epoll set for EPOLLIN. When it is
//     readable, on_readable(now) takes about kReceiveDatagrams datagrams
//     (and the rest of the last GRO batch) and hands each to the switch;
//     level-triggered epoll reports the rest on the next wake-up, so a busy
//     fabric cannot starve the owner's other fds.
//  3. tick(now) every kTickInterval (a timerfd, or a repeating timer):
//     link packets to every plugged port, silent ports unplugged, SM
//     sweeps and SMP retries, SA Report and RMPP retries.
//  4. after_wakeup(now) once at the end of every wake-up in which 2 or 3
//     ran (calling it on idle wake-ups too is harmless): the SM learns of
//     the ports that packets plugged in, and what the switch, SM and SA
//     queued leaves in sendmmsg batches; the capture file is flushed.
//     on_readable() and tick() only queue: without after_wakeup() nothing
//     reaches the ports.
//  5. stats() at any time (SIGUSR1); flush() before exiting.
// `now` is the steady clock read once per wake-up. The object owns its fd
// and closes it when destroyed; remove fd() from epoll before that.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/expected.h"
#include "common/socket_address.h"
#include "fabric/management.h"
#include "fabric/sa/sa_server.h"
#include "fabric/sm.h"
#include "fabric/switch.h"
#include "transport/capture/erf_pcap.h"
#include "transport/soft/udp_batch.h"

namespace ipoibd::fabric {

struct FabricServiceOptions {
    SocketAddress listen;  // where the switch listens (port 0: any free port)
    // The switch's LID, number of ports and link timeout.
    Switch::Config sw;
    // The SM and SA: subnet prefix, largest MTU, fixed LIDs by port GUID,
    // partitions, sweep interval, SMP timeout and retries.
    SmConfig sm;
    // MLIDs every plugged port receives without joining (a test aid).
    std::vector<std::uint16_t> flood_groups;
    std::string pcap;  // capture file (ERF in pcap); empty: no capture
    // The fabric key (transport/soft/fabric_auth.h); none: datagrams unsealed.
    std::optional<FabricKeys> keys;
    SmLog log;         // the SM's lines ("SM: port 1 GUID ... ACTIVE with LID 0x0002"); empty: none
    // false (ibfabricd --sm=no): no SM and no SA here. The switch's port 0
    // has no LID until an SM sets one, and everything a subnet manager does
    // is left to one attached as a port of the fabric (OpenSM under
    // libumad2sim, sim_server.h), through the switch's SMA like any SM.
    bool sm_enabled = true;
};

class FabricService {
public:
    static constexpr std::chrono::milliseconds kTickInterval{50};
    static constexpr std::size_t kReceiveDatagrams = 512;  // per on_readable(), then what is pending

    // Binds the socket and opens the capture file. Errors read as the
    // environment's ("could not bind UDP socket to 0.0.0.0:18516: Address
    // already in use", "could not open capture file /x.pcap: ...") or name
    // the option that cannot work.
    static expected<std::unique_ptr<FabricService>, std::string> open(FabricServiceOptions options);

    FabricService(const FabricService&) = delete;
    FabricService& operator=(const FabricService&) = delete;

    int fd() const { return socket_.fd(); }
    SocketAddress local_address() const { return socket_.local_address(); }

    // The socket is readable: about kReceiveDatagrams datagrams to the switch.
    void on_readable(Clock::time_point now);
    // Every kTickInterval.
    void tick(Clock::time_point now);
    // End of a wake-up: link events to the SM, then flush().
    void after_wakeup(Clock::time_point now);
    // Sends what is queued on the socket; flushes the capture file.
    void flush();

    // Counters of the switch, socket, SM and SA, the SM's ports and the SA's
    // groups, one item a line (ibfabricd prints it on SIGUSR1).
    std::string stats() const;

    const Switch& fabric_switch() const { return switch_; }
    const SubnetManager& subnet_manager() const { return sm_; }
    const SaServer& sa_server() const { return sa_; }
    const FabricManagement& management() const { return management_; }
    const transport::UdpCounters& udp_counters() const { return socket_.counters(); }
    // Rotates the fabric key (SIGHUP): a fabric started without one keeps
    // none (the ports would all be cut off at once).
    expected<void, std::string> set_fabric_keys(const FabricKeys& keys);
    // New partitions (SIGHUP): the SM sets the P_KeyTable of every ACTIVE
    // port whose P_Keys change (no reregister: its LID and groups stay), the
    // SA creates the broadcast groups of new `ipoib` partitions and checks
    // membership against the new tables. Returns how many ports get a new
    // table.
    std::size_t set_partitions(std::vector<Partition> partitions);
    const transport::FabricAuth* auth() const { return auth_.get(); }
    const FabricServiceOptions& options() const { return options_; }

private:
    // The switch's output: datagrams queued on the socket.
    class SocketOutput final : public SwitchOutput {
    public:
        explicit SocketOutput(transport::UdpBatchSocket& socket) : socket_(socket) {}
        void send(const SocketAddress& peer, bytes datagram) override { socket_.queue(datagram, &peer); }

    private:
        transport::UdpBatchSocket& socket_;
    };

    FabricService(FabricServiceOptions options, transport::UdpBatchSocket socket,
                  std::optional<capture::ErfPcapWriter> pcap);
    void handle_link_events(Clock::time_point now);
    std::string sa_stats() const;

    FabricServiceOptions options_;
    transport::UdpBatchSocket socket_;
    std::unique_ptr<transport::FabricAuth> auth_;
    std::optional<capture::ErfPcapWriter> pcap_;
    SocketOutput output_;
    Switch switch_;
    SubnetManager sm_;
    SaServer sa_;
    FabricManagement management_;
};

}  // namespace ipoibd::fabric
