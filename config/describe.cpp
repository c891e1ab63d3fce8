// describe(), diff_for_reload() and apply_live(): all walk the key table, so a key added
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
    for (const ChildSection& child : config.children) {
        out += "\n[" + std::string(kChildSection) + " " + child.name + "]\n";
        for (const ChildKeySpec& key : child_keys()) {
            const auto values = key.get(child);
            if (values.empty() && !key.repeatable)
                out += "#" + std::string(key.name) + " = " + std::string(key.value_name) + "\n";
            for (const auto& value : values) out += std::string(key.name) + " = " + value + "\n";
        }
    }
    return out;
}

namespace {

// The reloaded children as they run after the reload: one that follows the
// parent's mode keeps the parent's running mode, since [interface] mode
// changes at a restart (the children that follow it with it).
std::vector<ChildSection> children_after_reload(const DaemonConfig& running, const DaemonConfig& reloaded) {
    std::vector<ChildSection> out = reloaded.children;
    for (ChildSection& c : out)
        if (c.mode_from_parent) c.mode = running.interface.mode;
    return out;
}

}  // namespace

ReloadPlan diff_for_reload(const DaemonConfig& running, const DaemonConfig& reloaded) {
    ReloadPlan plan;
    for (const KeySpec& key : config_keys()) {
        if (key.get(running) == key.get(reloaded)) continue;
        (key.apply == Apply::live ? plan.live : plan.restart).push_back(key.full_name());
    }
    // Children are added, removed and rebuilt by reload.
    auto find = [](const std::vector<ChildSection>& v, const std::string& name) -> const ChildSection* {
        for (const ChildSection& c : v)
            if (c.name == name) return &c;
        return nullptr;
    };
    const std::vector<ChildSection> children = children_after_reload(running, reloaded);
    for (const ChildSection& c : running.children)
        if (const ChildSection* now = find(children, c.name); now == nullptr || !(*now == c))
            plan.live.push_back(std::string(kChildSection) + " " + c.name);
    for (const ChildSection& c : children)
        if (find(running.children, c.name) == nullptr) plan.live.push_back(std::string(kChildSection) + " " + c.name);
    return plan;
}

DaemonConfig apply_live(const DaemonConfig& running, const DaemonConfig& reloaded) {
    DaemonConfig out = running;
    for (const KeySpec& key : config_keys()) {
        if (key.apply != Apply::live) continue;
        const auto values = key.get(reloaded);
        if (values == key.get(running)) continue;
        if (key.clear) key.clear(out);
        // The values were printed from a parsed configuration: they parse.
        for (const std::string& value : values) (void)key.set(out, value);
    }
    out.children = children_after_reload(running, reloaded);
    return out;
}

}  // namespace ipoibd::config
