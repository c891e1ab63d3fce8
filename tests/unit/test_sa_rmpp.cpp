// RMPP for SA tables: segmentation (counts, flags, PayloadLength as the
// Linux MAD layer computes it), reassembly round trips, the receiver's
// ACKs, every malformed sequence with its typed error, record unpacking,
// and the sender's window driven by ACKs.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "sa_client/rmpp.h"
#include "sa_client/sa_records.h"
#include "test_sa_util.h"

namespace ipoibd::sa {
namespace {

using test::gid;

SaMad table_response(std::uint16_t attribute_offset = 7) {
    SaMad m;
    m.header.method = ib::method::get_table_resp;
    m.header.transaction_id = 0x1B0B000000000042ULL;
    m.header.attribute_id = sa_attr::mc_member_record;
    m.attribute_offset = attribute_offset;
    m.component_mask = mc_member_comp::mgid;
    return m;
}

std::vector<std::uint8_t> counting_payload(std::size_t n) {
    std::vector<std::uint8_t> p(n);
    for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<std::uint8_t>(i * 7 + 1);
    return p;
}

std::vector<McMemberRecord> members(std::size_t n) {
    std::vector<McMemberRecord> out(n);
    for (std::size_t i = 0; i < n; ++i) {
        out[i].mgid = gid(0xFF12401BFFFF0000ULL, 0xFFFFFFFFULL - i);
        out[i].port_gid = gid(0xFE80000000000000ULL, 0x1000 + i);
        out[i].q_key = 0x0B1B;
        out[i].mlid = static_cast<std::uint16_t>(0xC000 + i);
        out[i].join_state = join_state::full_member;
        out[i].mtu = 4;
        out[i].rate = rate::gbps_10;
    }
    return out;
}

// ---------------------------------------------------------------------------
// Segmentation

TEST(RmppSegments, CountsFlagsAndPayloadLengths) {
    struct Case {
        std::size_t payload;
        std::size_t segments;
        std::uint32_t first_length;
        std::uint32_t last_length;
    };
    const Case cases[] = {
        {0, 1, 20, 20},           // empty table: the SA header alone
        {56, 1, 76, 76},          // one MCMemberRecord
        {168, 1, 188, 188},       // three
        {200, 1, 220, 220},       // exactly one segment of data
        {224, 2, 264, 44},        // four MCMemberRecords: 200 + 24
        {400, 2, 440, 220},
        {401, 3, 461, 21},
        {64 * 100, 32, 7040, 220},  // 100 PathRecords
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.payload);
        const auto payload = counting_payload(c.payload);
        const auto segs = rmpp_segments(table_response(), payload, 0x0E);
        ASSERT_EQ(segs.size(), c.segments);
        for (std::size_t i = 0; i < segs.size(); ++i) {
            const auto& r = segs[i].rmpp;
            const bool first = i == 0;
            const bool last = i + 1 == segs.size();
            EXPECT_EQ(r.rmpp_version, 1);
            EXPECT_EQ(r.rmpp_type, rmpp_type::data);
            EXPECT_TRUE(r.active());
            EXPECT_EQ(r.first(), first);
            EXPECT_EQ(r.last(), last);
            EXPECT_EQ(r.rmpp_status, 0);
            EXPECT_EQ(r.segment_number(), i + 1);
            EXPECT_EQ(r.r_resp_time, first ? 0x0E : kRmppNoRespTime);
            if (first) {
                EXPECT_EQ(r.payload_length(), c.first_length);
            } else if (last) {
                EXPECT_EQ(r.payload_length(), c.last_length);
            } else {
                EXPECT_EQ(r.payload_length(), 0u);
            }
            // Every segment repeats the headers.
            EXPECT_EQ(segs[i].header, table_response().header);
            EXPECT_EQ(segs[i].attribute_offset, 7);
            EXPECT_EQ(segs[i].component_mask, mc_member_comp::mgid);
            // Data: the next 200 bytes, zeros after the end.
            for (std::size_t b = 0; b < kSaDataSize; ++b) {
                const std::size_t at = i * kSaDataSize + b;
                ASSERT_EQ(segs[i].data[b], at < payload.size() ? payload[at] : 0) << i << ' ' << b;
            }
        }
    }
}

TEST(RmppSegments, PackRecordsUsesTheAttributeOffsetStride) {
    const auto recs = members(3);
    const auto packed = pack_records<McMemberRecord>(recs);
    ASSERT_EQ(packed.size(), 3u * 56);
    for (std::size_t i = 0; i < 3; ++i) {
        EXPECT_EQ(McMemberRecord::read_from(packed.data() + i * 56), recs[i]);
        for (std::size_t b = 52; b < 56; ++b) EXPECT_EQ(packed[i * 56 + b], 0);  // padding
    }
    EXPECT_TRUE(pack_records<PathRecord>({}).empty());
}

// ---------------------------------------------------------------------------
// Round trips

TEST(RmppReassembly, RoundTripOfTablesOfEverySize) {
    for (std::size_t n = 0; n <= 20; ++n) {
        SCOPED_TRACE(n);
        const auto recs = members(n);
        const auto segs = rmpp_segments(table_response(), pack_records<McMemberRecord>(recs));
        auto t = reassemble(segs);
        ASSERT_TRUE(t.has_value()) << to_string(t.error());
        EXPECT_EQ(t->header.header, table_response().header);
        EXPECT_EQ(t->header.attribute_offset, 7);
        EXPECT_EQ(t->header.data, SaData{});
        auto back = unpack_records<McMemberRecord>(t->payload, t->header.attribute_offset);
        ASSERT_TRUE(back.has_value()) << to_string(back.error());
        EXPECT_EQ(*back, recs);
    }
}

TEST(RmppReassembly, PathRecordTable) {
    std::vector<PathRecord> paths(37);
    for (std::size_t i = 0; i < paths.size(); ++i) {
        paths[i].dlid = static_cast<std::uint16_t>(i + 1);
        paths[i].slid = 1;
        paths[i].sl = static_cast<std::uint8_t>(i & 0xF);
        paths[i].mtu = 4;
        paths[i].reversible = true;
    }
    SaMad resp = table_response(8);
    resp.header.attribute_id = sa_attr::path_record;
    const auto segs = rmpp_segments(resp, pack_records<PathRecord>(paths));
    EXPECT_EQ(segs.size(), 12u);  // 37 * 64 = 2368 bytes
    auto t = reassemble(segs);
    ASSERT_TRUE(t.has_value());
    auto back = unpack_records<PathRecord>(t->payload, 8);
    ASSERT_TRUE(back.has_value());
    EXPECT_EQ(*back, paths);
}

// ---------------------------------------------------------------------------
// The receiver's ACKs

TEST(RmppReassembly, AcksAtWindowEndsAndOnTheLastSegment) {
    const auto segs = rmpp_segments(table_response(), counting_payload(900));  // 5 segments
    ASSERT_EQ(segs.size(), 5u);
    RmppReassembler r({.window = 2, .max_segments = 100});
    struct Want {
        RmppReassembler::Step step;
        bool ack;
        std::uint32_t segment;
        std::uint32_t new_window_last;
    };
    using S = RmppReassembler::Step;
    const Want want[] = {{S::accepted, true, 1, 3},
                         {S::accepted, false, 0, 0},
                         {S::accepted, true, 3, 5},
                         {S::accepted, false, 0, 0},
                         {S::complete, true, 5, 5}};
    for (std::size_t i = 0; i < segs.size(); ++i) {
        SCOPED_TRACE(i + 1);
        auto res = r.add(segs[i]);
        ASSERT_TRUE(res.has_value()) << to_string(res.error());
        EXPECT_EQ(res->step, want[i].step);
        ASSERT_EQ(res->ack.has_value(), want[i].ack);
        if (!res->ack) continue;
        const SaMad& ack = *res->ack;
        EXPECT_EQ(ack.header.method, ib::method::get_table);  // the R bit flipped
        EXPECT_EQ(ack.header.transaction_id, segs[i].header.transaction_id);
        EXPECT_EQ(ack.header.attribute_id, sa_attr::mc_member_record);
        EXPECT_EQ(ack.rmpp.rmpp_version, 1);
        EXPECT_EQ(ack.rmpp.rmpp_type, rmpp_type::ack);
        EXPECT_EQ(ack.rmpp.rmpp_flags, rmpp_flag::active);
        EXPECT_EQ(ack.rmpp.rmpp_status, 0);
        EXPECT_EQ(ack.rmpp.segment_number(), want[i].segment);
        EXPECT_EQ(ack.rmpp.new_window_last(), want[i].new_window_last);
        EXPECT_EQ(ack.data, SaData{});
    }
    EXPECT_TRUE(r.complete());
    EXPECT_EQ(r.segments(), 5u);
    EXPECT_EQ(r.payload().size(), 900u);
    const auto p = counting_payload(900);
    EXPECT_TRUE(std::equal(p.begin(), p.end(), r.payload().begin()));
}

TEST(RmppReassembly, DuplicatesGetTheLastAckAgainAndAddNothing) {
    const auto segs = rmpp_segments(table_response(), counting_payload(500));  // 3 segments
    RmppReassembler r({.window = 1, .max_segments = 10});
    ASSERT_TRUE(r.add(segs[0]).has_value());
    auto second = r.add(segs[1]);
    ASSERT_TRUE(second.has_value());
    ASSERT_TRUE(second->ack.has_value());
    auto dup = r.add(segs[0]);
    ASSERT_TRUE(dup.has_value());
    EXPECT_EQ(dup->step, RmppReassembler::Step::duplicate);
    ASSERT_TRUE(dup->ack.has_value());
    EXPECT_EQ(*dup->ack, *second->ack);
    auto last = r.add(segs[2]);
    ASSERT_TRUE(last.has_value());
    EXPECT_EQ(last->step, RmppReassembler::Step::complete);
    // The responder missed the final ACK and sends the last segment again.
    auto again = r.add(segs[2]);
    ASSERT_TRUE(again.has_value());
    EXPECT_EQ(again->step, RmppReassembler::Step::duplicate);
    EXPECT_EQ(*again->ack, *last->ack);
    EXPECT_EQ(r.payload().size(), 500u);
}

TEST(RmppReassembly, ResponsesWithoutRmpp) {
    // OpenSM answers a failed GetTable with the request's header turned
    // around: no RMPP, AttributeOffset 0.
    SaMad err = table_response(0);
    err.header.status = sa_status::err_req_invalid;
    auto t = reassemble(std::span<const SaMad>(&err, 1));
    ASSERT_TRUE(t.has_value());
    EXPECT_EQ(t->header.header.status, sa_status::err_req_invalid);
    EXPECT_TRUE(t->payload.empty());
    // An error status with a stray AttributeOffset is still an error answer.
    err.attribute_offset = 7;
    EXPECT_TRUE(reassemble(std::span<const SaMad>(&err, 1)).has_value());
    // Success without RMPP but with records: not a table this code can read.
    SaMad plain = table_response(7);
    auto bad = reassemble(std::span<const SaMad>(&plain, 1));
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.error(), RmppError::not_rmpp);
}

// ---------------------------------------------------------------------------
// Malformed sequences: each names its error.

void clear_flag(SaMad& m, std::uint8_t flag) { m.rmpp.rmpp_flags = static_cast<std::uint8_t>(m.rmpp.rmpp_flags & ~flag); }

struct MalformedCase {
    const char* name;
    std::size_t payload;                                   // bytes of records to segment
    std::function<void(std::vector<SaMad>&)> corrupt;      // edits the segments in arrival order
    RmppError error;
    RmppReceiveLimits limits = {};
};

TEST(RmppReassembly, MalformedSequences) {
    const std::vector<MalformedCase> cases = {
        {"gap: segment 2 lost", 600, [](auto& s) { s.erase(s.begin() + 1); }, RmppError::out_of_sequence},
        {"first segment lost", 600, [](auto& s) { s.erase(s.begin()); }, RmppError::out_of_sequence},
        {"segments swapped", 600, [](auto& s) { std::swap(s[1], s[2]); }, RmppError::out_of_sequence},
        {"segment 1 without First", 600, [](auto& s) { clear_flag(s[0], rmpp_flag::first); },
         RmppError::inconsistent_first},
        {"First on segment 2", 600, [](auto& s) { s[1].rmpp.rmpp_flags |= rmpp_flag::first; },
         RmppError::inconsistent_first},
        {"First with SegmentNumber 2", 100, [](auto& s) { s[0].rmpp.data1 = 2; }, RmppError::inconsistent_first},
        {"Last on segment 1 of 3", 600, [](auto& s) { s[0].rmpp.rmpp_flags |= rmpp_flag::last; },
         RmppError::inconsistent_last},
        {"Last on a middle segment", 600, [](auto& s) { s[1].rmpp.rmpp_flags |= rmpp_flag::last; },
         RmppError::inconsistent_last},
        {"last segment without Last", 600, [](auto& s) { clear_flag(s[2], rmpp_flag::last); },
         RmppError::inconsistent_last},
        {"last PayloadLength disagrees with the first", 600, [](auto& s) { s[2].rmpp.data2 += 1; },
         RmppError::inconsistent_last},
        {"first PayloadLength announces fewer segments", 600, [](auto& s) { s[0].rmpp.data2 = 440; },
         RmppError::inconsistent_last},
        {"first PayloadLength 0", 100, [](auto& s) { s[0].rmpp.data2 = 0; }, RmppError::bad_payload_length},
        {"first PayloadLength below the SA header", 100, [](auto& s) { s[0].rmpp.data2 = 19; },
         RmppError::bad_payload_length},
        {"last segment shorter than the SA header", 600, [](auto& s) { s[0].rmpp.data2 = 2 * 220 + 10; },
         RmppError::bad_payload_length},
        {"PayloadLength of 20 million segments", 100, [](auto& s) { s[0].rmpp.data2 = 0xFFFFFFFF; },
         RmppError::too_large},
        {"more segments than allowed", 600, [](auto&) {}, RmppError::too_large, {.window = 4, .max_segments = 2}},
        {"TID changes", 600, [](auto& s) { s[1].header.transaction_id ^= 1; }, RmppError::header_mismatch},
        {"AttributeOffset changes", 600, [](auto& s) { s[2].attribute_offset = 8; }, RmppError::header_mismatch},
        {"Status changes", 600, [](auto& s) { s[1].header.status = sa_status::err_no_resources; },
         RmppError::header_mismatch},
        {"attribute changes", 600, [](auto& s) { s[1].header.attribute_id = sa_attr::path_record; },
         RmppError::header_mismatch},
        {"RMPPVersion 2", 100, [](auto& s) { s[0].rmpp.rmpp_version = 2; }, RmppError::bad_rmpp_version},
        {"RMPPVersion 0 mid-transfer", 600, [](auto& s) { s[1].rmpp.rmpp_version = 0; },
         RmppError::bad_rmpp_version},
        {"Active cleared mid-transfer", 600, [](auto& s) { clear_flag(s[1], rmpp_flag::active); },
         RmppError::bad_rmpp_version},
        {"an ACK where DATA belongs", 600, [](auto& s) { s[1].rmpp.rmpp_type = rmpp_type::ack; },
         RmppError::bad_rmpp_type},
        {"first is not DATA", 100, [](auto& s) { s[0].rmpp.rmpp_type = rmpp_type::ack; }, RmppError::bad_rmpp_type},
        {"responder aborts", 600,
         [](auto& s) { s[1] = make_rmpp_abort(make_rmpp_ack(s[0], 1, 2), rmpp_status::unspecified); },
         RmppError::stopped},
        {"DATA with a status", 600, [](auto& s) { s[1].rmpp.rmpp_status = 1; }, RmppError::bad_rmpp_status},
        {"segment after the last", 400,
         [](auto& s) {
             SaMad extra = s[1];
             extra.rmpp.data1 = 3;
             extra.rmpp.rmpp_flags = rmpp_flag::active;
             s.push_back(extra);
         },
         RmppError::segment_number_too_big},
        {"transfer cut short", 600, [](auto& s) { s.pop_back(); }, RmppError::incomplete},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        auto segs = rmpp_segments(table_response(), counting_payload(c.payload));
        c.corrupt(segs);
        auto t = reassemble(segs, c.limits);
        ASSERT_FALSE(t.has_value());
        EXPECT_EQ(t.error(), c.error) << to_string(t.error());
        EXPECT_STRNE(to_string(c.error), "unknown");
    }
}

TEST(RmppReassembly, AbortOrStopFromTheResponderEndsTheTransfer) {
    auto segs = rmpp_segments(table_response(), counting_payload(600));
    for (std::uint8_t type : {rmpp_type::abort, rmpp_type::stop}) {
        RmppReassembler fresh;
        ASSERT_TRUE(fresh.add(segs[0]).has_value());
        SaMad stop = segs[1];
        stop.rmpp.rmpp_type = type;
        stop.rmpp.rmpp_status = type == rmpp_type::stop ? rmpp_status::resources_exhausted : rmpp_status::unspecified;
        auto res = fresh.add(stop);
        ASSERT_FALSE(res.has_value());
        EXPECT_EQ(res.error(), RmppError::stopped);
    }
}

TEST(RmppReassembly, AnErrorSticks) {
    auto segs = rmpp_segments(table_response(), counting_payload(600));
    RmppReassembler r;
    ASSERT_TRUE(r.add(segs[0]).has_value());
    EXPECT_EQ(r.add(segs[2]).error(), RmppError::out_of_sequence);
    EXPECT_EQ(r.add(segs[1]).error(), RmppError::out_of_sequence);
    EXPECT_FALSE(r.complete());
}

TEST(RmppReassembly, AbortStatusForEachError) {
    EXPECT_EQ(rmpp_abort_status(RmppError::inconsistent_last), 119);
    EXPECT_EQ(rmpp_abort_status(RmppError::bad_payload_length), 119);
    EXPECT_EQ(rmpp_abort_status(RmppError::inconsistent_first), 120);
    EXPECT_EQ(rmpp_abort_status(RmppError::bad_rmpp_type), 121);
    EXPECT_EQ(rmpp_abort_status(RmppError::new_window_last_too_small), 122);
    EXPECT_EQ(rmpp_abort_status(RmppError::segment_number_too_big), 123);
    EXPECT_EQ(rmpp_abort_status(RmppError::bad_rmpp_status), 124);
    EXPECT_EQ(rmpp_abort_status(RmppError::bad_rmpp_version), 125);
    EXPECT_EQ(rmpp_abort_status(RmppError::out_of_sequence), 127);
    EXPECT_EQ(rmpp_abort_status(RmppError::too_large), rmpp_status::resources_exhausted);

    const auto segs = rmpp_segments(table_response(), counting_payload(10));
    const SaMad abort = make_rmpp_abort(segs[0], 120);
    EXPECT_EQ(abort.header.method, ib::method::get_table);
    EXPECT_EQ(abort.rmpp.rmpp_type, rmpp_type::abort);
    EXPECT_EQ(abort.rmpp.rmpp_status, 120);
    EXPECT_TRUE(abort.rmpp.active());
    EXPECT_EQ(abort.data, SaData{});
    const SaMad stop = make_rmpp_abort(segs[0], rmpp_status::resources_exhausted);
    EXPECT_EQ(stop.rmpp.rmpp_type, rmpp_type::stop);
}

// ---------------------------------------------------------------------------
// Records of a payload

TEST(RmppRecords, UnpackChecksTheStride) {
    const auto packed = pack_records<McMemberRecord>(members(3));
    EXPECT_EQ(unpack_records<McMemberRecord>(packed, 7)->size(), 3u);
    EXPECT_EQ(unpack_records<McMemberRecord>(packed, 6).error(), RmppError::bad_attribute_offset);
    EXPECT_EQ(unpack_records<McMemberRecord>(packed, 0).error(), RmppError::bad_attribute_offset);
    EXPECT_EQ(unpack_records<McMemberRecord>(bytes(packed).first(100), 7).error(), RmppError::partial_record);
    EXPECT_TRUE(unpack_records<McMemberRecord>({}, 0)->empty());
    // A larger stride than the record is fine: the responder's choice.
    EXPECT_EQ(unpack_records<McMemberRecord>(packed, 21)->size(), 1u);
}

// ---------------------------------------------------------------------------
// The sender's window

SaMad ack_of(const SaMad& segment, std::uint32_t acked, std::uint32_t new_window_last) {
    return make_rmpp_ack(segment, acked, new_window_last);
}

TEST(RmppSender, WindowFollowsTheAcks) {
    RmppSender s(rmpp_segments(table_response(), counting_payload(1200)));  // 6 segments
    ASSERT_EQ(s.segment_count(), 6u);
    auto numbers = [](const std::vector<SaMad>& v) {
        std::vector<std::uint32_t> out;
        for (const auto& m : v) out.push_back(m.rmpp.segment_number());
        return out;
    };
    EXPECT_EQ(numbers(s.start()), (std::vector<std::uint32_t>{1}));
    EXPECT_EQ(numbers(s.retransmit()), (std::vector<std::uint32_t>{1}));
    const SaMad first = rmpp_segments(table_response(), counting_payload(1200))[0];
    auto w = s.on_ack(ack_of(first, 1, 4));
    ASSERT_TRUE(w.has_value());
    EXPECT_EQ(numbers(*w), (std::vector<std::uint32_t>{2, 3, 4}));
    EXPECT_EQ(numbers(s.retransmit()), (std::vector<std::uint32_t>{2, 3, 4}));
    // A stale ACK changes nothing.
    w = s.on_ack(ack_of(first, 1, 4));
    ASSERT_TRUE(w.has_value());
    EXPECT_TRUE(w->empty());
    w = s.on_ack(ack_of(first, 3, 4));
    ASSERT_TRUE(w.has_value());
    EXPECT_TRUE(w->empty());
    EXPECT_EQ(numbers(s.retransmit()), (std::vector<std::uint32_t>{4}));
    // NewWindowLast beyond the end is capped at the last segment.
    w = s.on_ack(ack_of(first, 4, 100));
    ASSERT_TRUE(w.has_value());
    EXPECT_EQ(numbers(*w), (std::vector<std::uint32_t>{5, 6}));
    EXPECT_FALSE(s.complete());
    w = s.on_ack(ack_of(first, 6, 6));
    ASSERT_TRUE(w.has_value());
    EXPECT_TRUE(w->empty());
    EXPECT_TRUE(s.complete());
    EXPECT_TRUE(s.retransmit().empty());
}

TEST(RmppSender, BadAcks) {
    const auto segs = rmpp_segments(table_response(), counting_payload(1200));
    struct Case {
        const char* name;
        SaMad ack;
        RmppError error;
    };
    SaMad wrong_tid = ack_of(segs[0], 1, 2);
    wrong_tid.header.transaction_id ^= 1;
    SaMad wrong_version = ack_of(segs[0], 1, 2);
    wrong_version.rmpp.rmpp_version = 0;
    SaMad data = segs[0];
    SaMad with_status = ack_of(segs[0], 1, 2);
    with_status.rmpp.rmpp_status = 5;
    const Case cases[] = {
        {"ACK of a segment not sent", ack_of(segs[0], 2, 3), RmppError::segment_number_too_big},
        {"NewWindowLast below the segment", ack_of(segs[0], 1, 0), RmppError::new_window_last_too_small},
        {"receiver aborts", make_rmpp_abort(segs[0], 119), RmppError::stopped},
        {"receiver stops", make_rmpp_abort(segs[0], rmpp_status::resources_exhausted), RmppError::stopped},
        {"another transaction", wrong_tid, RmppError::header_mismatch},
        {"not RMPP", wrong_version, RmppError::bad_rmpp_version},
        {"DATA instead of ACK", data, RmppError::bad_rmpp_type},
        {"ACK with a status", with_status, RmppError::bad_rmpp_status},
    };
    for (const auto& c : cases) {
        SCOPED_TRACE(c.name);
        RmppSender s(segs);
        ASSERT_EQ(s.start().size(), 1u);
        auto r = s.on_ack(c.ack);
        ASSERT_FALSE(r.has_value());
        EXPECT_EQ(r.error(), c.error);
    }
}

TEST(RmppSender, TalksToTheReassembler) {
    // A responder and a requester wired back to back: every ACK the
    // reassembler gives goes to the sender, every segment the sender
    // releases goes to the reassembler.
    for (std::uint32_t window : {1u, 3u, 32u}) {
        SCOPED_TRACE(window);
        const auto recs = members(60);  // 3360 bytes, 17 segments
        RmppSender sender(rmpp_segments(table_response(), pack_records<McMemberRecord>(recs)));
        RmppReassembler receiver({.window = window, .max_segments = 100});
        std::vector<SaMad> in_flight = sender.start();
        for (int round = 0; round < 100 && !in_flight.empty(); ++round) {
            std::vector<SaMad> next;
            for (const auto& seg : in_flight) {
                auto step = receiver.add(seg);
                ASSERT_TRUE(step.has_value()) << to_string(step.error());
                if (!step->ack) continue;
                auto more = sender.on_ack(*step->ack);
                ASSERT_TRUE(more.has_value()) << to_string(more.error());
                next.insert(next.end(), more->begin(), more->end());
            }
            in_flight = std::move(next);
        }
        EXPECT_TRUE(sender.complete());
        ASSERT_TRUE(receiver.complete());
        auto back = unpack_records<McMemberRecord>(receiver.payload(), receiver.header().attribute_offset);
        ASSERT_TRUE(back.has_value());
        EXPECT_EQ(*back, recs);
    }
}

}  // namespace
}  // namespace ipoibd::sa
