// libFuzzer target for the CM MAD codecs (cm/cm_mad.h).
//
// Input: one MAD (the first 256 bytes; shorter inputs are decoded as they
// are, to exercise the length check). The first four bytes are forced to a
// CM header (base version 1, class 0x07, version 2, Send) when the input's
// last byte is odd, so that most inputs reach the attribute decoders.
//
// Invariants checked (a violation aborts):
//   - decode never reads past 256 bytes and refuses short inputs;
//   - a decoded message encodes to a MAD that decodes to the same message
//     and transaction ID, with the header of a CM Send;
//   - encode(decode(encode(m))) == encode(m): the encoding is canonical
//     (reserved bits cleared once, stable after).
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cm/cm_mad.h"

using namespace ipoibd;

namespace {
void check(bool ok) {
    if (!ok) std::abort();
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    std::vector<std::uint8_t> mad(data, data + std::min<std::size_t>(size, ib::kMadSize));
    if (mad.size() >= 4 && size > 0 && (data[size - 1] & 1)) {
        mad[0] = 1;
        mad[1] = ib::mgmt_class::com_mgt;
        mad[2] = cm::kClassVersion;
        mad[3] = ib::method::send;
    }
    const auto decoded = cm::decode(mad);
    if (mad.size() < ib::kMadSize) {
        check(!decoded && decoded.error() == cm::DecodeError::too_short);
        return 0;
    }
    if (!decoded) return 0;
    const auto wire = cm::encode(decoded->message, decoded->transaction_id);
    check(wire[1] == ib::mgmt_class::com_mgt && wire[2] == cm::kClassVersion && wire[3] == ib::method::send);
    const auto again = cm::decode(wire);
    check(again.has_value());
    check(again->transaction_id == decoded->transaction_id);
    check(again->message == decoded->message);
    check(cm::encode(again->message, again->transaction_id) == wire);
    return 0;
}
