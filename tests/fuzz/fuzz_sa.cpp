// libFuzzer target for the SA codecs: SA MAD decoding, every record
// decoder, status words, and RMPP reassembly and segmentation.
//
// Input: consecutive 257-byte records, one control byte then a 256-byte
// MAD; a short last record is passed as is (a wrong-size MAD). Control bit 0
// set makes the MAD an SA MAD and a plausible segment: the first one an
// RMPP DATA segment 1 announcing up to 8 segments, a later one a segment of
// the transfer the first started (same headers, SegmentNumber from control
// bits 3:1, Last from bit 4), so that reassembly gets past its first
// checks. Every MAD goes, in order, to one RmppReassembler (window from
// control bits 6:5 of the first record).
//
// Invariants checked (a violation aborts):
//   - decode_sa_mad(encode(m)) == m for every decoded m;
//   - every record type read from the SA data is in range and survives
//     encode/decode unchanged;
//   - the reassembler: an ACK is an RMPP ACK of this transaction with
//     SegmentNumber <= NewWindowLast and no more than the segments taken;
//     once an error is returned, it is returned again; a complete payload
//     is at most 200 bytes per segment, and records unpacked from it fill
//     it exactly;
//   - the SA data of the whole input, cut into segments by rmpp_segments
//     and sent through an RmppSender to an RmppReassembler, arrives intact.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <optional>
#include <vector>

#include "sa_client/rmpp.h"
#include "sa_client/sa_mad.h"
#include "sa_client/sa_notice.h"
#include "sa_client/sa_records.h"

namespace {

using namespace ipoibd;

constexpr std::size_t kRecord = 1 + sa::kSaMadSize;

void check(bool ok) {
    if (!ok) std::abort();
}

template <class Record>
void check_record(const sa::SaMad& mad) {
    const Record r = sa::get_record<Record>(mad);
    check(r.fields_in_range());
    std::vector<std::uint8_t> wire(Record::size);
    check(ib::encode(r, wire).has_value());
    auto back = ib::decode<Record>(wire);
    check(back.has_value() && *back == r);
}

void check_mad(const sa::SaMad& mad) {
    std::vector<std::uint8_t> again(sa::SaMad::size);
    if (mad.fields_in_range()) {
        mad.write_to(again.data());
        auto back = sa::decode_sa_mad(again);
        check(back.has_value() && *back == mad);
    }
    check_record<sa::McMemberRecord>(mad);
    check_record<sa::PathRecord>(mad);
    check_record<sa::InformInfo>(mad);
    check_record<sa::InformInfoRecord>(mad);
    check_record<sa::Notice>(mad);
    check_record<sa::ClassPortInfo>(mad);
    check(!sa::describe_sa_status(mad.header.status).empty());
    check(sa::sa_attribute_name(mad.header.attribute_id) != nullptr);
    if (auto g = sa::trap_gid(sa::get_record<sa::Notice>(mad))) check(g->size() == 16);
}

// Makes `mad` the first segment of a transfer of 1 to 8 segments.
void normalize_first(sa::SaMad& mad) {
    mad.rmpp.rmpp_version = sa::kRmppVersion;
    mad.rmpp.rmpp_type = sa::rmpp_type::data;
    mad.rmpp.rmpp_status = 0;
    mad.rmpp.data1 = 1;
    mad.rmpp.data2 = sa::kSaClassHeaderSize + mad.rmpp.data2 % (8 * sa::kRmppSegmentPayload);
    const bool last = mad.rmpp.data2 <= sa::kRmppSegmentPayload;
    mad.rmpp.rmpp_flags =
        static_cast<std::uint8_t>(sa::rmpp_flag::active | sa::rmpp_flag::first | (last ? sa::rmpp_flag::last : 0));
}

// Turns `mad` into a segment of the transfer `first` started.
void normalize(sa::SaMad& mad, const sa::SaMad& first, std::uint8_t control) {
    mad.header = first.header;
    mad.sm_key = first.sm_key;
    mad.attribute_offset = first.attribute_offset;
    mad.component_mask = first.component_mask;
    const std::uint32_t number = ((control >> 1) & 0x7u) + 1;
    mad.rmpp.rmpp_version = sa::kRmppVersion;
    mad.rmpp.rmpp_type = sa::rmpp_type::data;
    mad.rmpp.rmpp_status = 0;
    mad.rmpp.data1 = number;
    mad.rmpp.rmpp_flags = static_cast<std::uint8_t>(sa::rmpp_flag::active | (number == 1 ? sa::rmpp_flag::first : 0) |
                                                    ((control & 0x10) != 0 ? sa::rmpp_flag::last : 0));
}

void check_ack(const sa::SaMad& ack, const sa::SaMad& first, std::uint32_t taken) {
    check(ack.rmpp.rmpp_type == sa::rmpp_type::ack && ack.rmpp.rmpp_version == sa::kRmppVersion);
    check(ack.rmpp.active());
    check(ack.header.transaction_id == first.header.transaction_id);
    check(ack.rmpp.segment_number() <= ack.rmpp.new_window_last());
    check(ack.rmpp.segment_number() >= 1 && ack.rmpp.segment_number() <= taken);
}

void check_complete(const sa::RmppReassembler& r) {
    check(r.payload().size() <= std::size_t{r.segments()} * sa::kSaDataSize);
    auto recs = sa::unpack_records<sa::McMemberRecord>(r.payload(), r.header().attribute_offset);
    if (recs) check(recs->size() * std::size_t{r.header().attribute_offset} * 8 == r.payload().size());
    auto paths = sa::unpack_records<sa::PathRecord>(r.payload(), r.header().attribute_offset);
    if (paths) check(paths->size() * std::size_t{r.header().attribute_offset} * 8 == r.payload().size());
}

// The SA data of every MAD, segmented and reassembled through the sender's
// window, must come back unchanged.
void check_segmentation(const sa::SaMad& header, const std::vector<std::uint8_t>& payload, std::uint32_t window) {
    sa::RmppSender sender(sa::rmpp_segments(header, payload));
    sa::RmppReassembler receiver({.window = window, .max_segments = 4096});
    std::vector<sa::SaMad> in_flight = sender.start();
    for (std::uint32_t round = 0; round <= sender.segment_count() && !in_flight.empty(); ++round) {
        std::vector<sa::SaMad> next;
        for (const auto& seg : in_flight) {
            auto step = receiver.add(seg);
            check(step.has_value());
            if (!step->ack) continue;
            auto more = sender.on_ack(*step->ack);
            check(more.has_value());
            next.insert(next.end(), more->begin(), more->end());
        }
        in_flight = std::move(next);
    }
    check(sender.complete() && receiver.complete());
    check(std::equal(payload.begin(), payload.end(), receiver.payload().begin(), receiver.payload().end()));
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::uint32_t window = size > 0 ? ((data[0] >> 5) & 0x3u) + 1 : 1;
    sa::RmppReassembler reassembler({.window = window, .max_segments = 64});
    std::optional<sa::SaMad> first;
    std::optional<sa::RmppError> error;
    std::uint32_t taken = 0;
    std::vector<std::uint8_t> all_data;

    for (std::size_t at = 0; at < size; at += kRecord) {
        const std::uint8_t control = data[at];
        std::vector<std::uint8_t> raw(data + at + 1, data + std::min(size, at + kRecord));
        if ((control & 1) != 0 && raw.size() > 1) raw[1] = ib::mgmt_class::subn_adm;
        auto decoded = sa::decode_sa_mad(raw);
        if (!decoded) {
            check(raw.size() != sa::kSaMadSize || raw[1] != ib::mgmt_class::subn_adm);
            continue;
        }
        sa::SaMad mad = *decoded;
        check_mad(mad);
        all_data.insert(all_data.end(), mad.data.begin(), mad.data.end());
        if ((control & 1) != 0) {
            if (first) {
                normalize(mad, *first, control);
            } else {
                normalize_first(mad);
            }
        }
        if (!first) first = mad;

        ++taken;
        auto step = reassembler.add(mad);
        if (error) {
            check(!step.has_value() && step.error() == *error);
            continue;
        }
        if (!step) {
            error = step.error();
            check(sa::rmpp_abort_status(*error) != 0);
            continue;
        }
        if (step->ack) check_ack(*step->ack, *first, taken);
        if (reassembler.complete()) check_complete(reassembler);
    }
    if (first) check_segmentation(*first, all_data, window);
    return 0;
}
