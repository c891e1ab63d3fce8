// libFuzzer target for the ibsim <-> libumad2sim wire codecs
// (fabric/sim_wire.h).
//
// Input: one selector byte, then the message. Selector bit 0 picks the
// channel: clear, an 80-byte control message; set, a 288-byte sim_request.
// Bit 1 repairs the message so that it is likely to parse (the exact size,
// the magic, a known type, a len or length in range), so the fuzzer spends
// its time past the first checks as well as on them.
//
// Invariants checked (a violation aborts):
//   - every error is one of its enum's values and has a name;
//   - parse accepts exactly what an independent reading of the format
//     accepts, and refuses the rest with the first failing check's error;
//   - a parsed control message re-encodes to the very same 80 bytes;
//   - a parsed sim_request re-encodes to the same 288 bytes except where the
//     format says to ignore: LID bytes 2-3 and the padding (written zero),
//     the MAD past `length` (written zero); and its MAD past `length` is
//     zero;
//   - parse(encode(x)) == x for both;
//   - each control payload that reads re-writes to the same meaningful
//     bytes and reads back the same;
//   - the TID rewrites change only their own 16 bits.
#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "common/byte_io.h"
#include "fabric/sim_wire.h"

namespace {

using namespace ipoibd;
using namespace ipoibd::fabric::sim;

void check(bool ok) {
    if (!ok) std::abort();
}

template <class E>
void check_error(E e, E last) {
    check(e <= last);
    check(std::strcmp(to_string(e), "unknown") != 0);
}

// ---------------------------------------------------------------------------
// Control channel

void repair_ctl(std::vector<std::uint8_t>& m) {
    m.resize(kCtlMessageSize, 0);
    store_le32(m.data() + ctl_offset::magic, kCtlMagic);
    store_le32(m.data() + ctl_offset::type, load_le32(m.data() + ctl_offset::type) % 12);  // 11: one unknown
    store_le32(m.data() + ctl_offset::len, load_le32(m.data() + ctl_offset::len) % 66);   // 65: one too long
}

// The format read again, independently of parse_ctl's code: the error
// parse_ctl must give, or none.
std::optional<CtlError> ctl_refusal(const std::vector<std::uint8_t>& m) {
    if (m.size() != 80) return CtlError::wrong_size;
    if (m[0] != 0xef || m[1] != 0xbe || m[2] != 0xad || m[3] != 0xde) return CtlError::bad_magic;
    if (m[9] != 0 || m[10] != 0 || m[11] != 0 || m[8] > 10) return CtlError::unknown_type;
    if (m[13] != 0 || m[14] != 0 || m[15] != 0 || m[12] > 64) return CtlError::bad_length;
    return std::nullopt;
}

void check_payloads(const CtlMessage& m) {
    const auto same_bytes = [&](const CtlMessage& again, std::size_t from, std::size_t to) {
        check(std::equal(m.data.begin() + from, m.data.begin() + to, again.data.begin() + from));
    };
    if (auto info = read_client_info(m)) {
        CtlMessage again;
        check(put_client_info(*info, again).has_value());
        same_bytes(again, 0, client_info_offset::nodeid + info->nodeid.size() + 1);  // through the NUL
        auto back = read_client_info(again);
        check(back.has_value() && *back == *info);
    } else {
        check_error(info.error(), kLastPayloadError);
    }
    if (auto vendor = read_vendor(m)) {
        CtlMessage again;
        put_vendor(*vendor, again);
        same_bytes(again, 0, vendor_offset::padding);
        same_bytes(again, vendor_offset::fw_ver, Vendor::size);
        auto back = read_vendor(again);
        check(back.has_value() && *back == *vendor);
    } else {
        check_error(vendor.error(), kLastPayloadError);
    }
    if (auto port = read_get_port_reply(m)) {
        CtlMessage again;
        put_get_port_reply(*port, again);
        same_bytes(again, 0, get_port_offset::port_state + 1);
        auto back = read_get_port_reply(again);
        check(back.has_value() && *back == *port);
    } else {
        check_error(port.error(), kLastPayloadError);
    }
    if (auto issm = read_set_issm(m)) {
        CtlMessage again;
        put_set_issm(*issm, again);
        same_bytes(again, 0, kSetIssmSize);
        auto back = read_set_issm(again);
        check(back.has_value() && *back == *issm);
    } else {
        check_error(issm.error(), kLastPayloadError);
    }
}

void fuzz_ctl(std::vector<std::uint8_t> bytes_in, bool repair) {
    if (repair) repair_ctl(bytes_in);
    const std::optional<CtlError> refusal = ctl_refusal(bytes_in);
    auto m = parse_ctl(bytes_in);
    check(m.has_value() == !refusal.has_value());
    if (!m) {
        check_error(m.error(), kLastCtlError);
        check(m.error() == *refusal);
        return;
    }
    auto again = encode_ctl(*m);
    check(again.has_value());
    check(std::equal(again->begin(), again->end(), bytes_in.begin(), bytes_in.end()));
    auto back = parse_ctl(*again);
    check(back.has_value() && *back == *m);
    check_payloads(*m);
}

// ---------------------------------------------------------------------------
// Data channel

void repair_request(std::vector<std::uint8_t>& r) {
    r.resize(kSimRequestSize, 0);
    store_be64(r.data() + request_offset::length, load_be64(r.data() + request_offset::length) % 258);
}

bool is_ignored(std::size_t at, std::uint64_t length) {
    if (at == request_offset::dlid + 2 || at == request_offset::dlid + 3) return true;
    if (at == request_offset::slid + 2 || at == request_offset::slid + 3) return true;
    if (at >= request_offset::padding && at < request_offset::padding + kRequestPaddingSize) return true;
    return at >= request_offset::mad + length;
}

void check_tid_rewrites(std::uint64_t tid, std::uint16_t value) {
    constexpr std::uint64_t kLow48 = 0x0000'FFFF'FFFF'FFFFULL;
    constexpr std::uint64_t kNotAgent = ~0x0000'FFFF'0000'0000ULL;
    const std::uint64_t slotted = with_slot(tid, value);
    check(slot_of(slotted) == value && (slotted & kLow48) == (tid & kLow48));
    const std::uint64_t agented = with_agent(tid, value);
    check(agent_of(agented) == value && (agented & kNotAgent) == (tid & kNotAgent));
}

void fuzz_request(std::vector<std::uint8_t> bytes_in, bool repair) {
    if (repair) repair_request(bytes_in);
    auto r = parse_request(bytes_in);
    if (bytes_in.size() != 288) {
        check(!r.has_value() && r.error() == RequestError::wrong_size);
        return;
    }
    const std::uint64_t length = load_be64(bytes_in.data() + 24);
    check(r.has_value() == (length <= 256));
    if (!r) {
        check_error(r.error(), kLastRequestError);
        check(r.error() == RequestError::bad_length);
        return;
    }
    check(r->length == length && r->mad_bytes().size() == length);
    check(std::all_of(r->mad.begin() + static_cast<std::ptrdiff_t>(length), r->mad.end(),
                      [](std::uint8_t b) { return b == 0; }));
    auto again = encode_request(*r);
    check(again.has_value());
    for (std::size_t at = 0; at < kSimRequestSize; ++at)
        check((*again)[at] == (is_ignored(at, length) ? 0 : bytes_in[at]));
    auto back = parse_request(*again);
    check(back.has_value() && *back == *r);
    check_tid_rewrites(load_be64(r->mad.data() + 8), r->dlid);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::uint8_t selector = data[0];
    std::vector<std::uint8_t> message(data + 1, data + size);
    const bool repair = (selector & 2) != 0;
    if ((selector & 1) == 0)
        fuzz_ctl(std::move(message), repair);
    else
        fuzz_request(std::move(message), repair);
    return 0;
}
