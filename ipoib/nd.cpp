#include "ipoib/nd.h"

#include <cstdint>
#include <cstring>

namespace ipoibd::ipoib {
namespace {

// ---------------------------------------------------------------------------
// Ones' complement arithmetic (RFC 1071).
std::uint64_t add_words(std::uint64_t acc, bytes b, std::size_t skip_word_at = SIZE_MAX) {
    for (std::size_t i = 0; i < b.size(); i += 2) {
        if (i == skip_word_at) continue;
        const std::uint32_t hi = b[i];
        const std::uint32_t lo = i + 1 < b.size() ? b[i + 1] : 0;  // odd length: pad with zero
        acc += (hi << 8) | lo;
    }
    return acc;
}

std::uint16_t fold(std::uint64_t acc) {
    while (acc >> 16) acc = (acc & 0xFFFF) + (acc >> 16);
    return static_cast<std::uint16_t>(acc);
}

std::uint64_t pseudo_header_sum(const Ipv6Address& source, const Ipv6Address& destination, std::size_t length) {
    std::uint64_t acc = add_words(0, source);
    acc = add_words(acc, destination);
    const auto upper_layer_length = static_cast<std::uint32_t>(length);
    acc += upper_layer_length >> 16;
    acc += upper_layer_length & 0xFFFF;
    acc += kNextHeaderIcmpv6;
    return acc;
}

// The sum over pseudo-header and message, stored checksum included, is all
// ones for a correct message (either form of ones' complement zero stored).
bool checksum_ok(const Ipv6Address& source, const Ipv6Address& destination, bytes message) {
    return fold(add_words(pseudo_header_sum(source, destination, message.size()), message)) == 0xFFFF;
}

void store_checksum(const Ipv6Address& source, const Ipv6Address& destination, mutable_bytes message) {
    store_be16(message.data() + kIcmpv6OffsetChecksum, icmpv6_checksum(source, destination, message));
}

// ---------------------------------------------------------------------------
// Steps 1-3 and the length half of step 4 of parse_nd().
struct Located {
    Ipv6Header ip;
    std::size_t icmp_offset = 0;
    std::size_t icmp_length = 0;
    NdType type = NdType::neighbor_solicitation;
};

// IANA "IPv6 Extension Header Types" (RFC 7045 2): numbers that are
// extension headers, as opposed to upper-layer protocols.
bool is_extension_header(std::uint8_t nh) {
    switch (nh) {
        case 0: case 43: case 44: case 50: case 51: case 60: case 135: case 139: case 140: case 253: case 254:
            return true;
        default:
            return false;
    }
}

bool is_nd_type(std::uint8_t t) {
    return t >= static_cast<std::uint8_t>(NdType::router_solicitation) &&
           t <= static_cast<std::uint8_t>(NdType::redirect);
}

expected<Located, NdError> locate(bytes packet) {
    if (packet.size() < Ipv6Header::size) return unexpected(NdError::truncated_ipv6_header);
    Located loc;
    loc.ip = Ipv6Header::read_from(packet.data());
    if (loc.ip.version != Ipv6Header::kVersion) return unexpected(NdError::bad_ip_version);
    if (loc.ip.payload_length == 0 || loc.ip.payload_length > packet.size() - Ipv6Header::size)
        return unexpected(NdError::bad_payload_length);
    const std::size_t end = Ipv6Header::size + loc.ip.payload_length;

    std::size_t at = Ipv6Header::size;
    std::uint8_t next = loc.ip.next_header;
    for (std::size_t count = 0; next != kNextHeaderIcmpv6; ++count) {
        if (next == kNextHeaderFragment) return unexpected(NdError::fragmented);
        const bool skippable = (next == kNextHeaderHopByHop && count == 0) || next == kNextHeaderDestinationOptions;
        if (!skippable)
            return unexpected(is_extension_header(next) ? NdError::unsupported_extension_header : NdError::not_icmpv6);
        if (count == kMaxExtensionHeaders) return unexpected(NdError::too_many_extension_headers);
        if (end - at < 2) return unexpected(NdError::truncated_extension_header);
        const std::size_t length = (std::size_t{packet[at + 1]} + 1) * 8;  // Hdr Ext Len: 8-octet units past the first 8
        if (end - at < length) return unexpected(NdError::truncated_extension_header);
        next = packet[at];
        at += length;
    }

    loc.icmp_offset = at;
    loc.icmp_length = end - at;
    if (loc.icmp_length == 0) return unexpected(NdError::truncated_message);
    if (!is_nd_type(packet[at])) return unexpected(NdError::not_nd);
    loc.type = static_cast<NdType>(packet[at]);
    if (loc.icmp_length < nd_fixed_size(loc.type)) return unexpected(NdError::truncated_message);
    return loc;
}

// Calls f(type, option bytes) for each option after checking its length.
template <class F>
expected<void, NdError> walk_options(bytes options, F&& f) {
    std::size_t at = 0;
    while (at < options.size()) {
        if (options.size() - at < 2) return unexpected(NdError::bad_option_length);
        const std::size_t length = std::size_t{options[at + 1]} * 8;
        if (length == 0 || length > options.size() - at) return unexpected(NdError::bad_option_length);
        if (auto r = f(options[at], options.subspan(at, length)); !r) return r;
        at += length;
    }
    return {};
}

// Step 6: the RFC 4861 rules that need nothing but the message.
expected<void, NdError> check_rules(const NdMessage& m) {
    const Ipv6Address& src = m.ip.source;
    const Ipv6Address& dst = m.ip.destination;
    switch (m.type) {
        case NdType::router_solicitation:  // RFC 4861 6.1.1
            if (is_ipv6_unspecified(src) && m.source_lla) return unexpected(NdError::link_layer_option_not_allowed);
            break;
        case NdType::router_advertisement:  // 6.1.2
            if (!is_ipv6_link_local(src)) return unexpected(NdError::source_not_link_local);
            break;
        case NdType::neighbor_solicitation:  // 7.1.1
            if (is_ipv6_multicast(m.target)) return unexpected(NdError::multicast_target);
            if (is_ipv6_unspecified(src)) {
                if (!is_solicited_node_multicast(dst)) return unexpected(NdError::dad_not_to_solicited_node);
                if (m.source_lla) return unexpected(NdError::link_layer_option_not_allowed);
            }
            break;
        case NdType::neighbor_advertisement:  // 7.1.2
            if (is_ipv6_multicast(m.target)) return unexpected(NdError::multicast_target);
            if (is_ipv6_multicast(dst) && m.solicited) return unexpected(NdError::solicited_to_multicast);
            break;
        case NdType::redirect:  // 8.1
            if (!is_ipv6_link_local(src)) return unexpected(NdError::source_not_link_local);
            if (is_ipv6_multicast(m.destination)) return unexpected(NdError::multicast_target);
            if (!is_ipv6_link_local(m.target) && m.target != m.destination)
                return unexpected(NdError::bad_redirect_target);
            break;
    }
    return {};
}

Ipv6Address read_ipv6(const std::uint8_t* p) {
    Ipv6Address a;
    std::memcpy(a.data(), p, a.size());
    return a;
}

// The header fields and the fixed part of a located message.
NdMessage read_fixed_part(const Located& loc, bytes msg) {
    NdMessage m;
    m.ip = loc.ip;
    m.icmp_offset = loc.icmp_offset;
    m.icmp_length = loc.icmp_length;
    m.type = loc.type;
    m.checksum = load_be16(msg.data() + kIcmpv6OffsetChecksum);
    if (m.type == NdType::neighbor_solicitation || m.type == NdType::neighbor_advertisement ||
        m.type == NdType::redirect)
        m.target = read_ipv6(msg.data() + kNdOffsetTarget);
    if (m.type == NdType::redirect) m.destination = read_ipv6(msg.data() + kNdOffsetRedirectDestination);
    if (m.type == NdType::neighbor_advertisement) {
        const std::uint8_t flags = msg[kNaOffsetFlags];
        m.router = (flags & kNaFlagRouter) != 0;
        m.solicited = (flags & kNaFlagSolicited) != 0;
        m.override_flag = (flags & kNaFlagOverride) != 0;
    }
    return m;
}

// Step 5: the IPoIB option of `kind`, if there is one; other options are
// only length-checked.
expected<std::optional<HwAddress>, NdError> read_link_layer_option(bytes options, NdOptionType kind) {
    std::optional<HwAddress> found;
    const auto walked = walk_options(options, [&](std::uint8_t type, bytes opt) -> expected<void, NdError> {
        if (type != static_cast<std::uint8_t>(kind)) return {};
        if (opt.size() != LinkLayerAddressOption::size) return unexpected(NdError::wrong_link_layer_option_length);
        if (found) return unexpected(NdError::duplicate_link_layer_option);
        found = HwAddress::read_from(opt.data() + LinkLayerAddressOption::kOffsetAddress);
        return {};
    });
    if (!walked) return unexpected(walked.error());
    return found;
}

// IPv6 header of a built packet: no extension headers, ICMPv6, Hop Limit 255.
void write_nd_ipv6_header(std::uint8_t* p, const Ipv6Address& source, const Ipv6Address& destination,
                          std::size_t icmp_length) {
    Ipv6Header h;
    h.payload_length = static_cast<std::uint16_t>(icmp_length);
    h.next_header = kNextHeaderIcmpv6;
    h.hop_limit = kNdHopLimit;
    h.source = source;
    h.destination = destination;
    h.write_to(p);
}

// Writes type, code 0, zero checksum, zero reserved word and the target.
void write_target_message_head(std::uint8_t* p, NdType type, const Ipv6Address& target) {
    std::memset(p, 0, kNdOffsetTarget);
    p[0] = static_cast<std::uint8_t>(type);
    std::memcpy(p + kNdOffsetTarget, target.data(), target.size());
}

}  // namespace

// ---------------------------------------------------------------------------
void Ipv6Header::write_to(std::uint8_t* p) const {
    store_be32(p, (std::uint32_t{version} << 28) | (std::uint32_t{traffic_class} << 20) | (flow_label & 0xFFFFF));
    store_be16(p + kOffsetPayloadLength, payload_length);
    p[kOffsetNextHeader] = next_header;
    p[kOffsetHopLimit] = hop_limit;
    std::memcpy(p + kOffsetSource, source.data(), source.size());
    std::memcpy(p + kOffsetDestination, destination.data(), destination.size());
}

Ipv6Header Ipv6Header::read_from(const std::uint8_t* p) {
    Ipv6Header h;
    const std::uint32_t w = load_be32(p);
    h.version = static_cast<std::uint8_t>(w >> 28);
    h.traffic_class = static_cast<std::uint8_t>(w >> 20);
    h.flow_label = w & 0xFFFFF;
    h.payload_length = load_be16(p + kOffsetPayloadLength);
    h.next_header = p[kOffsetNextHeader];
    h.hop_limit = p[kOffsetHopLimit];
    h.source = read_ipv6(p + kOffsetSource);
    h.destination = read_ipv6(p + kOffsetDestination);
    return h;
}

const char* to_string(NdType t) {
    switch (t) {
        case NdType::router_solicitation: return "router_solicitation";
        case NdType::router_advertisement: return "router_advertisement";
        case NdType::neighbor_solicitation: return "neighbor_solicitation";
        case NdType::neighbor_advertisement: return "neighbor_advertisement";
        case NdType::redirect: return "redirect";
    }
    return "unknown";
}

std::size_t nd_fixed_size(NdType t) {
    switch (t) {
        case NdType::router_solicitation: return 8;
        case NdType::router_advertisement: return 16;
        case NdType::neighbor_solicitation: return 24;
        case NdType::neighbor_advertisement: return 24;
        case NdType::redirect: return 40;
    }
    return 0;
}

NdOptionType link_layer_option_of(NdType t) {
    return t == NdType::neighbor_advertisement || t == NdType::redirect ? NdOptionType::target_link_layer_address
                                                                          : NdOptionType::source_link_layer_address;
}

const char* to_string(NdError e) {
    switch (e) {
        case NdError::truncated_ipv6_header: return "truncated_ipv6_header";
        case NdError::bad_ip_version: return "bad_ip_version";
        case NdError::bad_payload_length: return "bad_payload_length";
        case NdError::truncated_extension_header: return "truncated_extension_header";
        case NdError::fragmented: return "fragmented";
        case NdError::unsupported_extension_header: return "unsupported_extension_header";
        case NdError::too_many_extension_headers: return "too_many_extension_headers";
        case NdError::not_icmpv6: return "not_icmpv6";
        case NdError::not_nd: return "not_nd";
        case NdError::truncated_message: return "truncated_message";
        case NdError::bad_checksum: return "bad_checksum";
        case NdError::bad_hop_limit: return "bad_hop_limit";
        case NdError::bad_code: return "bad_code";
        case NdError::bad_option_length: return "bad_option_length";
        case NdError::wrong_link_layer_option_length: return "wrong_link_layer_option_length";
        case NdError::duplicate_link_layer_option: return "duplicate_link_layer_option";
        case NdError::link_layer_option_not_allowed: return "link_layer_option_not_allowed";
        case NdError::dad_not_to_solicited_node: return "dad_not_to_solicited_node";
        case NdError::multicast_target: return "multicast_target";
        case NdError::solicited_to_multicast: return "solicited_to_multicast";
        case NdError::source_not_link_local: return "source_not_link_local";
        case NdError::bad_redirect_target: return "bad_redirect_target";
        case NdError::short_buffer: return "short_buffer";
        case NdError::field_out_of_range: return "field_out_of_range";
        case NdError::too_long: return "too_long";
        case NdError::count_: break;
    }
    return "unknown";
}

std::uint16_t icmpv6_checksum(const Ipv6Address& source, const Ipv6Address& destination, bytes message) {
    const std::uint64_t acc =
        add_words(pseudo_header_sum(source, destination, message.size()), message, kIcmpv6OffsetChecksum);
    return static_cast<std::uint16_t>(~fold(acc));
}

// ---------------------------------------------------------------------------
expected<NdMessage, NdError> parse_nd(bytes packet) {
    const auto loc = locate(packet);
    if (!loc) return unexpected(loc.error());
    const bytes msg = packet.subspan(loc->icmp_offset, loc->icmp_length);

    // 4. integrity, then the header fields
    if (!checksum_ok(loc->ip.source, loc->ip.destination, msg)) return unexpected(NdError::bad_checksum);
    if (loc->ip.hop_limit != kNdHopLimit) return unexpected(NdError::bad_hop_limit);
    if (msg[1] != 0) return unexpected(NdError::bad_code);

    NdMessage m = read_fixed_part(*loc, msg);
    // 5. options
    const NdOptionType kind = link_layer_option_of(m.type);
    auto lla = read_link_layer_option(msg.subspan(nd_fixed_size(m.type)), kind);
    if (!lla) return unexpected(lla.error());
    if (kind == NdOptionType::source_link_layer_address) {
        m.source_lla = *lla;
    } else {
        m.target_lla = *lla;
    }
    // 6. rules
    if (auto r = check_rules(m); !r) return unexpected(r.error());
    return m;
}

// ---------------------------------------------------------------------------
expected<std::size_t, NdError> rewrite_link_layer_option(bytes in, const std::optional<HwAddress>& address,
                                                         mutable_bytes out) {
    if (address && !address->fields_in_range()) return unexpected(NdError::field_out_of_range);
    const auto loc = locate(in);
    if (!loc) return unexpected(loc.error());
    const bytes msg = in.subspan(loc->icmp_offset, loc->icmp_length);
    if (!checksum_ok(loc->ip.source, loc->ip.destination, msg)) return unexpected(NdError::bad_checksum);
    if (msg[1] != 0) return unexpected(NdError::bad_code);
    const NdOptionType kind = link_layer_option_of(loc->type);
    if (address && kind == NdOptionType::source_link_layer_address && is_ipv6_unspecified(loc->ip.source))
        return unexpected(NdError::link_layer_option_not_allowed);

    // Pass 1: check the options and size the result.
    const std::size_t fixed = nd_fixed_size(loc->type);
    const bytes options = msg.subspan(fixed);
    std::size_t kept = 0;
    const auto sized = walk_options(options, [&](std::uint8_t type, bytes opt) {
        if (type != static_cast<std::uint8_t>(kind)) kept += opt.size();
        return expected<void, NdError>();
    });
    if (!sized) return unexpected(sized.error());
    const std::size_t icmp_length = fixed + kept + (address ? LinkLayerAddressOption::size : 0);
    const std::size_t payload_length = loc->icmp_offset - Ipv6Header::size + icmp_length;
    if (payload_length > 0xFFFF) return unexpected(NdError::too_long);
    const std::size_t total = Ipv6Header::size + payload_length;
    if (out.size() < total) return unexpected(NdError::short_buffer);

    // Pass 2: headers and fixed part as they were, then the options.
    std::memcpy(out.data(), in.data(), loc->icmp_offset + fixed);
    store_be16(out.data() + Ipv6Header::kOffsetPayloadLength, static_cast<std::uint16_t>(payload_length));
    std::size_t w = loc->icmp_offset + fixed;
    bool written = false;
    auto write_ours = [&] {
        LinkLayerAddressOption{kind, *address}.write_to(out.data() + w);
        w += LinkLayerAddressOption::size;
        written = true;
    };
    (void)walk_options(options, [&](std::uint8_t type, bytes opt) {
        if (type != static_cast<std::uint8_t>(kind)) {
            std::memcpy(out.data() + w, opt.data(), opt.size());
            w += opt.size();
        } else if (address && !written) {
            write_ours();
        }
        return expected<void, NdError>();
    });
    if (address && !written) write_ours();

    store_checksum(loc->ip.source, loc->ip.destination, out.subspan(loc->icmp_offset, icmp_length));
    return total;
}

// ---------------------------------------------------------------------------
expected<std::size_t, NdError> build_neighbor_solicitation(const NeighborSolicitation& ns, mutable_bytes out) {
    NdMessage m;
    m.type = NdType::neighbor_solicitation;
    m.ip.source = ns.source;
    m.ip.destination = ns.destination;
    m.target = ns.target;
    m.source_lla = ns.source_lla;
    if (auto r = check_rules(m); !r) return unexpected(r.error());
    if (ns.source_lla && !ns.source_lla->fields_in_range()) return unexpected(NdError::field_out_of_range);

    const std::size_t icmp_length =
        nd_fixed_size(m.type) + (ns.source_lla ? LinkLayerAddressOption::size : 0);
    const std::size_t total = Ipv6Header::size + icmp_length;
    if (out.size() < total) return unexpected(NdError::short_buffer);
    write_nd_ipv6_header(out.data(), ns.source, ns.destination, icmp_length);
    std::uint8_t* p = out.data() + Ipv6Header::size;
    write_target_message_head(p, m.type, ns.target);
    if (ns.source_lla)
        LinkLayerAddressOption{NdOptionType::source_link_layer_address, *ns.source_lla}.write_to(p + nd_fixed_size(m.type));
    store_checksum(ns.source, ns.destination, out.subspan(Ipv6Header::size, icmp_length));
    return total;
}

expected<std::size_t, NdError> build_neighbor_advertisement(const NeighborAdvertisement& na, mutable_bytes out) {
    NdMessage m;
    m.type = NdType::neighbor_advertisement;
    m.ip.source = na.source;
    m.ip.destination = na.destination;
    m.target = na.target;
    m.solicited = na.solicited;
    m.target_lla = na.target_lla;
    if (auto r = check_rules(m); !r) return unexpected(r.error());
    if (na.target_lla && !na.target_lla->fields_in_range()) return unexpected(NdError::field_out_of_range);

    const std::size_t icmp_length =
        nd_fixed_size(m.type) + (na.target_lla ? LinkLayerAddressOption::size : 0);
    const std::size_t total = Ipv6Header::size + icmp_length;
    if (out.size() < total) return unexpected(NdError::short_buffer);
    write_nd_ipv6_header(out.data(), na.source, na.destination, icmp_length);
    std::uint8_t* p = out.data() + Ipv6Header::size;
    write_target_message_head(p, m.type, na.target);
    p[kNaOffsetFlags] = static_cast<std::uint8_t>((na.router ? kNaFlagRouter : 0) |
                                                  (na.solicited ? kNaFlagSolicited : 0) |
                                                  (na.override_flag ? kNaFlagOverride : 0));
    if (na.target_lla)
        LinkLayerAddressOption{NdOptionType::target_link_layer_address, *na.target_lla}.write_to(p + nd_fixed_size(m.type));
    store_checksum(na.source, na.destination, out.subspan(Ipv6Header::size, icmp_length));
    return total;
}

NeighborSolicitation make_dad_solicitation(const Ipv6Address& tentative) {
    return {.source = kIpv6Unspecified, .destination = solicited_node_multicast(tentative), .target = tentative,
            .source_lla = std::nullopt};
}

NeighborSolicitation make_resolution_solicitation(const Ipv6Address& our_ip, const HwAddress& our_hw,
                                                  const Ipv6Address& target) {
    return {.source = our_ip, .destination = solicited_node_multicast(target), .target = target, .source_lla = our_hw};
}

NeighborSolicitation make_unicast_solicitation(const Ipv6Address& our_ip, const HwAddress& our_hw,
                                               const Ipv6Address& target) {
    return {.source = our_ip, .destination = target, .target = target, .source_lla = our_hw};
}

NeighborAdvertisement make_solicited_advertisement(const NdMessage& ns, const HwAddress& our_hw, bool router) {
    const bool dad = is_ipv6_unspecified(ns.ip.source);
    return {.source = ns.target,
            .destination = dad ? kIpv6AllNodes : ns.ip.source,
            .target = ns.target,
            .router = router,
            .solicited = !dad,
            .override_flag = true,
            .target_lla = our_hw};
}

NeighborAdvertisement make_unsolicited_advertisement(const Ipv6Address& our_ip, const HwAddress& our_hw,
                                                     bool router) {
    return {.source = our_ip,
            .destination = kIpv6AllNodes,
            .target = our_ip,
            .router = router,
            .solicited = false,
            .override_flag = true,
            .target_lla = our_hw};
}

}  // namespace ipoibd::ipoib
