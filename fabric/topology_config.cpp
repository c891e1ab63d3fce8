#include "fabric/topology_config.h"

#include <algorithm>
#include <set>

#include "common/utf8.h"

namespace ipoibd::fabric {
namespace {

constexpr std::uint16_t kRoceV2Port = 4791;

// `a` with another port ("198.18.0.1:18516", "[2001:db8::1]:18516": the
// port follows the last colon).
SocketAddress with_port(const SocketAddress& a, std::size_t port) {
    std::string text = a.to_string();
    text = text.substr(0, text.rfind(':') + 1) + std::to_string(port);
    return *parse_socket_address(text);
}

}  // namespace

expected<std::vector<TopologySwitch>, std::string> topology_switches(const TopologyRequest& request) {
    using routing::NetNode;
    const routing::NetFile& net = *request.net;
    // The file's switches and their addresses.
    std::vector<std::size_t> switches;  // node indices
    for (std::size_t i = 0; i < net.nodes.size(); ++i)
        if (net.nodes[i].type == NetNode::Type::switch_node) switches.push_back(i);
    if (switches.empty()) return unexpected("--topology " + escape_text(request.file) + ": the file has no switch");
    for (const auto& [name, address] : request.addresses) {
        const std::size_t n = net.find(name);
        if (n == net.nodes.size() || net.nodes[n].type != NetNode::Type::switch_node)
            return unexpected("--switch-address " + escape_text(name) + ": no switch \"" + escape_text(name) + "\" in " +
                              escape_text(request.file));
    }
    std::map<std::size_t, SocketAddress> address_of;  // by node index
    std::map<std::string, std::string> used;          // address -> switch
    for (std::size_t k = 0; k < switches.size(); ++k) {
        const NetNode& node = net.nodes[switches[k]];
        SocketAddress a = request.base.listen;
        if (const auto it = request.addresses.find(node.id); it != request.addresses.end()) {
            a = it->second;
        } else {
            const std::size_t port = request.base.listen.port() + k;
            if (request.base.listen.port() == 0 || port > 65535)
                return unexpected("switch \"" + escape_text(node.id) + "\" has no address: give --switch-address " +
                                  escape_text(node.id) + "=ADDR:PORT (or a --listen port that leaves room for " +
                                  std::to_string(switches.size()) + " switches)");
            a = with_port(a, port);
        }
        if (a.port() == kRoceV2Port)
            return unexpected("switch \"" + escape_text(node.id) + "\": port 4791 is RoCEv2's; the soft fabric must not use it");
        if (const auto [it, fresh] = used.emplace(a.to_string(), node.id); !fresh)
            return unexpected("switches \"" + escape_text(it->second) + "\" and \"" + escape_text(node.id) +
                              "\" would both listen on " + a.to_string());
        address_of[switches[k]] = a;
    }
    // Which of them run here.
    std::set<std::size_t> here;
    for (const std::string& name : request.run_here) {
        const std::size_t n = net.find(name);
        if (n == net.nodes.size() || net.nodes[n].type != NetNode::Type::switch_node)
            return unexpected("--topology-switch " + escape_text(name) + ": no switch \"" + escape_text(name) + "\" in " +
                              escape_text(request.file));
        here.insert(n);
    }
    if (here.empty()) here.insert(switches.begin(), switches.end());

    std::vector<TopologySwitch> out;
    for (std::size_t n : switches) {
        if (!here.contains(n)) continue;
        const NetNode& node = net.nodes[n];
        TopologySwitch s;
        s.name = node.id;
        s.options = request.base;
        s.options.listen = address_of.at(n);
        s.options.sw.guid = node.node_guid;
        s.options.sm.guid = node.node_guid;
        s.options.sw.description = node.description.substr(0, 64);
        s.options.sw.num_ports = static_cast<std::uint8_t>(std::min<unsigned>(node.num_ports, Switch::kMaxPorts));
        s.options.sw.links.clear();
        for (const routing::NetCable& c : net.cables) {
            if (c.a != n && c.b != n) continue;
            const bool here_is_a = c.a == n;
            const std::size_t other = here_is_a ? c.b : c.a;
            if (net.nodes[other].type != NetNode::Type::switch_node) continue;  // a host's position: any port will do
            const std::uint8_t port = here_is_a ? c.a_port : c.b_port;
            if (other == n)
                return unexpected("switch \"" + escape_text(node.id) + "\" is cabled to itself (line " +
                                  std::to_string(c.line) + "): a link needs two switches");
            s.options.sw.links.push_back(IslConfig{.port = port, .peer = address_of.at(other)});
        }
        std::sort(s.options.sw.links.begin(), s.options.sw.links.end(),
                  [](const IslConfig& x, const IslConfig& y) { return x.port < y.port; });
        if (auto error = Switch::config_error(s.options.sw))
            return unexpected("switch \"" + escape_text(node.id) + "\": " + *error);
        // One SM at most: the first switch here keeps the base's choice.
        if (!out.empty()) s.options.sm_enabled = false;
        out.push_back(std::move(s));
    }
    return out;
}

}  // namespace ipoibd::fabric
