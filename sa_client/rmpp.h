// RMPP for SA tables (IBA vol. 1 13.6): a GetTableResp (or any SA
// response) longer than one MAD travels as DATA segments, each a whole SA
// MAD: the same MAD and SA headers (SM_Key, AttributeOffset,
// ComponentMask) in every segment and the next 200 bytes of records in its
// SA data. Sans-I/O: nothing here sends, receives or keeps time.
//
// Payload accounting, as the Linux MAD layer and OpenSM count it: the RMPP
// payload of a segment is everything after the RMPP header, 220 bytes (the
// 20-byte SA class header and 200 bytes of data), so for n segments holding
// L bytes of records (pad = 200n - L, the zeros after the last record):
//   first segment  PayloadLength = 220n - pad   (the whole transfer)
//   last segment   PayloadLength = 220 - pad    (n = 1: both are the same)
//   middle         PayloadLength = 0 (not read on receive)
// An empty table is one segment with PayloadLength 20.
//
// Flow, one window at a time (what a responder and a requester of SA
// tables need; no dual-sided transfers, no adaptive windows, no timers):
//  1. The responder packs its records (pack_records) and cuts them into
//     segments (rmpp_segments); an RmppSender hands out segment 1 first
//     (the sender's window starts at 1) and then, on each ACK, the segments
//     up to the ACK's NewWindowLast; retransmit() gives the unacknowledged
//     segments of the window for the caller's timeout.
//  2. The requester feeds every DATA segment to an RmppReassembler, which
//     checks it against the first segment and returns the ACK to send: at
//     the end of each receive window and on the last segment; a duplicate
//     re-sends the last ACK. Any inconsistency is an RmppError, which maps
//     to the ABORT status to answer with (rmpp_abort_status) and ends the
//     transfer: the SA client asks again, within the request's retries
//     (the peer's own STOP or ABORT is not answered, and ends the request).
//  3. unpack_records turns the reassembled payload into records, stepping
//     by AttributeOffset.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "common/byte_io.h"
#include "common/expected.h"
#include "sa_client/sa_mad.h"

namespace ipoibd::sa {

inline constexpr std::size_t kRmppSegmentPayload = kSaClassHeaderSize + kSaDataSize;  // 220

enum class RmppError : std::uint8_t {
    not_rmpp,                // RMPP inactive, yet AttributeOffset says there are records
    bad_rmpp_version,        // RMPPVersion is not 1
    bad_rmpp_type,           // a DATA was expected (or an ACK, by the sender)
    bad_rmpp_status,         // DATA or ACK with a non-zero RMPPStatus
    stopped,                 // the peer sent STOP or ABORT
    inconsistent_first,      // First flag and SegmentNumber 1 do not go together
    out_of_sequence,         // a gap: SegmentNumber beyond the next expected one
    segment_number_too_big,  // beyond the count announced, or beyond what was sent (ACK)
    new_window_last_too_small,  // ACK with NewWindowLast below its SegmentNumber
    bad_payload_length,      // first PayloadLength is no possible transfer size
    inconsistent_last,       // Last flag on the wrong segment, or its PayloadLength disagrees
    header_mismatch,         // TID, class, method, attribute, status or AttributeOffset changed
    too_large,               // more segments than the receiver accepts
    bad_attribute_offset,    // 0 with records, or smaller than the record
    partial_record,          // the payload is not a whole number of records
    incomplete,              // reassemble(): the MADs ended before the last segment
};
const char* to_string(RmppError e);
// RMPPStatus of the ABORT that answers `e` (IBA vol. 1 13.6.2): 119 bad
// Last or PayloadLength, 120 bad First, 121 bad type, 122 NewWindowLast too
// small, 123 SegmentNumber too big, 124 illegal status, 125 bad version,
// 1 (resources exhausted: a STOP) for too_large, 127 unspecified otherwise.
std::uint8_t rmpp_abort_status(RmppError e);

// ---------------------------------------------------------------------------
// Sending

// Records laid end to end at AttributeOffset * 8 bytes apart, zero padded.
template <class Record>
std::vector<std::uint8_t> pack_records(std::span<const Record> records) {
    const std::size_t stride = std::size_t{attribute_offset_for(Record::size)} * 8;
    std::vector<std::uint8_t> out(records.size() * stride, 0);
    for (std::size_t i = 0; i < records.size(); ++i) records[i].write_to(out.data() + i * stride);
    return out;
}

// DATA segments of `payload` (the records, as pack_records lays them out).
// `response` gives every segment its MAD header, SM_Key, AttributeOffset
// and ComponentMask; its RMPP fields and data are replaced. RRespTime is
// `r_resp_time` on the first segment and kRmppNoRespTime on the others.
std::vector<SaMad> rmpp_segments(const SaMad& response, bytes payload, std::uint8_t r_resp_time = kRmppNoRespTime);

// ACK answering the DATA `data` (its headers, the R bit of the method
// flipped as the Linux MAD layer does, data cleared), acknowledging
// segments 1..`segment_number` and opening the window up to
// `new_window_last`.
SaMad make_rmpp_ack(const SaMad& data, std::uint32_t segment_number, std::uint32_t new_window_last);
// ABORT with `status` (STOP for rmpp_status::resources_exhausted) answering
// `received`, a MAD of the transfer from the peer: its headers, R bit
// flipped, data cleared.
SaMad make_rmpp_abort(const SaMad& received, std::uint8_t status);

class RmppSender {
public:
    explicit RmppSender(std::vector<SaMad> segments) : segments_(std::move(segments)) {}

    // The first window: segment 1.
    std::vector<SaMad> start();
    // Takes an ACK (or STOP/ABORT) of this transfer; returns the segments
    // it lets go out, none for a stale or repeated ACK.
    expected<std::vector<SaMad>, RmppError> on_ack(const SaMad& ack);
    // Everything sent and not yet acknowledged (for the caller's timeout).
    std::vector<SaMad> retransmit() const;

    bool complete() const { return !segments_.empty() && last_acked_ == segments_.size(); }
    std::uint32_t segment_count() const { return static_cast<std::uint32_t>(segments_.size()); }

private:
    std::vector<SaMad> send_through(std::uint32_t window_last);

    std::vector<SaMad> segments_;
    std::uint32_t last_sent_ = 0;
    std::uint32_t last_acked_ = 0;
    std::uint32_t window_last_ = 1;
};

// ---------------------------------------------------------------------------
// Receiving

struct RmppReceiveLimits {
    std::uint32_t window = 32;          // segments acknowledged at a time
    std::uint32_t max_segments = 16384; // about 3.2 MB of records
};

class RmppReassembler {
public:
    explicit RmppReassembler(RmppReceiveLimits limits = {}) : limits_(limits) {}

    enum class Step : std::uint8_t { accepted, duplicate, complete };
    struct Result {
        Step step;
        std::optional<SaMad> ack;  // send this to the responder
    };
    // Takes the next MAD of the transfer. A response that is not RMPP
    // (Active clear, e.g. an error GetTableResp) completes at once when it
    // holds no records (AttributeOffset 0) or has a non-zero Status. A
    // segment seen before is a duplicate and gets the last ACK again (also
    // after completion: the responder missed the final ACK). After an
    // error every call returns that error.
    expected<Result, RmppError> add(const SaMad& mad);

    bool complete() const { return complete_; }
    // The first MAD's headers (status, attribute, AttributeOffset, ...);
    // its data is cleared. Valid after the first accepted MAD.
    const SaMad& header() const { return header_; }
    // The records' bytes, without the padding after the last one. Valid when complete.
    bytes payload() const { return payload_; }
    std::uint32_t segments() const { return next_ - 1; }

private:
    expected<Result, RmppError> fail(RmppError e);
    expected<Result, RmppError> accept_first(const SaMad& mad);
    expected<Result, RmppError> accept_next(const SaMad& mad);
    bool same_transfer(const SaMad& mad) const;

    RmppReceiveLimits limits_;
    SaMad header_;
    std::vector<std::uint8_t> payload_;
    std::optional<RmppError> error_;
    bool started_ = false;
    bool complete_ = false;
    std::uint32_t total_ = 0;       // first PayloadLength
    std::uint32_t count_ = 0;       // segments announced
    std::uint32_t next_ = 1;        // next SegmentNumber expected
    std::uint32_t window_last_ = 1; // last segment of the current receive window
    std::optional<SaMad> last_ack_;
};

// A whole transfer at once: the MADs in arrival order, every one checked
// (a repeat of a segment is fine, anything else after the last is not).
struct RmppTransfer {
    SaMad header;  // the first MAD's headers, data cleared
    std::vector<std::uint8_t> payload;
};
expected<RmppTransfer, RmppError> reassemble(std::span<const SaMad> mads, RmppReceiveLimits limits = {});

// ---------------------------------------------------------------------------
// Records of a payload, AttributeOffset * 8 bytes apart. A payload cut
// short on purpose (libumad2sim hands over 224 bytes of a MAD) must be
// trimmed to whole records by the caller.
template <class Record>
expected<std::vector<Record>, RmppError> unpack_records(bytes payload, std::uint16_t attribute_offset) {
    std::vector<Record> out;
    if (payload.empty()) return out;
    const std::size_t stride = std::size_t{attribute_offset} * 8;
    if (stride < Record::size) return unexpected(RmppError::bad_attribute_offset);
    if (payload.size() % stride != 0) return unexpected(RmppError::partial_record);
    out.reserve(payload.size() / stride);
    for (std::size_t at = 0; at < payload.size(); at += stride) out.push_back(Record::read_from(payload.data() + at));
    return out;
}

}  // namespace ipoibd::sa
