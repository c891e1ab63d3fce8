// What the SA's record files share (sa_server.cpp and one file per record
// type beside it): the status for success, the selector rules of IBA
// 15.2.5.16, P_Key membership, and the answer to a Get or GetTable, one
// record or an RMPP table. Not for use outside fabric/sa/.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "fabric/sa/sa_server.h"
#include "sa_client/rmpp.h"

namespace ipoibd::fabric::sa_detail {

using sa::Selector;

inline constexpr std::uint16_t kOk = 0;

// Does `have` satisfy `want` under `selector` (IBA 15.2.5.16 selectors)?
// MTU and rate codes grow with the value they name for the codes used here.
inline bool selects(Selector selector, std::uint8_t have, std::uint8_t want) {
    switch (selector) {
        case Selector::greater_than: return have > want;
        case Selector::less_than: return have < want;
        case Selector::exactly: return have == want;
        case Selector::largest_available: return true;
    }
    return false;
}

// Rate codes are not ordered by speed (5 Gb/s is code 5, 10 Gb/s code 3).
inline bool rate_selects(Selector selector, std::uint8_t have, std::uint8_t want) {
    const auto h = sa::rate_mbps(have), w = sa::rate_mbps(want);
    switch (selector) {
        case Selector::greater_than: return h > w;
        case Selector::less_than: return h < w;
        case Selector::exactly: return h == w;
        case Selector::largest_available: return true;
    }
    return false;
}

// PacketLifeTime selectors: 0 greater than, 1 less than, 2 exactly, 3 the
// smallest available (IBA 15.2.5.16): any group or path does.
inline bool life_selects(Selector selector, std::uint8_t have, std::uint8_t want) {
    return selector == Selector::largest_available || selects(selector, have, want);
}

inline bool holds_pkey(const SaPort& port, std::uint16_t pkey) {
    return std::any_of(port.pkeys.begin(), port.pkeys.end(),
                       [&](std::uint16_t k) { return (k & 0x7FFF) == (pkey & 0x7FFF) && (k & 0x7FFF) != 0; });
}

// Get and GetTable: the methods that read records.
inline bool reads_records(std::uint8_t method) { return method == ib::method::get || method == ib::method::get_table; }

}  // namespace ipoibd::fabric::sa_detail

namespace ipoibd::fabric {

// A Get's one record (ERR_NO_RECORDS, ERR_TOO_MANY_RECORDS), or a
// GetTable's records: one MAD, or RMPP segments sent a window at a time.
template <class Record>
std::vector<sa::SaMad> SaServer::respond_records(const Request& r, const std::vector<Record>& found) {
    sa::SaMad& resp = r.resp;
    const std::uint8_t method = r.method();
    if (found.empty() && method == ib::method::get_table) return sa::rmpp_segments(resp, {});
    if (found.empty()) {
        resp.header.status = sa::sa_status::err_no_records;
        ++counters_.errors;
        return {resp};
    }
    if (method == ib::method::get) {
        if (found.size() > 1) {
            resp.header.status = sa::sa_status::err_too_many_records;
            ++counters_.errors;
            return {resp};
        }
        (void)sa::put_record(found.front(), resp);
        resp.attribute_offset = sa::attribute_offset_for(Record::size);
        return {resp};
    }
    resp.attribute_offset = sa::attribute_offset_for(Record::size);
    const auto payload = sa::pack_records(std::span<const Record>(found));
    auto segments = sa::rmpp_segments(resp, payload);
    if (segments.size() == 1) return segments;
    // More than one segment: one RMPP window at a time, as the requester's
    // ACKs open them (IBA 13.6).
    if (transfers_.size() >= config_.max_transfers) {
        resp.header.status = sa::sa_status::err_no_resources;
        ++counters_.errors;
        return {resp};
    }
    const std::pair<std::uint16_t, std::uint32_t> key{r.to.lid, static_cast<std::uint32_t>(resp.header.transaction_id)};
    Transfer t{sa::RmppSender(std::move(segments)), r.to, now_ + config_.rmpp_timeout, 1};
    auto first = t.sender.start();
    transfers_.insert_or_assign(key, std::move(t));
    ++counters_.rmpp_transfers;
    return first;
}

}  // namespace ipoibd::fabric
