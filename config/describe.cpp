// describe() and diff_for_reload(): both walk the key table, so a key added
// there is printed and compared without another line here.
#include <string>

#include "config/daemon_config.h"
#include "config/keys.h"

namespace ipoibd::config {

std::string describe(const DaemonConfig& config) {
    std::string out =
        "# ipoibd.conf(5): the effective configuration, every key with its value,\n"
        "# defaults included (ipoibd --check-config).\n";
    std::string_view section;
    for (const KeySpec& key : config_keys()) {
        if (key.section != section) {
            section = key.section;
            out += "\n[" + std::string(section) + "]\n";
        }
        out += "# " + std::string(key.help) + "\n";
        const auto values = key.get(config);
        if (values.empty()) out += "#" + std::string(key.name) + " = " + std::string(key.value_name) + "\n";
        for (const auto& value : values) {
            out += std::string(key.name) + " =";
            if (!value.empty()) out += " " + value;
            out += "\n";
        }
    }
    return out;
}

ReloadPlan diff_for_reload(const DaemonConfig& running, const DaemonConfig& reloaded) {
    ReloadPlan plan;
    for (const KeySpec& key : config_keys()) {
        if (key.get(running) == key.get(reloaded)) continue;
        (key.apply == Apply::live ? plan.live : plan.restart).push_back(key.full_name());
    }
    return plan;
}

}  // namespace ipoibd::config
