#include "sa_client/rmpp.h"

#include <algorithm>
#include <cstring>

namespace ipoibd::sa {

const char* to_string(RmppError e) {
    switch (e) {
        case RmppError::not_rmpp: return "response with records is not RMPP";
        case RmppError::bad_rmpp_version: return "RMPPVersion is not 1";
        case RmppError::bad_rmpp_type: return "unexpected RMPPType";
        case RmppError::bad_rmpp_status: return "RMPPStatus not normal";
        case RmppError::stopped: return "peer sent STOP or ABORT";
        case RmppError::inconsistent_first: return "inconsistent First flag and SegmentNumber";
        case RmppError::out_of_sequence: return "segment out of sequence";
        case RmppError::segment_number_too_big: return "SegmentNumber too big";
        case RmppError::new_window_last_too_small: return "NewWindowLast too small";
        case RmppError::bad_payload_length: return "impossible PayloadLength";
        case RmppError::inconsistent_last: return "inconsistent Last flag and PayloadLength";
        case RmppError::header_mismatch: return "segment headers differ from the first segment";
        case RmppError::too_large: return "transfer larger than the receiver accepts";
        case RmppError::bad_attribute_offset: return "AttributeOffset does not fit the records";
        case RmppError::partial_record: return "payload is not a whole number of records";
        case RmppError::incomplete: return "transfer ended before its last segment";
    }
    return "unknown";
}

std::uint8_t rmpp_abort_status(RmppError e) {
    switch (e) {
        case RmppError::bad_rmpp_version: return rmpp_status::unsupported_version;
        case RmppError::bad_rmpp_type: return rmpp_status::bad_rmpp_type;
        case RmppError::bad_rmpp_status: return rmpp_status::illegal_status;
        case RmppError::inconsistent_first: return rmpp_status::inconsistent_first_and_segment_number;
        case RmppError::segment_number_too_big: return rmpp_status::segment_number_too_big;
        case RmppError::new_window_last_too_small: return rmpp_status::new_window_last_too_small;
        case RmppError::bad_payload_length:
        case RmppError::inconsistent_last: return rmpp_status::inconsistent_last_and_payload_length;
        case RmppError::too_large: return rmpp_status::resources_exhausted;
        default: return rmpp_status::unspecified;
    }
}

// ---------------------------------------------------------------------------
// Sending

std::vector<SaMad> rmpp_segments(const SaMad& response, bytes payload, std::uint8_t r_resp_time) {
    const std::size_t count = std::max<std::size_t>(1, (payload.size() + kSaDataSize - 1) / kSaDataSize);
    const std::size_t pad = count * kSaDataSize - payload.size();
    std::vector<SaMad> segments(count, response);
    for (std::size_t i = 0; i < count; ++i) {
        SaMad& m = segments[i];
        const std::size_t at = i * kSaDataSize;
        const std::size_t n = std::min(kSaDataSize, payload.size() - std::min(at, payload.size()));
        m.data.fill(0);
        if (n > 0) std::memcpy(m.data.data(), payload.data() + at, n);
        const bool first = i == 0;
        const bool last = i + 1 == count;
        m.rmpp.rmpp_version = kRmppVersion;
        m.rmpp.rmpp_type = rmpp_type::data;
        m.rmpp.r_resp_time = first ? r_resp_time : kRmppNoRespTime;
        m.rmpp.rmpp_flags = static_cast<std::uint8_t>(rmpp_flag::active | (first ? rmpp_flag::first : 0) |
                                                      (last ? rmpp_flag::last : 0));
        m.rmpp.rmpp_status = rmpp_status::normal;
        m.rmpp.data1 = static_cast<std::uint32_t>(i + 1);
        std::size_t payload_length = 0;
        if (last) payload_length = kRmppSegmentPayload - pad;
        if (first) payload_length = count * kRmppSegmentPayload - pad;
        m.rmpp.data2 = static_cast<std::uint32_t>(payload_length);
    }
    return segments;
}

namespace {

// The headers of `received`, turned around: R bit flipped, data cleared.
SaMad turned_around(const SaMad& received) {
    SaMad m = received;
    m.header.method = static_cast<std::uint8_t>(m.header.method ^ ib::method::response_bit);
    m.data.fill(0);
    return m;
}

}  // namespace

SaMad make_rmpp_ack(const SaMad& data, std::uint32_t segment_number, std::uint32_t new_window_last) {
    SaMad m = turned_around(data);
    m.rmpp = {.rmpp_version = kRmppVersion,
              .rmpp_type = rmpp_type::ack,
              .r_resp_time = kRmppNoRespTime,
              .rmpp_flags = rmpp_flag::active,
              .rmpp_status = rmpp_status::normal,
              .data1 = segment_number,
              .data2 = new_window_last};
    return m;
}

SaMad make_rmpp_abort(const SaMad& received, std::uint8_t status) {
    SaMad m = turned_around(received);
    m.rmpp = {.rmpp_version = kRmppVersion,
              .rmpp_type = status == rmpp_status::resources_exhausted ? rmpp_type::stop : rmpp_type::abort,
              .r_resp_time = kRmppNoRespTime,
              .rmpp_flags = rmpp_flag::active,
              .rmpp_status = status,
              .data1 = 0,
              .data2 = 0};
    return m;
}

std::vector<SaMad> RmppSender::send_through(std::uint32_t window_last) {
    std::vector<SaMad> out;
    const auto end = std::min<std::uint32_t>(window_last, segment_count());
    for (; last_sent_ < end; ++last_sent_) out.push_back(segments_[last_sent_]);
    return out;
}

std::vector<SaMad> RmppSender::start() {
    last_sent_ = 0;
    last_acked_ = 0;
    window_last_ = 1;
    return send_through(window_last_);
}

expected<std::vector<SaMad>, RmppError> RmppSender::on_ack(const SaMad& ack) {
    if (segments_.empty()) return unexpected(RmppError::segment_number_too_big);
    if (ack.rmpp.rmpp_version != kRmppVersion) return unexpected(RmppError::bad_rmpp_version);
    if (ack.rmpp.rmpp_type == rmpp_type::stop || ack.rmpp.rmpp_type == rmpp_type::abort)
        return unexpected(RmppError::stopped);
    if (ack.rmpp.rmpp_type != rmpp_type::ack) return unexpected(RmppError::bad_rmpp_type);
    if (ack.rmpp.rmpp_status != rmpp_status::normal) return unexpected(RmppError::bad_rmpp_status);
    const SaMad& first = segments_.front();
    if (ack.header.transaction_id != first.header.transaction_id ||
        ack.header.attribute_id != first.header.attribute_id ||
        ack.header.mgmt_class != first.header.mgmt_class)
        return unexpected(RmppError::header_mismatch);
    const std::uint32_t acked = ack.rmpp.segment_number();
    const std::uint32_t new_window_last = ack.rmpp.new_window_last();
    if (acked > last_sent_) return unexpected(RmppError::segment_number_too_big);
    if (new_window_last < acked) return unexpected(RmppError::new_window_last_too_small);
    if (acked < last_acked_) return std::vector<SaMad>{};  // stale: an earlier ACK overtaken
    last_acked_ = acked;
    window_last_ = std::max(window_last_, new_window_last);
    if (complete()) return std::vector<SaMad>{};
    return send_through(window_last_);
}

std::vector<SaMad> RmppSender::retransmit() const {
    return {segments_.begin() + last_acked_, segments_.begin() + last_sent_};
}

// ---------------------------------------------------------------------------
// Receiving

namespace {

// PayloadLength of the last of `count` segments of a `total`-byte transfer.
std::size_t last_segment_length(std::uint32_t total, std::uint32_t count) {
    return std::size_t{total} - (std::size_t{count} - 1) * kRmppSegmentPayload;
}

}  // namespace

expected<RmppReassembler::Result, RmppError> RmppReassembler::fail(RmppError e) {
    error_ = e;
    return unexpected(e);
}

bool RmppReassembler::same_transfer(const SaMad& mad) const {
    return mad.header == header_.header && mad.sm_key == header_.sm_key &&
           mad.attribute_offset == header_.attribute_offset && mad.component_mask == header_.component_mask;
}

expected<RmppReassembler::Result, RmppError> RmppReassembler::accept_first(const SaMad& mad) {
    started_ = true;
    header_ = mad;
    header_.data.fill(0);
    if (!mad.rmpp.active()) {
        // A single MAD: fine when it carries no records (OpenSM answers a
        // failed GetTable this way, AttributeOffset 0) or is an error.
        if (mad.attribute_offset != 0 && mad.header.status == 0) return fail(RmppError::not_rmpp);
        complete_ = true;
        return Result{Step::complete, std::nullopt};
    }
    if (mad.rmpp.rmpp_version != kRmppVersion) return fail(RmppError::bad_rmpp_version);
    if (mad.rmpp.rmpp_type != rmpp_type::data) return fail(RmppError::bad_rmpp_type);
    if (mad.rmpp.rmpp_status != rmpp_status::normal) return fail(RmppError::bad_rmpp_status);
    if (!mad.rmpp.first() && mad.rmpp.segment_number() > 1) return fail(RmppError::out_of_sequence);
    if (!mad.rmpp.first() || mad.rmpp.segment_number() != 1) return fail(RmppError::inconsistent_first);

    total_ = mad.rmpp.payload_length();
    if (total_ < kSaClassHeaderSize) return fail(RmppError::bad_payload_length);
    const auto count = static_cast<std::uint32_t>((std::size_t{total_} + kRmppSegmentPayload - 1) / kRmppSegmentPayload);
    if (last_segment_length(total_, count) < kSaClassHeaderSize) return fail(RmppError::bad_payload_length);
    if (count > limits_.max_segments) return fail(RmppError::too_large);
    count_ = count;
    if (mad.rmpp.last() != (count_ == 1)) return fail(RmppError::inconsistent_last);
    return accept_next(mad);
}

expected<RmppReassembler::Result, RmppError> RmppReassembler::accept_next(const SaMad& mad) {
    const std::uint32_t number = mad.rmpp.segment_number();
    const bool last = number == count_;
    const std::size_t n = last ? last_segment_length(total_, count_) - kSaClassHeaderSize : kSaDataSize;
    payload_.insert(payload_.end(), mad.data.begin(), mad.data.begin() + static_cast<std::ptrdiff_t>(n));
    ++next_;
    if (last) {
        complete_ = true;
        last_ack_ = make_rmpp_ack(mad, number, std::max(window_last_, number));
        return Result{Step::complete, last_ack_};
    }
    if (number != window_last_) return Result{Step::accepted, std::nullopt};
    window_last_ = std::min(count_, number + std::max<std::uint32_t>(1, limits_.window));
    last_ack_ = make_rmpp_ack(mad, number, window_last_);
    return Result{Step::accepted, last_ack_};
}

expected<RmppReassembler::Result, RmppError> RmppReassembler::add(const SaMad& mad) {
    if (error_) return unexpected(*error_);
    if (!started_) return accept_first(mad);
    if (!same_transfer(mad)) return fail(RmppError::header_mismatch);
    if (mad.rmpp.rmpp_version != kRmppVersion || !mad.rmpp.active()) return fail(RmppError::bad_rmpp_version);
    if (mad.rmpp.rmpp_type == rmpp_type::stop || mad.rmpp.rmpp_type == rmpp_type::abort)
        return fail(RmppError::stopped);
    if (mad.rmpp.rmpp_type != rmpp_type::data) return fail(RmppError::bad_rmpp_type);
    if (mad.rmpp.rmpp_status != rmpp_status::normal) return fail(RmppError::bad_rmpp_status);

    const std::uint32_t number = mad.rmpp.segment_number();
    if (number < next_) return Result{Step::duplicate, last_ack_};  // our ACK was lost: say it again
    if (complete_ || number > count_) return fail(RmppError::segment_number_too_big);
    if (number > next_) return fail(RmppError::out_of_sequence);
    if (mad.rmpp.first()) return fail(RmppError::inconsistent_first);
    if (mad.rmpp.last() != (number == count_)) return fail(RmppError::inconsistent_last);
    if (number == count_ && mad.rmpp.payload_length() != last_segment_length(total_, count_))
        return fail(RmppError::inconsistent_last);
    return accept_next(mad);
}

expected<RmppTransfer, RmppError> reassemble(std::span<const SaMad> mads, RmppReceiveLimits limits) {
    RmppReassembler r(limits);
    for (const SaMad& m : mads) {
        auto step = r.add(m);
        if (!step) return unexpected(step.error());
    }
    if (!r.complete()) return unexpected(RmppError::incomplete);
    const bytes payload = r.payload();
    return RmppTransfer{r.header(), std::vector<std::uint8_t>(payload.begin(), payload.end())};
}

}  // namespace ipoibd::sa
