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
//     (reserved bits cleared once, stable after);
//   - the CM engine (cm/cm_engine.h), fed every 256-byte record of the
//     input in turn (CM header forced, time moving by the record's first
//     byte, a listener on the ServiceID most records name), never holds
//     more connections than its bound and answers one MAD with at most two.
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "cm/cm_engine.h"
#include "cm/cm_mad.h"

using namespace ipoibd;

namespace {
void check(bool ok) {
    if (!ok) std::abort();
}
}  // namespace

namespace {
void engine_run(const std::uint8_t* data, std::size_t size) {
    // Comm IDs 1, 2, 3...: inputs can name our connections (random ones
    // they could not, and runs would not repeat).
    cm::CmEngine e({.local_ca_guid = 0xABCD, .max_connections = 4, .max_output = 64, .max_events = 64,
                    .comm_id_source = [n = std::uint32_t{0}]() mutable { return ++n; }},
                   7);
    e.listen(cm::ipoib_service_id(0x48));
    auto now = cm::Clock::time_point{} + std::chrono::hours(1);
    for (std::size_t at = 0; at + ib::kMadSize <= size; at += ib::kMadSize) {
        std::vector<std::uint8_t> mad(data + at, data + at + ib::kMadSize);
        mad[0] = 1;
        mad[1] = ib::mgmt_class::com_mgt;
        mad[2] = cm::kClassVersion;
        mad[3] = ib::method::send;
        if (mad[4] & 1) store_be64(mad.data() + ib::kMadHeaderSize + 8, cm::ipoib_service_id(0x48));
        now += std::chrono::milliseconds(std::int64_t{mad[5]} << (mad[6] & 15));
        e.tick(now);
        (void)e.take_output();
        e.receive(mad, {.lid = static_cast<std::uint16_t>(1 + (mad[7] & 0x3F))}, now);
        check(e.take_output().size() <= 2);
        check(e.connections() <= 4);
        for (const cm::Event& ev : e.take_events())
            if (ev.kind == cm::EventKind::req_received && (mad[8] & 1))
                (void)e.accept(ev.id, {.local_qpn = 0x100}, now);
    }
}
}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    engine_run(data, size);
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


