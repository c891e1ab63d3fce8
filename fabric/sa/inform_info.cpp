// InformInfo (IBA 13.4.8.3, 15.2.5.12) and InformInfoRecord: subscriptions
// to the generic traps 64-67, and the Reports sent for them, each again
// until its ReportResp comes.
#include "fabric/sa/sa_server.h"

#include "fabric/sa/sa_internal.h"

namespace ipoibd::fabric {

using namespace sa_detail;

std::vector<sa::SaMad> SaServer::on_inform_info(const Request& r) {
    if (r.method() != ib::method::set) return reply(r, ib::mad_status::method_attr_not_supported);
    const auto info = sa::get_record<sa::InformInfo>(r.mad);
    (void)sa::put_record(info, r.resp);
    const std::uint16_t status = inform(info, r.requester, r.to.qpn);
    if (status == kOk) r.resp.attribute_offset = sa::attribute_offset_for(sa::InformInfo::size);
    return reply(r, status);
}

std::vector<sa::SaMad> SaServer::on_inform_info_record(const Request& r) {
    if (!reads_records(r.method())) return reply(r, ib::mad_status::method_attr_not_supported);
    const auto rec = sa::get_record<sa::InformInfoRecord>(r.mad);
    return respond_records(r, query_subscriptions(rec, r.mask(), r.requester));
}

// Subscriptions as InformInfoRecords, selected by SubscriberGID and Enum.
// Enum numbers a subscriber's subscriptions in the order they were made.
// Shown, as the topology records, only to requesters that share a
// partition with the subscriber.
std::vector<sa::InformInfoRecord> SaServer::query_subscriptions(const sa::InformInfoRecord& req, std::uint64_t mask,
                                                                const SaPort& requester) const {
    namespace ic = sa::inform_info_record_comp;
    std::vector<sa::InformInfoRecord> out;
    std::map<std::uint64_t, std::uint16_t> next_enum;
    for (const Subscription& sub : subscriptions_) {
        if (sub.guid != requester.guid) {
            const SaPort* subscriber = port_by_guid(sub.guid);
            if (!subscriber || !shares_partition(*subscriber, requester)) {
                ++next_enum[sub.guid];
                continue;
            }
        }
        sa::InformInfoRecord r;
        store_be64(r.subscriber_gid.data(), config_.subnet_prefix);
        store_be64(r.subscriber_gid.data() + 8, sub.guid);
        r.enum_ = next_enum[sub.guid]++;
        r.inform_info = sa::generic_trap_subscription(sub.trap, true);
        r.inform_info.qpn = sub.qpn;
        if ((mask & ic::subscriber_gid) && r.subscriber_gid != req.subscriber_gid) continue;
        if ((mask & ic::enum_) && r.enum_ != req.enum_) continue;
        if ((mask & ic::trap_number_device_id) && r.inform_info.trap_number_device_id != req.inform_info.trap_number_device_id)
            continue;
        out.push_back(r);
    }
    return out;
}

std::uint16_t SaServer::inform(const sa::InformInfo& info, const SaPort& requester, std::uint32_t qpn) {
    if (info.is_generic != 1) return sa::sa_status::err_req_invalid;  // vendor traps: none are issued
    const Subscription sub{requester.guid, qpn, info.trap_number_device_id};
    const auto same = [&](const Subscription& s) { return s.guid == sub.guid && s.trap == sub.trap && s.qpn == sub.qpn; };
    if (info.subscribe == 1) {
        if (std::any_of(subscriptions_.begin(), subscriptions_.end(), same)) return kOk;
        const auto held = std::count_if(subscriptions_.begin(), subscriptions_.end(),
                                        [&](const Subscription& s) { return s.guid == sub.guid; });
        if (static_cast<std::size_t>(held) >= config_.max_subscriptions_per_port) {
            ++counters_.subscriptions_over_limit;
            return sa::sa_status::err_no_resources;
        }
        subscriptions_.push_back(sub);
        return kOk;
    }
    const auto before = subscriptions_.size();
    std::erase_if(subscriptions_, same);
    return subscriptions_.size() < before ? kOk : sa::sa_status::err_req_invalid;
}

// A Report of `trap` about `gid` to every subscriber that may know of it:
// one sharing a partition with the port `about` (traps 64/65), or holding
// the group's P_Key (66/67).
void SaServer::report(std::uint16_t trap, const ib::Gid& gid, std::uint16_t group_pkey, std::optional<SaPort> about,
                      Clock::time_point now) {
    if (subscriptions_.empty()) return;
    ib::Gid issuer{};
    store_be64(issuer.data(), config_.subnet_prefix);
    const sa::Notice notice = sa::make_gid_trap(trap, gid, config_.sm_lid, issuer);
    for (const Subscription& sub : subscriptions_) {
        if (sub.trap != sa::kInformAllTraps && sub.trap != trap) continue;
        const SaPort* subscriber = port_by_guid(sub.guid);
        if (!subscriber) continue;
        std::optional<std::uint16_t> pkey;
        if (about) {
            for (std::uint16_t k : subscriber->pkeys)
                if (holds_pkey(*about, k) && !pkey) pkey = k;
        } else if (holds_pkey(*subscriber, group_pkey)) {
            pkey = static_cast<std::uint16_t>(group_pkey | 0x8000);
        }
        if (!pkey) continue;
        if (pending_reports_.size() >= config_.max_pending_reports) {
            ++counters_.reports_dropped;
            continue;
        }
        PendingReport p;
        p.out.dlid = subscriber->lid;
        p.out.dest_qp = sub.qpn;
        p.out.pkey = *pkey;
        p.out.mad.header.method = ib::method::report;
        p.out.mad.header.attribute_id = sa::sa_attr::notice;
        const std::uint32_t tid = next_report_tid_++;
        p.out.mad.header.transaction_id = (std::uint64_t{0x5A5A0000} << 32) | tid;  // high half: this SA's reports
        (void)sa::put_record(notice, p.out.mad);
        pending_reports_[tid] = p;
        send_report(tid, now);
    }
}

void SaServer::send_report(std::size_t tid, Clock::time_point now) {
    PendingReport& p = pending_reports_.at(static_cast<std::uint32_t>(tid));
    ++p.tries;
    p.deadline = now + config_.report_timeout;
    outbound_.push_back(p.out);
    ++counters_.reports_sent;
}


}  // namespace ipoibd::fabric
