// The SA client's transaction table with a fake clock: matching, retries
// with backoff, cancellation, bounded queueing, RMPP reassembly.
#include <gtest/gtest.h>

#include "sa_client/sa_client.h"

namespace ipoibd::sa {
namespace {

using namespace std::chrono_literals;

SaMad request(std::uint16_t attribute = sa_attr::mc_member_record, std::uint8_t method = ib::method::get) {
    SaMad m;
    m.header.method = method;
    m.header.attribute_id = attribute;
    return m;
}

std::vector<std::uint8_t> bytes_of(const SaMad& m) {
    std::vector<std::uint8_t> out(SaMad::size);
    m.write_to(out.data());
    return out;
}

// The response to `req`, as an SA sends it; `rewrite_high` mimics
// libumad2sim replacing the top 32 bits of the TID.
SaMad response_to(const SaMad& req, std::uint16_t status = 0, bool rewrite_high = false) {
    SaMad r = req;
    r.header.method = req.header.method == ib::method::set
                          ? ib::method::get_resp
                          : static_cast<std::uint8_t>(req.header.method | ib::method::response_bit);
    r.header.status = status;
    if (rewrite_high) r.header.transaction_id = (0xDEADBEEFULL << 32) | (req.header.transaction_id & 0xFFFFFFFF);
    r.data[0] = 0xAB;
    return r;
}

struct SaClientTest : ::testing::Test {
    Clock::time_point now = Clock::time_point{} + 1h;
    SaClient client{SaClient::Config{.timeout = 100ms, .max_timeout = 300ms, .retries = 3, .max_outstanding = 2, .max_queued = 2}};
    std::vector<expected<SaResult, SaFailure>> results;
    SaCallback record() {
        return [this](const expected<SaResult, SaFailure>& r) { results.push_back(r); };
    }
    // Submits a PathRecord GetTable (kept in `handles`) and returns the
    // header of its answer: GetTableResp, 64-byte records.
    std::vector<SaClient::Handle> handles;
    SaMad table_request() {
        handles.push_back(client.submit(request(sa_attr::path_record, ib::method::get_table), record(), now));
        SaMad resp = response_to(client.take_outbound().at(0));
        resp.attribute_offset = 8;
        return resp;
    }
};

TEST_F(SaClientTest, ResponseMatchedOnLow32BitsOfTid) {
    auto h = client.submit(request(), record(), now);
    auto out = client.take_outbound();
    ASSERT_EQ(out.size(), 1u);
    EXPECT_EQ(out[0].header.transaction_id >> 32, 0x1B0B0000u);
    EXPECT_TRUE(h.pending());
    client.on_mad(bytes_of(response_to(out[0], 0, true)), now);
    ASSERT_EQ(results.size(), 1u);
    ASSERT_TRUE(results[0].has_value());
    EXPECT_EQ(results[0]->status(), 0);
    EXPECT_EQ(results[0]->payload.at(0), 0xAB);
    EXPECT_FALSE(h.pending());
    // A duplicate answer is counted, not delivered again.
    client.on_mad(bytes_of(response_to(out[0])), now);
    EXPECT_EQ(results.size(), 1u);
    EXPECT_EQ(client.counters().unmatched, 1u);
}

// last_answer() (the node's evidence that a quiet SM is alive): a matched
// response from the SM, whatever its status, or a Report; not a forgery,
// a duplicate, nor a response to a request it never sent.
TEST_F(SaClientTest, TheLastAnswerIsTheSmsMatchedResponseOrReport) {
    client.set_sm_lid(1);
    EXPECT_FALSE(client.last_answer().has_value());
    auto h = client.submit(request(sa_attr::class_port_info), record(), now);
    const auto req = client.take_outbound().at(0);
    now += 1s;
    client.on_mad(bytes_of(response_to(req)), now, 7);  // a forgery from LID 7
    SaMad never_asked = response_to(req);
    never_asked.header.transaction_id ^= 0x5555;
    client.on_mad(bytes_of(never_asked), now, 1);
    EXPECT_FALSE(client.last_answer().has_value());
    client.on_mad(bytes_of(response_to(req, sa_status::err_req_invalid)), now, 1);
    EXPECT_EQ(client.last_answer(), now);
    now += 1s;
    client.on_mad(bytes_of(response_to(req)), now, 1);  // a duplicate: unmatched
    EXPECT_EQ(client.last_answer(), now - 1s);
    SaMad report;
    report.header.method = ib::method::report;
    report.header.attribute_id = sa_attr::notice;
    report.header.transaction_id = 0x42;
    client.on_mad(bytes_of(report), now, 1);
    EXPECT_EQ(client.last_answer(), now);
}

TEST_F(SaClientTest, ErrorStatusIsAResultNotAFailure) {
    auto h = client.submit(request(), record(), now);
    auto out = client.take_outbound();
    client.on_mad(bytes_of(response_to(out[0], sa_status::err_req_insufficient_components)), now);
    ASSERT_TRUE(results.at(0).has_value());
    EXPECT_EQ(results[0]->status(), sa_status::err_req_insufficient_components);
}

TEST_F(SaClientTest, RetriesWithTheSameTidThenTimesOut) {
    auto h = client.submit(request(), record(), now);
    const auto first = client.take_outbound().at(0);
    // Deadlines: 100 ms, then 200, 300 (capped), 300.
    const std::chrono::milliseconds waits[] = {100ms, 200ms, 300ms, 300ms};
    for (int i = 0; i < 3; ++i) {
        now += waits[i];
        client.tick(now);
        const auto again = client.take_outbound();
        ASSERT_EQ(again.size(), 1u) << "retry " << i;
        EXPECT_EQ(again[0].header.transaction_id, first.header.transaction_id);
        EXPECT_TRUE(results.empty());
    }
    now += 299ms;
    client.tick(now);
    EXPECT_TRUE(results.empty()) << "not before the last deadline";
    now += 1ms;
    client.tick(now);
    ASSERT_EQ(results.size(), 1u);
    ASSERT_FALSE(results[0].has_value());
    EXPECT_EQ(results[0].error(), SaFailure::timeout);
    EXPECT_EQ(client.counters().retries, 3u);
    EXPECT_EQ(client.counters().sent, 4u);
    EXPECT_FALSE(client.next_deadline().has_value());
}

TEST_F(SaClientTest, DroppingTheHandleCancels) {
    {
        auto h = client.submit(request(), record(), now);
    }
    // Cancelled before it was handed out: it never leaves.
    EXPECT_TRUE(client.take_outbound().empty());
    EXPECT_EQ(client.counters().sent, 0u);
    // Handed out, then cancelled: no retries, and its answer reaches no one.
    std::vector<SaMad> out;
    {
        auto h = client.submit(request(), record(), now);
        out = client.take_outbound();
    }
    ASSERT_EQ(out.size(), 1u);
    now += 1s;
    client.tick(now);
    EXPECT_TRUE(client.take_outbound().empty()) << "no retries of a cancelled request";
    client.on_mad(bytes_of(response_to(out.at(0))), now);
    EXPECT_TRUE(results.empty());
    EXPECT_EQ(client.counters().cancelled, 2u);
    EXPECT_EQ(client.outstanding(), 0u);
}

TEST_F(SaClientTest, BoundedOutstandingAndQueue) {
    auto a = client.submit(request(), record(), now);
    auto b = client.submit(request(), record(), now);
    auto c = client.submit(request(), record(), now);  // queued
    auto d = client.submit(request(), record(), now);  // queued
    auto e = client.submit(request(), record(), now);  // refused
    ASSERT_EQ(results.size(), 1u);
    EXPECT_EQ(results[0].error(), SaFailure::queue_full);
    auto out = client.take_outbound();
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(client.outstanding(), 2u);
    client.on_mad(bytes_of(response_to(out[0])), now);
    const auto next = client.take_outbound();
    ASSERT_EQ(next.size(), 1u) << "the first queued request goes out";
    EXPECT_EQ(next[0].header.transaction_id & 0xFFFFFFFF, 3u);
}

// A request cancelled while in flight gives its slot to the next queued
// one at once (a child interface's leaves, queued behind path queries that
// its stop cancels, went nowhere: nothing else would send them).
TEST_F(SaClientTest, ACancelledRequestsSlotGoesToTheNextQueued) {
    auto a = client.submit(request(), record(), now);
    auto b = client.submit(request(), record(), now);
    auto c = client.submit(request(sa_attr::path_record, ib::method::del), record(), now);  // queued
    ASSERT_EQ(client.take_outbound().size(), 2u);
    a.cancel();
    const auto next = client.take_outbound();
    ASSERT_EQ(next.size(), 1u);
    EXPECT_EQ(next[0].header.method, ib::method::del);
    EXPECT_EQ(client.outstanding(), 2u);
    ASSERT_TRUE(client.next_deadline().has_value());
    EXPECT_EQ(*client.next_deadline(), now + 100ms);
}

TEST_F(SaClientTest, CallbackMaySubmitAgain) {
    SaClient::Handle second;
    auto first = client.submit(request(), [&](const expected<SaResult, SaFailure>&) {
        second = client.submit(request(sa_attr::path_record), record(), now);
    }, now);
    auto out = client.take_outbound();
    client.on_mad(bytes_of(response_to(out.at(0))), now);
    const auto next = client.take_outbound();
    ASSERT_EQ(next.size(), 1u);
    EXPECT_EQ(next[0].header.attribute_id, sa_attr::path_record);
}

TEST_F(SaClientTest, GetTableWithRmppIsReassembledAndAcked) {
    auto h = client.submit(request(sa_attr::path_record, ib::method::get_table), record(), now);
    const auto req = client.take_outbound().at(0);
    // 600 bytes of records: three 200-byte segments.
    std::vector<std::uint8_t> payload(600);
    for (std::size_t i = 0; i < payload.size(); ++i) payload[i] = static_cast<std::uint8_t>(i);
    SaMad resp = response_to(req);
    resp.header.method = ib::method::get_table_resp;
    resp.attribute_offset = 8;  // 64-byte PathRecords
    const auto segments = rmpp_segments(resp, payload);
    ASSERT_EQ(segments.size(), 3u);
    for (const SaMad& s : segments) client.on_mad(bytes_of(s), now);
    ASSERT_EQ(results.size(), 1u);
    ASSERT_TRUE(results[0].has_value());
    EXPECT_EQ(results[0]->payload, payload);
    EXPECT_EQ(results[0]->header.attribute_offset, 8);
    const auto acks = client.take_outbound();
    ASSERT_FALSE(acks.empty());
    for (const SaMad& a : acks) EXPECT_EQ(a.rmpp.rmpp_type, rmpp_type::ack);
}

// A gap (a lost segment) aborts the transfer and asks again, within the
// request's retries; the aborted transfer's stragglers are dropped; once
// the retries are spent the request fails.
TEST_F(SaClientTest, ABrokenRmppTransferIsAbortedAndTheRequestAskedAgain) {
    std::vector<std::uint8_t> payload(600, 1);
    const SaMad resp = table_request();
    const auto segments = rmpp_segments(resp, payload);
    client.on_mad(bytes_of(segments[0]), now);
    client.take_outbound();
    client.on_mad(bytes_of(segments[2]), now);  // segment 2 lost
    EXPECT_TRUE(results.empty());
    EXPECT_EQ(client.counters().malformed, 1u);
    auto out = client.take_outbound();
    ASSERT_EQ(out.size(), 2u);
    EXPECT_EQ(out[0].rmpp.rmpp_type, rmpp_type::abort) << "the responder is told to stop";
    EXPECT_EQ(out[1].header.transaction_id, resp.header.transaction_id) << "and asked again";
    EXPECT_EQ(out[1].header.method, ib::method::get_table);
    EXPECT_EQ(client.counters().retries, 1u);
    client.on_mad(bytes_of(segments[1]), now);  // a straggler of the aborted transfer
    EXPECT_EQ(client.counters().unmatched, 1u);
    EXPECT_TRUE(client.take_outbound().empty());
    for (const SaMad& s : segments) client.on_mad(bytes_of(s), now);
    ASSERT_EQ(results.size(), 1u);
    ASSERT_TRUE(results[0].has_value());
    EXPECT_EQ(results[0]->payload, payload);
    // Another request whose every transfer breaks: 1 + 3 retries, then it fails.
    (void)client.take_outbound();  // the ACKs
    const SaMad resp2 = table_request();
    const auto segments2 = rmpp_segments(resp2, payload);
    for (int i = 0; i < 4; ++i) {
        client.on_mad(bytes_of(segments2[0]), now);
        client.on_mad(bytes_of(segments2[2]), now);
    }
    ASSERT_EQ(results.size(), 2u);
    ASSERT_FALSE(results[1].has_value());
    EXPECT_EQ(results[1].error(), SaFailure::malformed_response);
}

// An ABORT or STOP from the SA ends the transfer on its side: the request
// fails, and nothing is sent back (an ABORT answered with an ABORT).
TEST_F(SaClientTest, AnAbortFromTheSaEndsTheRequestUnanswered) {
    std::vector<std::uint8_t> payload(600, 1);
    const SaMad resp = table_request();
    const auto segments = rmpp_segments(resp, payload);
    client.on_mad(bytes_of(segments[0]), now);
    (void)client.take_outbound();
    SaMad abort = segments[0];
    abort.rmpp.rmpp_type = rmpp_type::abort;
    abort.rmpp.rmpp_flags = rmpp_flag::active;
    abort.rmpp.rmpp_status = rmpp_status::unspecified;
    client.on_mad(bytes_of(abort), now);
    ASSERT_EQ(results.size(), 1u);
    ASSERT_FALSE(results[0].has_value());
    EXPECT_TRUE(client.take_outbound().empty());
}

TEST_F(SaClientTest, ReportsAreAnsweredAndDeliveredOnce) {
    std::vector<std::uint64_t> seen;
    client.set_report_handler([&](const SaMad& r) { seen.push_back(r.header.transaction_id); });
    SaMad report;
    report.header.method = ib::method::report;
    report.header.attribute_id = sa_attr::notice;
    report.header.transaction_id = 0x5A5A000000000007ULL;
    client.on_mad(bytes_of(report), now);
    client.on_mad(bytes_of(report), now);  // the SA resent it: our ReportResp was lost
    EXPECT_EQ(seen.size(), 1u);
    const auto out = client.take_outbound();
    ASSERT_EQ(out.size(), 2u) << "each copy is answered";
    EXPECT_EQ(out[0].header.method, ib::method::report_resp);
    EXPECT_EQ(out[0].header.transaction_id, report.header.transaction_id);
    EXPECT_EQ(client.counters().report_duplicates, 1u);
}

// The fabric vouches for a MAD's source LID, not for its contents: only
// the SM's LID answers or reports; any port could write a TID (they are
// sequential) and method into a MAD of its own.
TEST_F(SaClientTest, OnlyTheSmsLidAnswersOrReports) {
    client.set_sm_lid(1);
    auto h = client.submit(request(sa_attr::path_record), record(), now);
    const auto req = client.take_outbound().at(0);
    client.on_mad(bytes_of(response_to(req)), now, 7);  // a forgery from LID 7
    EXPECT_TRUE(results.empty());
    EXPECT_TRUE(h.pending());
    EXPECT_EQ(client.counters().not_from_sm, 1u);
    std::vector<SaMad> reports;
    client.set_report_handler([&](const SaMad& r) { reports.push_back(r); });
    SaMad report;
    report.header.method = ib::method::report;
    report.header.attribute_id = sa_attr::notice;
    report.header.transaction_id = 0x42;
    client.on_mad(bytes_of(report), now, 7);
    EXPECT_TRUE(reports.empty());
    EXPECT_TRUE(client.take_outbound().empty()) << "no ReportResp to a forgery";
    EXPECT_EQ(client.counters().not_from_sm, 2u);
    // The SM's own answer and Report are taken.
    client.on_mad(bytes_of(response_to(req)), now, 1);
    ASSERT_EQ(results.size(), 1u);
    client.on_mad(bytes_of(report), now, 1);
    EXPECT_EQ(reports.size(), 1u);
    EXPECT_EQ(client.take_outbound().size(), 1u);  // its ReportResp
    // A transport that does not know the sender (LID 0) is trusted.
    auto h2 = client.submit(request(sa_attr::path_record), record(), now);
    const auto req2 = client.take_outbound().at(0);
    client.on_mad(bytes_of(response_to(req2)), now, 0);
    EXPECT_EQ(results.size(), 2u);
}

// A response carries its request's attribute and the method answering it;
// one with the TID of a request and anything else is no answer to it.
TEST_F(SaClientTest, AResponseWithAnotherMethodOrAttributeIsNoAnswer) {
    auto h = client.submit(request(sa_attr::mc_member_record, ib::method::del), record(), now);
    const auto req = client.take_outbound().at(0);
    SaMad wrong_method = response_to(req);
    wrong_method.header.method = ib::method::get_resp;
    client.on_mad(bytes_of(wrong_method), now);
    SaMad wrong_attribute = response_to(req);
    wrong_attribute.header.attribute_id = sa_attr::path_record;
    client.on_mad(bytes_of(wrong_attribute), now);
    EXPECT_TRUE(results.empty());
    EXPECT_TRUE(h.pending());
    EXPECT_EQ(client.counters().mismatched, 2u);
    client.on_mad(bytes_of(response_to(req)), now);  // DeleteResp
    ASSERT_EQ(results.size(), 1u);
    // A Set is answered with GetResp (IBA 15.2.5).
    auto h2 = client.submit(request(sa_attr::mc_member_record, ib::method::set), record(), now);
    SaMad set_resp = response_to(client.take_outbound().at(0));
    EXPECT_EQ(set_resp.header.method, ib::method::get_resp);
    client.on_mad(bytes_of(set_resp), now);
    EXPECT_EQ(results.size(), 2u);
}

TEST_F(SaClientTest, RmppVersionZeroIsNotRmpp) {
    auto h = client.submit(request(sa_attr::mc_member_record, ib::method::get_table), record(), now);
    const auto req = client.take_outbound().at(0);
    SaMad resp = response_to(req);
    resp.header.method = ib::method::get_table_resp;
    resp.rmpp.rmpp_flags = rmpp_flag::active;  // Active set, version 0
    resp.rmpp.rmpp_version = 0;
    client.on_mad(bytes_of(resp), now);
    ASSERT_EQ(results.size(), 1u);
    ASSERT_TRUE(results[0].has_value());
    EXPECT_EQ(results[0]->payload.at(0), 0xAB);
}

TEST_F(SaClientTest, GarbageIsCounted) {
    std::vector<std::uint8_t> junk(100, 0);
    client.on_mad(junk, now);
    EXPECT_EQ(client.counters().malformed, 1u);
}

}  // namespace
}  // namespace ipoibd::sa
