#include "runtime/capabilities.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <memory>

#include "runtime/journal_fields.h"

namespace ipoibd::runtime {

namespace {

struct CapFree {
    void operator()(void* p) const { ::cap_free(p); }
};
using CapSet = std::unique_ptr<std::remove_pointer_t<cap_t>, CapFree>;

bool has_permitted(cap_t caps, cap_value_t cap) {
    cap_flag_value_t v = CAP_CLEAR;
    return ::cap_get_flag(caps, cap, CAP_PERMITTED, &v) == 0 && v == CAP_SET;
}

std::string join(const std::vector<std::string>& names) {
    std::string out;
    for (const auto& n : names) out += (out.empty() ? "" : " ") + n;
    return out.empty() ? "none" : out;
}

}  // namespace

std::string capability_name(cap_value_t cap) {
    std::unique_ptr<char, CapFree> name(::cap_to_name(cap));
    return name ? std::string(name.get()) : "cap_" + std::to_string(cap);
}

expected<cap_value_t, std::string> parse_capability(std::string_view name) {
    std::string lower(name);
    std::transform(lower.begin(), lower.end(), lower.begin(),
                   [](char c) { return static_cast<char>(std::tolower(static_cast<unsigned char>(c))); });
    cap_value_t cap = 0;
    if (lower.empty() || ::cap_from_name(lower.c_str(), &cap) < 0)
        return unexpected("unknown capability '" + std::string(name) + "' (e.g. cap_net_admin)");
    return cap;
}

expected<CapabilityReport, SysError> keep_only_capabilities(std::span<const cap_value_t> keep, Logger& log) {
    CapabilityReport report;
    if (::geteuid() != 0) {
        log.notice("not running as root: capabilities left as the service manager set them");
        return report;
    }
    CapSet current(::cap_get_proc());
    if (!current) return unexpected(SysError{"read the process capabilities", errno});
    auto kept = [&](cap_value_t c) { return std::find(keep.begin(), keep.end(), c) != keep.end(); };

    // 1. The bounding set, while CAP_SETPCAP is still effective.
    for (cap_value_t c = 0; CAP_IS_SUPPORTED(c); ++c) {
        if (kept(c) || ::cap_get_bound(c) == 0) continue;
        if (::cap_drop_bound(c) < 0)
            return unexpected(SysError{"drop " + capability_name(c) + " from the bounding set", errno});
    }
    // 2. Permitted and effective: the kept ones we hold; inheritable: none.
    CapSet wanted(::cap_init());
    if (!wanted) return unexpected(SysError{"allocate a capability set", errno});
    std::vector<cap_value_t> list;
    for (cap_value_t c : keep) {
        if (CAP_IS_SUPPORTED(c) && has_permitted(current.get(), c)) {
            list.push_back(c);
            report.kept.push_back(capability_name(c));
        } else {
            report.missing.push_back(capability_name(c));
        }
    }
    if (!list.empty() &&
        (::cap_set_flag(wanted.get(), CAP_PERMITTED, static_cast<int>(list.size()), list.data(), CAP_SET) < 0 ||
         ::cap_set_flag(wanted.get(), CAP_EFFECTIVE, static_cast<int>(list.size()), list.data(), CAP_SET) < 0))
        return unexpected(SysError{"build the capability set", errno});
    if (::cap_set_proc(wanted.get()) < 0) return unexpected(SysError{"set the process capabilities", errno});
    // 3. Ambient: cleared already by the permitted set shrinking, but say so.
    if (::cap_reset_ambient() < 0 && errno != EINVAL && errno != ENOSYS)
        return unexpected(SysError{"clear the ambient capabilities", errno});

    report.changed = true;
    const std::string kept_names = join(report.kept);
    log.info("capabilities reduced to " + kept_names, {{field::kCapabilities, kept_names}});
    if (!report.missing.empty()) {
        const std::string missing_names = join(report.missing);
        log.warning("capabilities not held, so not kept: " + missing_names,
                    {{field::kCapabilitiesMissing, missing_names}});
    }
    return report;
}

}  // namespace ipoibd::runtime
