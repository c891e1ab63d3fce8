// The CM engine (cm/cm_engine.h) with a fake clock: two engines, the MADs
// between them carried (or lost) by the test.
#include <gtest/gtest.h>

#include <functional>
#include <set>

#include "cm/cm_engine.h"

namespace ipoibd::cm {
namespace {

using namespace std::chrono_literals;

constexpr std::uint64_t kGuidA = 0x0002C90300000A0AULL, kGuidB = 0x0002C90300000B0BULL;
constexpr std::uint64_t kService = 0x1000000000000048ULL;

struct Pair : ::testing::Test {
    CmEngine a{{.local_ca_guid = kGuidA, .max_connections = 8}, 1};
    CmEngine b{{.local_ca_guid = kGuidB, .max_connections = 8}, 2};
    const Address at_a{.lid = 1}, at_b{.lid = 2};
    Clock::time_point now = Clock::time_point{} + 1h;
    std::vector<Event> ev_a, ev_b;
    std::vector<Message> seen;  // every MAD carried, in order
    // Return false to lose a MAD.
    std::function<bool(const Message&, bool from_a)> carry = [](const Message&, bool) { return true; };

    ConnectParams params(std::uint32_t qpn = 0x101) const {
        ConnectParams p{.peer = at_b, .service_id = kService, .local_qpn = qpn, .starting_psn = 0x1111,
                        .retry_count = 0, .rnr_retry_count = 0};
        p.primary = {.local_lid = 1, .remote_lid = 2, .sl = 0, .local_ack_timeout = 18};
        write_ipoib_data(p.private_data, {.ud_qpn = 0x44, .receive_size = 65524});
        return p;
    }
    // B listens, A connects, B accepts, and the REP reaches A: A's and B's
    // IDs, or nullopt (the failure reported).
    std::optional<std::pair<ConnectionId, ConnectionId>> accepted() {
        b.listen(kService);
        const auto id = a.connect(params(), now);
        EXPECT_TRUE(id);
        run();
        EXPECT_EQ(ev_b.size(), 1u);
        if (!id || ev_b.empty()) return std::nullopt;
        const ConnectionId bid = ev_b[0].id;
        const bool ok = b.accept(bid, {.local_qpn = 0x202}, now).has_value();
        EXPECT_TRUE(ok);
        if (!ok) return std::nullopt;
        run();
        return std::pair{*id, bid};
    }
    // Moves MADs until nothing moves; then, if `timers`, time to the next
    // deadline, until quiet or `limit`.
    void run(bool timers = false, Clock::duration limit = 10min) {
        const auto end = now + limit;
        for (int guard = 0; guard < 100000; ++guard) {
            bool moved = false;
            for (bool from_a : {true, false}) {
                CmEngine& src = from_a ? a : b;
                CmEngine& dst = from_a ? b : a;
                for (const Outgoing& o : src.take_output()) {
                    const auto d = decode(o.mad);
                    EXPECT_TRUE(d);
                    if (!d) continue;
                    seen.push_back(d->message);
                    EXPECT_EQ(o.to, from_a ? at_b : at_a) << name_of(d->message) << " addressed elsewhere";
                    moved = true;
                    if (carry(d->message, from_a)) dst.receive(o.mad, from_a ? at_a : at_b, now);
                }
            }
            for (auto& e : a.take_events()) ev_a.push_back(e);
            for (auto& e : b.take_events()) ev_b.push_back(e);
            if (moved) continue;
            if (!timers) return;
            std::optional<Clock::time_point> next = a.next_deadline();
            if (const auto nb = b.next_deadline(); nb && (!next || *nb < *next)) next = nb;
            if (!next || *next > end) return;
            now = *next;
            a.tick(now);
            b.tick(now);
        }
    }
    std::size_t count(const char* name) const {
        return static_cast<std::size_t>(std::count_if(seen.begin(), seen.end(), [&](const Message& m) {
            return std::string(name_of(m)) == name;
        }));
    }
    static std::vector<EventKind> kinds(const std::vector<Event>& ev) {
        std::vector<EventKind> k;
        for (const Event& e : ev) k.push_back(e.kind);
        return k;
    }
    // A through to ESTABLISHED on both sides; returns (A's id, B's id).
    std::pair<ConnectionId, ConnectionId> connect_pair() {
        b.listen(kService);
        auto id = a.connect(params(), now);
        EXPECT_TRUE(id);
        run();
        EXPECT_EQ(kinds(ev_b), std::vector{EventKind::req_received});
        const ConnectionId bid = ev_b.back().id;
        EXPECT_TRUE(b.accept(bid, {.local_qpn = 0x202, .starting_psn = 0x2222}, now));
        run();
        EXPECT_EQ(kinds(ev_a), std::vector{EventKind::rep_received});
        EXPECT_TRUE(a.establish(*id, now));
        run();
        EXPECT_EQ(kinds(ev_b), (std::vector{EventKind::req_received, EventKind::established}));
        return {*id, bid};
    }
};

TEST_F(Pair, ConnectAcceptEstablishThenDisconnectThroughTimeWait) {
    const auto [ida, idb] = connect_pair();
    // What each side learnt of the other.
    const Req& req = *ev_b[0].req;
    EXPECT_EQ(req.service_id, kService);
    EXPECT_EQ(req.local_qpn, 0x101u);
    EXPECT_EQ(req.starting_psn, 0x1111u);
    EXPECT_EQ(req.local_ca_guid, kGuidA);
    EXPECT_EQ(req.local_comm_id, ida);
    EXPECT_EQ(read_ipoib_data(req.private_data).receive_size, 65524u);
    const Rep& rep = *ev_a[0].rep;
    EXPECT_EQ(rep.local_qpn, 0x202u);
    EXPECT_EQ(rep.starting_psn, 0x2222u);
    EXPECT_EQ(rep.remote_comm_id, ida);
    EXPECT_EQ(rep.local_comm_id, idb);
    EXPECT_EQ(a.state(ida), State::established);
    EXPECT_EQ(b.state(idb), State::established);
    EXPECT_EQ(count("REQ"), 1u);
    EXPECT_EQ(count("REP"), 1u);
    EXPECT_EQ(count("RTU"), 1u);
    // B takes it down: DREQ, DREP at once, both in TimeWait, then gone.
    ASSERT_TRUE(b.disconnect(idb, now));
    run();
    EXPECT_EQ(ev_a.back().kind, EventKind::disconnect_requested);
    EXPECT_EQ(a.state(ida), State::timewait);
    EXPECT_EQ(b.state(idb), State::timewait);
    const auto dreq = std::find_if(seen.begin(), seen.end(), [](const Message& m) { return m.index() == 5; });
    ASSERT_NE(dreq, seen.end());
    EXPECT_EQ(std::get<Dreq>(*dreq).remote_qpn, 0x101u) << "the DREQ names the receiver's QP";
    run(true);
    EXPECT_EQ(ev_a.back().kind, EventKind::timewait_exit);
    EXPECT_EQ(ev_b.back().kind, EventKind::timewait_exit);
    EXPECT_EQ(a.connections(), 0u);
    EXPECT_EQ(b.connections(), 0u);
    EXPECT_EQ(a.counters().established + b.counters().established, 2u);
}

TEST_F(Pair, AnUnknownServiceIdIsRejectedWithReason8) {
    auto id = a.connect(params(), now);
    ASSERT_TRUE(id);
    run();
    ASSERT_EQ(kinds(ev_a), std::vector{EventKind::rejected});
    EXPECT_EQ(ev_a[0].reason, rej::invalid_service_id);
    EXPECT_EQ(a.connections(), 0u);
    EXPECT_EQ(b.connections(), 0u);
    EXPECT_EQ(b.counters().unknown_service, 1u);
}

TEST_F(Pair, ALostReqIsSentAgainWithTheSameIdsThenTimesOut) {
    b.listen(kService);
    carry = [](const Message&, bool) { return false; };  // nothing arrives
    auto id = a.connect(params(), now);
    ASSERT_TRUE(id);
    const auto start = now;
    run(true);
    // 1 + max CM retries (15) REQs, all the same; then the timeout, and a
    // REJ "timeout" naming our CA GUID.
    EXPECT_EQ(count("REQ"), 16u);
    for (const Message& m : seen)
        if (m.index() == 0) {
            EXPECT_EQ(std::get<Req>(m).local_comm_id, *id);
        }
    ASSERT_EQ(kinds(ev_a), std::vector{EventKind::timed_out});
    ASSERT_EQ(count("REJ"), 1u);
    const Rej& r = std::get<Rej>(seen.back());
    EXPECT_EQ(r.reason, rej::timeout);
    EXPECT_EQ(load_be64(r.ari.data()), kGuidA);
    // Each wait 2 x PacketLifeTime (16) + the CM response timeout (20).
    const auto each = 2 * cm_timeout(16) + cm_timeout(20);
    EXPECT_EQ(now - start, 16 * each);
    EXPECT_EQ(a.counters().retransmitted, 15u);
    EXPECT_EQ(a.connections(), 0u);
}

TEST_F(Pair, ADuplicateReqBeforeTheAnswerIsDropped) {
    b.listen(kService);
    auto id = a.connect(params(), now);
    ASSERT_TRUE(id);
    const auto req = a.take_output();
    ASSERT_EQ(req.size(), 1u);
    b.receive(req[0].mad, at_a, now);
    ASSERT_EQ(b.take_events().size(), 1u);
    // Before B answers: the retransmitted REQ is a duplicate, dropped.
    b.receive(req[0].mad, at_a, now);
    EXPECT_TRUE(b.take_output().empty());
    EXPECT_TRUE(b.take_events().empty());
    EXPECT_EQ(b.counters().duplicate_reqs, 1u);
    EXPECT_EQ(b.connections(), 1u);
}

TEST_F(Pair, ALostRepIsSentAgainAndADuplicateReqGetsTheSameRep) {
    b.listen(kService);
    int reps = 0;
    carry = [&](const Message& m, bool) { return !(m.index() == 3 && reps++ == 0); };  // the first REP is lost
    auto id = a.connect(params(), now);
    ASSERT_TRUE(id);
    run();
    ASSERT_EQ(ev_b.size(), 1u);
    const Req req = *ev_b[0].req;
    ASSERT_TRUE(b.accept(ev_b[0].id, {.local_qpn = 0x202}, now));
    run();  // the REP is lost
    // A's REQ again (as its timer would send it): B answers with the same REP.
    b.receive(encode(req, (std::uint64_t{0} << 32) | req.local_comm_id), at_a, now);
    EXPECT_EQ(b.counters().duplicate_reqs, 1u);
    EXPECT_EQ(b.connections(), 1u) << "no second connection for the duplicate";
    run();
    EXPECT_EQ(count("REP"), 2u);
    ASSERT_EQ(kinds(ev_a), std::vector{EventKind::rep_received});
    ASSERT_TRUE(a.establish(*id, now));
    run();
    EXPECT_EQ(b.state(ev_b[0].id), State::established);
}

TEST_F(Pair, TheRepWaitAPeerAsksIsAtLeastIbCmsMillisecondAndAtMost24) {
    b.listen(kService);
    // REQs from a port that never answers our REPs, asking us to resend
    // them after 0 (4 us), 31 (~2.4 h) and 20 (~4.3 s, Linux's).
    const Address at_peer{.lid = 9};
    std::uint32_t qpn = 0x500;
    for (const std::uint8_t asked : std::array<std::uint8_t, 3>{0, 31, 20}) {
        Req r{.local_comm_id = 0x7000u + asked, .service_id = kService, .local_ca_guid = 0x9999, .local_qpn = ++qpn,
              .local_cm_response_timeout = asked, .path_mtu = 4, .max_cm_retries = 15};
        r.primary = {.local_lid = 9};
        b.receive(encode(r, asked), at_peer, now);
        const auto ev = b.take_events();
        ASSERT_EQ(ev.size(), 1u);
        ASSERT_TRUE(b.accept(ev[0].id, {.local_qpn = 0x600}, now));
        (void)b.take_output();
        const auto start = now;
        std::vector<Clock::duration> waits;
        for (int guard = 0; guard < 100 && b.state(ev[0].id) == State::rep_sent; ++guard) {
            const auto next = b.next_deadline();
            ASSERT_TRUE(next);
            waits.push_back(*next - now);
            now = *next;
            b.tick(now);
            (void)b.take_output();
            (void)b.take_events();
        }
        ASSERT_EQ(waits.size(), 16u) << "the REP, 15 more, then the timeout";
        const auto expected = asked == 0 ? cm_timeout(8) : asked == 31 ? cm_timeout(24) : cm_timeout(20);
        for (const auto& w : waits) EXPECT_EQ(w, expected) << "asked " << int{asked};
        EXPECT_EQ(now - start, 16 * expected);
        run(true);  // its TimeWait
        ASSERT_FALSE(b.state(ev[0].id));
    }
    EXPECT_EQ(b.counters().retransmitted, 3 * 15u);
}

TEST_F(Pair, ARejTimeoutFromAReqsSenderEndsTheConnectionItsRepNeverReached) {
    b.listen(kService);
    carry = [](const Message& m, bool) { return m.index() != 3; };  // every REP lost
    auto id = a.connect(params(), now);
    ASSERT_TRUE(id);
    run();
    ASSERT_EQ(kinds(ev_b), std::vector{EventKind::req_received});
    const ConnectionId bid = ev_b[0].id;
    ASSERT_TRUE(b.accept(bid, {.local_qpn = 0x202}, now));
    run();
    // Someone else's REJ "timeout" with A's comm ID: another CA GUID, no match.
    Rej forged{.local_comm_id = *id, .message_rejected = MessageKind::req, .reject_info_length = 8,
               .reason = rej::timeout};
    store_be64(forged.ari.data(), 0x0002C90300000C0CULL);
    b.receive(encode(forged, 1), at_a, now);
    EXPECT_EQ(b.state(bid), State::rep_sent);
    EXPECT_EQ(b.counters().unmatched, 1u);
    // A gives up before any REP came: REJ "timeout", Remote Comm ID 0 (it
    // never learnt B's), A's CA GUID as ARI. B matches it by A's comm ID and
    // that GUID (IBA 12.6.7, ib_cm's cm_acquire_rejected_id).
    ASSERT_TRUE(a.disconnect(*id, now));
    run();
    const Rej& r = std::get<Rej>(seen.back());
    ASSERT_EQ(r.reason, rej::timeout);
    EXPECT_EQ(r.remote_comm_id, 0u);
    ASSERT_EQ(kinds(ev_b), (std::vector{EventKind::req_received, EventKind::rejected}));
    EXPECT_EQ(ev_b.back().id, bid);
    EXPECT_EQ(ev_b.back().reason, rej::timeout);
    EXPECT_EQ(b.state(bid), State::timewait);
    EXPECT_EQ(b.counters().unmatched, 1u);
    // No REP is sent again: B waits for no RTU.
    run(true);
    EXPECT_EQ(count("REP"), 1u);
    EXPECT_EQ(b.counters().retransmitted, 0u);
    EXPECT_EQ(b.connections(), 0u);
}

TEST_F(Pair, TheRepForADuplicateReqIsCountedAsDroppedWhenTheOutputIsFull) {
    CmEngine full({.local_ca_guid = kGuidB, .max_output = 1}, 3);
    full.listen(kService);
    ASSERT_TRUE(a.connect(params(), now));
    const auto req = a.take_output();
    ASSERT_EQ(req.size(), 1u);
    full.receive(req[0].mad, at_a, now);
    const auto ev = full.take_events();
    ASSERT_EQ(ev.size(), 1u);
    ASSERT_TRUE(full.accept(ev[0].id, {.local_qpn = 0x202}, now));  // the output holds its one MAD
    full.receive(req[0].mad, at_a, now);  // a duplicate: its REP finds no room
    EXPECT_EQ(full.counters().duplicate_reqs, 1u);
    EXPECT_EQ(full.take_output().size(), 1u);
    EXPECT_EQ(full.counters().sent[Message(Rep{}).index()], 1u);
    EXPECT_EQ(full.counters().output_dropped, 1u);
    full.receive(req[0].mad, at_a, now);  // room now: the REP again
    EXPECT_EQ(full.take_output().size(), 1u);
    EXPECT_EQ(full.counters().sent[Message(Rep{}).index()], 2u);
    EXPECT_EQ(full.counters().output_dropped, 1u);
}

TEST_F(Pair, AReqTheOwnerNeverAnswersIsRejectedWithTimeoutOnceItsSenderGaveUp) {
    b.listen(kService);
    // A port whose REQ (Linux's timeouts: 20, 15 retries) reaches B; its
    // req_received goes unanswered (dropped, or the owner is stuck), and
    // the sender's own REJ "timeout" never comes.
    const Address at_peer{.lid = 9};
    Req r{.local_comm_id = 0x7001, .service_id = kService, .local_ca_guid = 0x9999, .local_qpn = 0x501,
          .remote_cm_response_timeout = 20, .local_cm_response_timeout = 20, .path_mtu = 4, .max_cm_retries = 15};
    r.primary = {.local_lid = 9};
    b.receive(encode(r, 1), at_peer, now);
    const auto ev = b.take_events();
    ASSERT_EQ(ev.size(), 1u);
    const ConnectionId bid = ev[0].id;
    ASSERT_EQ(b.state(bid), State::req_rcvd);
    // It waits as long as the sender does: 16 sends, each 2 x
    // PacketLifeTime + the 20 it gives us.
    const auto wait = 16 * (2 * cm_timeout(16) + cm_timeout(20));
    ASSERT_EQ(b.next_deadline(), now + wait);
    b.tick(now + wait - 1ns);
    EXPECT_EQ(b.state(bid), State::req_rcvd);
    b.tick(now + wait);
    EXPECT_FALSE(b.state(bid));
    EXPECT_EQ(b.connections(), 0u);
    EXPECT_EQ(b.counters().unanswered, 1u);
    const auto out = b.take_output();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].to, at_peer);
    const Rej rej_msg = std::get<Rej>(decode(out[0].mad)->message);
    EXPECT_EQ(rej_msg.reason, rej::timeout);
    EXPECT_EQ(rej_msg.message_rejected, MessageKind::req);
    EXPECT_EQ(rej_msg.remote_comm_id, 0x7001u);
    EXPECT_EQ(load_be64(rej_msg.ari.data()), kGuidB);
    const auto after = b.take_events();
    ASSERT_EQ(after.size(), 1u);
    EXPECT_EQ(after[0].kind, EventKind::timed_out);
    EXPECT_EQ(after[0].id, bid);
    // accept() in time stops that clock: the REP's own takes over.
    r.local_comm_id = 0x7002;
    r.local_qpn = 0x502;
    b.receive(encode(r, 2), at_peer, now);
    const auto second = b.take_events();
    ASSERT_EQ(second.size(), 1u);
    ASSERT_TRUE(b.accept(second[0].id, {.local_qpn = 0x602}, now));
    EXPECT_EQ(b.next_deadline(), now + cm_timeout(20));
}

// The sender's PacketLifeTime is its own (ib_cm takes it from its path
// record and puts one more in the REQ's Local ACK Timeout): with a longer
// one than ours it is still retrying after our own figure has run out, and a
// REQ_RCVD given up then would meet its next retry as a new REQ.
TEST_F(Pair, AnUnansweredReqWaitsForASenderWithALongerPacketLifeTime) {
    b.listen(kService);
    const Address at_peer{.lid = 9};
    Req r{.local_comm_id = 0x7101, .service_id = kService, .local_ca_guid = 0x9999, .local_qpn = 0x501,
          .remote_cm_response_timeout = 20, .local_cm_response_timeout = 20, .path_mtu = 4, .max_cm_retries = 15};
    r.primary = {.local_lid = 9, .local_ack_timeout = 21};  // PacketLifeTime 20, ours 16
    b.receive(encode(r, 1), at_peer, now);
    ASSERT_EQ(b.take_events().size(), 1u);
    EXPECT_EQ(b.next_deadline(), now + 16 * (2 * cm_timeout(20) + cm_timeout(20)));
    // A shorter one: ours.
    r.local_comm_id = 0x7102;
    r.local_qpn = 0x502;
    r.primary.local_ack_timeout = 10;
    CmEngine other{{.local_ca_guid = kGuidB, .max_connections = 8}, 3};
    other.listen(kService);
    other.receive(encode(r, 2), at_peer, now);
    EXPECT_EQ(other.next_deadline(), now + 16 * (2 * cm_timeout(16) + cm_timeout(20)));
}

TEST_F(Pair, ARepTheOwnerNeverAnswersIsRejectedWithTimeoutOnceItsSenderGaveUp) {
    const auto ids = accepted();
    ASSERT_TRUE(ids);
    const auto [id, bid] = *ids;
    ASSERT_EQ(kinds(ev_a), std::vector{EventKind::rep_received});
    // A's owner never calls establish() (its event lost); B has gone
    // quiet (none of its REPs or its REJ "timeout" arrive). A waits as long
    // as B would resend its REP: our 20, our 15 retries.
    const auto start = now;
    const auto wait = 16 * (2 * cm_timeout(16) + cm_timeout(20));
    ASSERT_EQ(a.next_deadline(), now + wait);
    now = *a.next_deadline();
    a.tick(now);
    EXPECT_FALSE(a.state(id));
    EXPECT_EQ(a.counters().unanswered, 1u);
    ASSERT_EQ(a.take_events().size(), 1u);
    const auto out = a.take_output();
    ASSERT_EQ(out.size(), 1u);
    const Rej rej_msg = std::get<Rej>(decode(out[0].mad)->message);
    EXPECT_EQ(rej_msg.reason, rej::timeout);
    EXPECT_EQ(rej_msg.message_rejected, MessageKind::rep);
    EXPECT_EQ(rej_msg.remote_comm_id, bid);
    // Had B still been waiting, the REJ would have ended its REP_SENT.
    b.receive(out[0].mad, at_a, start);
    EXPECT_EQ(b.state(bid), State::timewait);
}

TEST_F(Pair, AnMraStretchesTheWait) {
    b.listen(kService);
    auto id = a.connect(params(), now);
    run();
    const auto before = a.next_deadline();
    // B's consumer is slow: an MRA for the REQ with a service timeout of 24 (~69 s).
    const Req& req = *ev_b[0].req;
    a.receive(encode(Mra{.local_comm_id = ev_b[0].id, .remote_comm_id = req.local_comm_id,
                         .message_mraed = MessageKind::req, .service_timeout = 24},
                     0),
              at_b, now);
    ASSERT_TRUE(a.next_deadline() && before);
    EXPECT_GT(*a.next_deadline(), *before);
    EXPECT_EQ(*a.next_deadline(), now + cm_timeout(24) + 2 * cm_timeout(16));
    EXPECT_EQ(a.state(*id), State::req_sent);
}

TEST_F(Pair, APeerCannotHoldAReqForADayWithMras) {
    b.listen(kService);
    auto id = a.connect(params(), now);
    ASSERT_TRUE(id);
    run();  // B has the REQ; its consumer never answers
    const ConnectionId bid = ev_b[0].id;
    // B answers every wait with an MRA asking for the longest service
    // timeout there is (31: ~2.4 h).
    const Mra mra{.local_comm_id = bid, .remote_comm_id = *id, .message_mraed = MessageKind::req,
                  .service_timeout = 31};
    const auto start = now;
    int mras = 0;
    for (; mras < 100 && a.state(*id); ++mras) {
        a.receive(encode(mra, 0), at_b, now);
        const auto next = a.next_deadline();
        ASSERT_TRUE(next);
        now = *next;
        a.tick(now);
        (void)a.take_output();
    }
    EXPECT_FALSE(a.state(*id)) << "still in " << to_string(*a.state(*id)) << " after " << mras << " MRAs";
    // The first MRA stretches one wait, at most to Linux's service timeout
    // (24, ~69 s); then the REQ's retries run out as without it.
    const auto request_wait = 2 * cm_timeout(16) + cm_timeout(20);
    EXPECT_LE(now - start, cm_timeout(24) + 2 * cm_timeout(16) + 15 * request_wait);
    EXPECT_EQ(a.counters().duplicate_mras, static_cast<std::uint64_t>(mras - 1));
    EXPECT_EQ(a.counters().timeouts, 1u);
}

TEST_F(Pair, ARejOrMraIsMatchedByBothCommIdsOnceThePeerHasNamedItsOwn) {
    const auto ids = accepted();
    ASSERT_TRUE(ids);
    const auto [id, bid] = *ids;
    ASSERT_EQ(b.state(bid), State::rep_sent);
    // An MRA for B's REP naming B's comm ID but not A's: the wait stays.
    const auto before = b.next_deadline();
    b.receive(encode(Mra{.local_comm_id = id ^ 1, .remote_comm_id = bid, .message_mraed = MessageKind::rep,
                         .service_timeout = 24},
                     1),
              at_a, now);
    EXPECT_EQ(b.next_deadline(), before);
    EXPECT_EQ(b.counters().unmatched, 1u);
    b.receive(encode(Mra{.local_comm_id = id, .remote_comm_id = bid, .message_mraed = MessageKind::rep,
                         .service_timeout = 24},
                     1),
              at_a, now);
    EXPECT_EQ(b.next_deadline(), now + cm_timeout(24) + 2 * cm_timeout(16));
    ASSERT_TRUE(a.establish(id, now));
    run();
    ASSERT_EQ(a.state(id), State::established);
    // REJs naming A's comm ID but not B's (another sender's, or a forgery):
    // the connection stays.
    for (const MessageKind what : {MessageKind::other, MessageKind::rep, MessageKind::req})
        a.receive(encode(Rej{.local_comm_id = bid ^ 1, .remote_comm_id = id, .message_rejected = what,
                             .reason = rej::consumer_reject},
                         2),
                  Address{.lid = 9}, now);
    EXPECT_EQ(a.state(id), State::established);
    EXPECT_EQ(a.counters().unmatched, 3u);
    EXPECT_TRUE(ev_a.size() == 1 && a.take_events().empty());
    // B's own REJ names both.
    a.receive(encode(Rej{.local_comm_id = bid, .remote_comm_id = id, .message_rejected = MessageKind::other,
                         .reason = rej::consumer_reject},
                     3),
              at_b, now);
    EXPECT_EQ(a.state(id), State::timewait);
    ASSERT_EQ(a.take_events().size(), 1u);
}

TEST_F(Pair, AReqFromAQpWithALiveConnectionIsStale) {
    const auto [ida, idb] = connect_pair();
    // A restarts without tearing down: the same CA GUID and QPN, a new comm ID.
    CmEngine a2({.local_ca_guid = kGuidA}, 99);
    ASSERT_TRUE(a2.connect(params(0x101), now));
    for (const Outgoing& o : a2.take_output()) b.receive(o.mad, at_a, now);
    const auto out = b.take_output();
    ASSERT_EQ(out.size(), 2u);
    const auto rej_msg = decode(out[0].mad);
    ASSERT_TRUE(rej_msg);
    EXPECT_EQ(std::get<Rej>(rej_msg->message).reason, rej::stale_connection);
    const auto dreq = decode(out[1].mad);
    ASSERT_TRUE(dreq);
    EXPECT_EQ(std::get<Dreq>(dreq->message).local_comm_id, idb) << "and a DREQ on the old connection";
    EXPECT_EQ(b.counters().stale_reqs, 1u);
    EXPECT_EQ(b.state(idb), State::dreq_sent);
    (void)ida;
}

TEST_F(Pair, AStaleReqFromAnotherPortIsRejectedButEndsNoConnection) {
    const auto [ida, idb] = connect_pair();
    // A port at LID 9 names A's CA GUID and QP to B (a passive connection
    // there), and B's to A (an active one): a forgery, or a peer that moved.
    const Address at_forger{.lid = 9};
    auto forged = [](std::uint32_t comm_id, std::uint64_t guid, std::uint32_t qpn) {
        Req r{.local_comm_id = comm_id, .service_id = kService, .local_ca_guid = guid, .local_qpn = qpn, .path_mtu = 4};
        r.primary = {.local_lid = 9, .remote_lid = 2};
        return encode(r, 7);
    };
    b.receive(forged(0x5150, kGuidA, 0x101), at_forger, now);
    a.receive(forged(0x5151, kGuidB, 0x202), at_forger, now);
    for (CmEngine* e : {&a, &b}) {
        const auto out = e->take_output();
        ASSERT_EQ(out.size(), 1u) << "a REJ to the sender, no DREQ on the connection";
        EXPECT_EQ(out[0].to, at_forger);
        const auto rej_msg = decode(out[0].mad);
        ASSERT_TRUE(rej_msg);
        EXPECT_EQ(std::get<Rej>(rej_msg->message).reason, rej::stale_connection);
        EXPECT_EQ(e->counters().stale_reqs_elsewhere, 1u);
        EXPECT_EQ(e->counters().stale_reqs, 0u);
        EXPECT_TRUE(e->take_events().empty());
    }
    EXPECT_EQ(a.state(ida), State::established);
    EXPECT_EQ(b.state(idb), State::established);
}

TEST(CmIds, SuccessiveIdsFollowNoStrideAndOweNothingToTheSeed) {
    // Engines from the same seed (the daemon's is 32 bits of random_device
    // XOR the port GUID, which the SA publishes), and from another.
    const CmEngine::Config config{.local_ca_guid = kGuidA, .max_connections = 64};
    CmEngine x(config, 7), y(config, 7), z(config, 8);
    std::vector<ConnectionId> ids_x, ids_y, ids_z;
    const Clock::time_point now = Clock::time_point{} + 1h;
    for (std::uint32_t i = 0; i < 64; ++i) {
        const ConnectParams p{.peer = {.lid = 2}, .service_id = kService, .local_qpn = 0x100 + i};
        for (auto [e, ids] : {std::pair{&x, &ids_x}, std::pair{&y, &ids_y}, std::pair{&z, &ids_z}}) {
            auto id = e->connect(p, now);
            ASSERT_TRUE(id);
            ids->push_back(*id);
        }
    }
    EXPECT_EQ(std::count(ids_x.begin(), ids_x.end(), 0u), 0);
    EXPECT_EQ(std::set<ConnectionId>(ids_x.begin(), ids_x.end()).size(), ids_x.size());
    EXPECT_NE(ids_x, ids_y) << "the same seed, the same IDs";
    // No pattern one engine's IDs share with another's: neither a step
    // (arithmetic) nor an XOR distance from the first.
    std::vector<ConnectionId> step_x, step_z, xor_x, xor_z;
    for (std::size_t i = 1; i < ids_x.size(); ++i) {
        step_x.push_back(ids_x[i] - ids_x[i - 1]);
        step_z.push_back(ids_z[i] - ids_z[i - 1]);
        xor_x.push_back(ids_x[i] ^ ids_x[0]);
        xor_z.push_back(ids_z[i] ^ ids_z[0]);
    }
    EXPECT_GT(std::set<ConnectionId>(step_x.begin(), step_x.end()).size(), 1u) << "a constant stride";
    EXPECT_NE(step_x, step_z);
    EXPECT_NE(xor_x, xor_z) << "IDs a fixed sequence XOR a per-engine secret";
}

// The IDs an observer who learnt `seen` (an ID of the same engine, handed
// out just before) would try next: its numeric neighbours, and the next one
// of a multiplicative sequence XORed with one secret (our old allocator's
// shape, and ib_cm's index XOR random) for each place `seen` may have had
// in it.
std::vector<ConnectionId> guesses_after(ConnectionId seen) {
    std::vector<ConnectionId> g{seen + 1, seen - 1, seen ^ 1};
    for (std::uint32_t k = 1; k <= 16; ++k) {
        g.push_back(seen ^ (k * 0x9E3779B1u) ^ ((k + 1) * 0x9E3779B1u));
        g.push_back(seen ^ k ^ (k + 1));
    }
    return g;
}

TEST_F(Pair, AForgedRejOrDreqWithGuessedNeighbouringCommIdsEndsNothing) {
    const Address at_forger{.lid = 9};
    b.listen(kService);
    // The forger learns one comm ID of each engine from its own connection:
    // A connects to it (A's REQ), and it connects to B (B's REP).
    auto to_forger = params();
    to_forger.peer = at_forger;
    auto own = a.connect(to_forger, now);
    ASSERT_TRUE(own);
    const auto req_to_forger = a.take_output();
    ASSERT_EQ(req_to_forger.size(), 1u);
    const ConnectionId seen_a = std::get<Req>(decode(req_to_forger[0].mad)->message).local_comm_id;
    Req forger_req{.local_comm_id = 0x5150, .service_id = kService, .local_ca_guid = 0x0002C90300000C0CULL,
                   .local_qpn = 0x909, .path_mtu = 4};
    forger_req.primary = {.local_lid = 9};
    b.receive(encode(forger_req, 1), at_forger, now);
    const auto forger_ev = b.take_events();
    ASSERT_EQ(forger_ev.size(), 1u);
    ASSERT_TRUE(b.accept(forger_ev[0].id, {.local_qpn = 0x808}, now));
    const auto rep_to_forger = b.take_output();
    ASSERT_EQ(rep_to_forger.size(), 1u);
    const ConnectionId seen_b = std::get<Rep>(decode(rep_to_forger[0].mad)->message).local_comm_id;

    // A connects to B; before B's REP, a REJ naming A's comm ID alone ends
    // the REQ (as ib_cm's): the forger tries A's likely next IDs.
    auto id = a.connect(params(), now);
    ASSERT_TRUE(id);
    const auto ga = guesses_after(seen_a), gb = guesses_after(seen_b);
    std::uint64_t forged = 0;
    for (ConnectionId g : ga) {
        a.receive(encode(Rej{.local_comm_id = 0x5151, .remote_comm_id = g, .message_rejected = MessageKind::req,
                             .reason = rej::consumer_reject},
                         2),
                  at_forger, now);
        ++forged;
    }
    EXPECT_EQ(a.state(*id), State::req_sent);
    EXPECT_EQ(a.counters().unmatched, forged);
    EXPECT_TRUE(a.take_events().empty());

    // Established: DREQs and REJs naming guesses of both IDs, with the
    // right QPNs (allocated in order, so as good as known).
    run();
    ASSERT_EQ(kinds(ev_b), std::vector{EventKind::req_received});
    const ConnectionId bid = ev_b[0].id;
    ASSERT_TRUE(b.accept(bid, {.local_qpn = 0x202}, now));
    run();
    ASSERT_TRUE(a.establish(*id, now));
    run();
    ASSERT_EQ(b.state(bid), State::established);
    const std::uint64_t unmatched_a = a.counters().unmatched, unmatched_b = b.counters().unmatched;
    std::uint64_t pairs = 0;
    for (ConnectionId guess_a : ga)
        for (ConnectionId guess_b : gb) {
            b.receive(encode(Dreq{.local_comm_id = guess_a, .remote_comm_id = guess_b, .remote_qpn = 0x202}, 3),
                      at_forger, now);
            a.receive(encode(Dreq{.local_comm_id = guess_b, .remote_comm_id = guess_a, .remote_qpn = 0x101}, 4),
                      at_forger, now);
            b.receive(encode(Rej{.local_comm_id = guess_a, .remote_comm_id = guess_b,
                                 .message_rejected = MessageKind::other, .reason = rej::consumer_reject},
                             5),
                      at_forger, now);
            a.receive(encode(Rej{.local_comm_id = guess_b, .remote_comm_id = guess_a,
                                 .message_rejected = MessageKind::other, .reason = rej::consumer_reject},
                             6),
                      at_forger, now);
            ++pairs;
            (void)a.take_output();
            (void)b.take_output();
        }
    EXPECT_EQ(a.state(*id), State::established);
    EXPECT_EQ(b.state(bid), State::established);
    EXPECT_EQ(a.counters().unmatched - unmatched_a, 2 * pairs);
    EXPECT_EQ(b.counters().unmatched - unmatched_b, 2 * pairs);
    EXPECT_TRUE(a.take_events().empty());
    EXPECT_TRUE(b.take_events().empty());
}

TEST_F(Pair, DreqsAreMatchedByIdsAndQpn) {
    const auto [ida, idb] = connect_pair();
    // The wrong QPN: dropped, silently.
    b.receive(encode(Dreq{.local_comm_id = ida, .remote_comm_id = idb, .remote_qpn = 0x999}, 5), at_a, now);
    EXPECT_TRUE(b.take_output().empty());
    EXPECT_EQ(b.counters().dreq_qpn_mismatch, 1u);
    EXPECT_EQ(b.state(idb), State::established);
    // For no connection at all: a DREP anyway.
    b.receive(encode(Dreq{.local_comm_id = 77, .remote_comm_id = 78, .remote_qpn = 0x202}, 6), at_a, now);
    const auto out = b.take_output();
    ASSERT_EQ(out.size(), 1u);
    const auto drep = decode(out[0].mad);
    ASSERT_TRUE(drep);
    EXPECT_EQ(drep->transaction_id, 6u) << "the DREP reuses the DREQ's TID";
    EXPECT_EQ(std::get<Drep>(drep->message).remote_comm_id, 77u);
}

TEST_F(Pair, ALapGetsAnAprUnsupported) {
    const auto [ida, idb] = connect_pair();
    b.receive(encode(Lap{.local_comm_id = ida, .remote_comm_id = idb}, 9), at_a, now);
    b.receive(encode(Lap{.local_comm_id = 1, .remote_comm_id = 2}, 10), at_a, now);
    const auto out = b.take_output();
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(std::get<Apr>(decode(out[0].mad)->message).ap_status, apr_status::unsupported);
    EXPECT_EQ(std::get<Apr>(decode(out[1].mad)->message).ap_status, apr_status::invalid_comm_id);
}

TEST_F(Pair, ConnectionsAreBoundedAndAFloodOfReqsGetsRejections) {
    b.listen(kService);
    // Ten REQs from ten QPs, nobody answering: 8 connections, then REJ 3.
    std::vector<CmEngine> senders;
    for (std::uint32_t i = 0; i < 10; ++i) {
        CmEngine s({.local_ca_guid = 0x1000 + i}, i);
        ASSERT_TRUE(s.connect(params(0x300 + i), now));
        for (const Outgoing& o : s.take_output()) b.receive(o.mad, at_a, now);
    }
    EXPECT_EQ(b.connections(), 8u);
    EXPECT_EQ(b.counters().no_room, 2u);
    std::size_t rejections = 0;
    for (const Outgoing& o : b.take_output())
        if (auto d = decode(o.mad); d && std::get<Rej>(d->message).reason == rej::no_resources) ++rejections;
    EXPECT_EQ(rejections, 2u);
    EXPECT_EQ(b.take_events().size(), 8u);
}

TEST_F(Pair, OnePortsReqsHoldAtMostMaxPerPortConnections) {
    CmEngine c({.local_ca_guid = kGuidB, .max_connections = 8, .max_per_port = 4}, 3);
    c.listen(kService);
    // A port that opens connection after connection: each is accepted (a
    // consumer's own limits aside, every one of them ends in a DREQ_SENT or
    // TimeWait the CM keeps a while).
    const Address at_flooder{.lid = 9};
    for (std::uint32_t i = 0; i < 8; ++i) {
        Req r{.local_comm_id = 0x7000 + i, .service_id = kService, .local_ca_guid = 0x9999, .local_qpn = 0x500 + i,
              .path_mtu = 4};
        r.primary = {.local_lid = 9};
        c.receive(encode(r, i), at_flooder, now);
        for (const Event& e : c.take_events()) ASSERT_TRUE(c.accept(e.id, {.local_qpn = 0x600 + i}, now));
    }
    (void)c.take_output();
    EXPECT_EQ(c.connections(), 4u);
    EXPECT_EQ(c.counters().port_no_room, 4u);
    // Another port's REQ still finds room.
    ASSERT_TRUE(a.connect(params(), now));
    for (const Outgoing& o : a.take_output()) c.receive(o.mad, at_a, now);
    const auto ev = c.take_events();
    ASSERT_EQ(ev.size(), 1u);
    EXPECT_EQ(ev[0].kind, EventKind::req_received);
    EXPECT_EQ(c.counters().no_room, 0u);
}

TEST_F(Pair, TheConsumerRejectsAndMalformedMadsAreCountedByReason) {
    b.listen(kService);
    ASSERT_TRUE(a.connect(params(), now));
    run();
    ASSERT_TRUE(b.reject(ev_b[0].id, rej::consumer_reject, now));
    run();
    ASSERT_EQ(kinds(ev_a), std::vector{EventKind::rejected});
    EXPECT_EQ(ev_a[0].reason, rej::consumer_reject);
    EXPECT_EQ(b.connections(), 0u);
    auto bad = encode(Rtu{}, 1);
    bad[2] = 1;  // class version 1
    b.receive(bad, at_a, now);
    b.receive(bytes(bad).first(100), at_a, now);
    EXPECT_EQ(b.counters().malformed[static_cast<std::size_t>(DecodeError::bad_class_version)], 1u);
    EXPECT_EQ(b.counters().malformed[static_cast<std::size_t>(DecodeError::too_short)], 1u);
    // An RTU for nothing: counted, no reply.
    b.receive(encode(Rtu{.local_comm_id = 5, .remote_comm_id = 6}, 1), at_a, now);
    EXPECT_EQ(b.counters().unmatched, 1u);
    EXPECT_TRUE(b.take_output().empty());
}

TEST_F(Pair, ALostRtuIsSentAgainForTheDuplicateRep) {
    b.listen(kService);
    bool lost = false;
    carry = [&](const Message& m, bool) { return !(m.index() == 4 && !lost && (lost = true)); };  // the first RTU
    auto id = a.connect(params(), now);
    run();
    ASSERT_TRUE(b.accept(ev_b[0].id, {.local_qpn = 0x202}, now));
    run();
    ASSERT_TRUE(a.establish(*id, now));
    run(true, 10s);  // B's REP timer fires: a duplicate REP, and A sends the RTU again
    EXPECT_EQ(count("REP"), 2u);
    EXPECT_EQ(count("RTU"), 2u);
    EXPECT_EQ(b.state(ev_b[0].id), State::established);
}

}  // namespace
}  // namespace ipoibd::cm
