// The asynchronous SA client, sans-I/O: a transaction table keyed by TID.
//
//  1. submit(): a request MAD gets a TID (high 32 bits: this client, low 32:
//     a sequence number) and goes out at once, or waits in a bounded queue
//     while max_outstanding requests are in flight
//  2. on_mad(): a response is matched on the low 32 bits of its TID
//     (libumad2sim rewrites the high ones); a GetTableResp sent with RMPP is
//     reassembled, its ACKs queued for sending; a complete response calls
//     the request's callback once
//  3. tick(): a request unanswered by its deadline is sent again with the
//     same TID, the timeout doubling up to max_timeout, at most `retries`
//     times; then its callback gets SaFailure::timeout
//  4. dropping the Handle cancels the request: no callback, no retries
//  5. a Report from the SA (a subscribed trap) is answered with ReportResp
//     and handed to the report handler, once per TID even when the SA
//     resends it
// The owner moves MADs: take_outbound() to send, on_mad() for what arrives,
// and tick() at next_deadline().
#pragma once

#include <chrono>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <optional>
#include <vector>

#include "common/counters.h"
#include "common/expected.h"
#include "sa_client/rmpp.h"
#include "sa_client/sa_mad.h"

namespace ipoibd::sa {

using Clock = std::chrono::steady_clock;

enum class SaFailure : std::uint8_t {
    timeout,             // no (complete) response after all retries
    malformed_response,  // the RMPP transfer broke (see counters)
    queue_full,          // more than max_queued requests waiting
};
const char* to_string(SaFailure f);

struct SaResult {
    SaMad header;                       // the (first) response MAD; status, method, AttributeOffset
    std::vector<std::uint8_t> payload;  // the records: all of a GetTableResp, the data of others
    std::uint16_t status() const { return header.header.status; }
};

using SaCallback = std::function<void(const expected<SaResult, SaFailure>&)>;

struct SaClientCounters {
    std::uint64_t requests = 0;
    std::uint64_t sent = 0;        // MADs handed out, retries included
    std::uint64_t retries = 0;
    std::uint64_t timeouts = 0;
    std::uint64_t responses = 0;
    std::uint64_t unmatched = 0;   // responses to no request in flight (late, duplicate, foreign)
    std::uint64_t mismatched = 0;  // a request's TID with another method or attribute: dropped
    std::uint64_t not_from_sm = 0; // MADs from a LID other than the SM's: dropped
    std::uint64_t malformed = 0;   // not an SA MAD, or a broken RMPP transfer
    std::uint64_t queue_full = 0;
    std::uint64_t cancelled = 0;
    std::uint64_t reports = 0;            // Reports delivered to the handler
    std::uint64_t report_duplicates = 0;  // resent Reports, answered again only
};
void visit(const SaClientCounters& c, CounterSink& out);

class SaClient {
public:
    struct Config {
        std::chrono::milliseconds timeout{500};
        std::chrono::milliseconds max_timeout{8000};
        unsigned retries = 3;
        std::size_t max_outstanding = 32;
        std::size_t max_queued = 1024;
        std::uint32_t tid_high = 0x1B0B0000;  // identifies this client in TIDs
        // The low 32 bits of the first TID; counted up from there. Clients
        // that share a MAD agent start apart (the kernel and libumad2sim
        // rewrite the high 32 bits, so responses are matched on the low).
        std::uint32_t first_key = 1;
    };

    // Cancels its request when destroyed or cancel()ed. A Handle must not
    // outlive its SaClient.
    class Handle {
    public:
        Handle() = default;
        Handle(Handle&& o) noexcept : client_(std::exchange(o.client_, nullptr)), key_(o.key_) {}
        Handle& operator=(Handle&& o) noexcept {
            if (this != &o) {
                cancel();
                client_ = std::exchange(o.client_, nullptr);
                key_ = o.key_;
            }
            return *this;
        }
        Handle(const Handle&) = delete;
        Handle& operator=(const Handle&) = delete;
        ~Handle() { cancel(); }
        void cancel();
        bool pending() const;

    private:
        friend class SaClient;
        Handle(SaClient* c, std::uint32_t key) : client_(c), key_(key) {}
        SaClient* client_ = nullptr;
        std::uint32_t key_ = 0;
    };

    explicit SaClient(Config config);
    SaClient() : SaClient(Config{}) {}

    // Sends `request` (its TransactionID is replaced). When the queue is
    // full the callback is called at once with queue_full.
    [[nodiscard]] Handle submit(SaMad request, SaCallback callback, Clock::time_point now);

    // A MAD from LID `from_lid` (0: the transport does not say). Only the
    // SM's LID (set_sm_lid) may answer or report: the fabric vouches for
    // the source LID (the switch passes a packet only with an SLID routed
    // to its ingress port), not for anything in the MAD. A response must
    // also carry its request's attribute and the method that answers it.
    void on_mad(bytes mad, Clock::time_point now, std::uint16_t from_lid = 0);
    // The SM's LID (PortInfo MasterSMLID); 0: any sender is taken.
    void set_sm_lid(std::uint16_t lid) { sm_lid_ = lid; }

    // Who gets the Notices of Reports (traps the port subscribed to).
    using ReportHandler = std::function<void(const SaMad& report)>;
    void set_report_handler(ReportHandler handler) { report_handler_ = std::move(handler); }
    void tick(Clock::time_point now);
    std::optional<Clock::time_point> next_deadline() const;
    std::vector<SaMad> take_outbound();

    std::size_t outstanding() const { return in_flight_; }
    const SaClientCounters& counters() const { return counters_; }
    // When the SM's SA last answered: a response to one of this client's
    // requests, or a Report, from the SM's LID. Evidence that the SM is
    // alive where its sweeps leave this port alone (OpenSM's light sweeps
    // do not read CA ports).
    std::optional<Clock::time_point> last_answer() const { return last_answer_; }

private:
    struct Transaction {
        SaMad request;
        SaCallback callback;
        bool sent = false;
        unsigned tries = 0;
        std::chrono::milliseconds timeout{};
        Clock::time_point deadline{};
        std::optional<RmppReassembler> rmpp;
    };

    void send(Transaction& t, Clock::time_point now);
    void start_queued(Clock::time_point now);
    void finish(std::uint32_t key, const expected<SaResult, SaFailure>& result);
    void cancel(std::uint32_t key);

    Config config_;
    std::map<std::uint32_t, Transaction> transactions_;  // by TID low 32 bits
    std::deque<std::uint32_t> queued_;
    std::size_t in_flight_ = 0;
    // The time of the last call that had one: a cancel() that frees a slot
    // sends the next queued request as of then.
    Clock::time_point last_now_{};
    std::uint32_t next_key_ = 1;
    std::uint16_t sm_lid_ = 0;
    std::vector<SaMad> outbound_;
    ReportHandler report_handler_;
    std::deque<std::uint64_t> recent_reports_;  // TIDs of the last Reports seen, to spot resends
    std::optional<Clock::time_point> last_answer_;
    SaClientCounters counters_;
};

}  // namespace ipoibd::sa
