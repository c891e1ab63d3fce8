#include "fabric/routing/net_file.h"

#include <cctype>
#include <charconv>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>

#include "common/utf8.h"

namespace ipoibd::fabric::routing {
namespace {

constexpr std::uint64_t kIbsimSwitchGuidBase = 0x200000;
constexpr std::uint64_t kIbsimCaGuidBase = 0x100000;

// A cursor over one line.
class Cursor {
public:
    explicit Cursor(std::string_view s) : s_(s) {}
    void skip_space() {
        while (i_ < s_.size() && std::isspace(static_cast<unsigned char>(s_[i_]))) ++i_;
    }
    bool done() const { return i_ >= s_.size(); }
    char peek() const { return done() ? '\0' : s_[i_]; }
    bool eat(char c) {
        if (peek() != c) return false;
        ++i_;
        return true;
    }
    std::string_view word() {  // letters, digits, '_'
        const std::size_t start = i_;
        while (i_ < s_.size() && (std::isalnum(static_cast<unsigned char>(s_[i_])) || s_[i_] == '_')) ++i_;
        return s_.substr(start, i_ - start);
    }
    std::optional<unsigned long> number() {
        unsigned long v = 0;
        const auto [end, ec] = std::from_chars(s_.data() + i_, s_.data() + s_.size(), v);
        if (ec != std::errc() || end == s_.data() + i_) return std::nullopt;
        i_ = static_cast<std::size_t>(end - s_.data());
        return v;
    }
    std::optional<std::uint64_t> hex_number() {
        if (s_.substr(i_, 2) == "0x" || s_.substr(i_, 2) == "0X") i_ += 2;
        std::uint64_t v = 0;
        const auto [end, ec] = std::from_chars(s_.data() + i_, s_.data() + s_.size(), v, 16);
        if (ec != std::errc() || end == s_.data() + i_) return std::nullopt;
        i_ = static_cast<std::size_t>(end - s_.data());
        return v;
    }
    std::optional<std::string_view> quoted() {
        if (!eat('"')) return std::nullopt;
        const std::size_t end = s_.find('"', i_);
        if (end == std::string_view::npos) return std::nullopt;
        const std::string_view v = s_.substr(i_, end - i_);
        i_ = end + 1;
        return v;
    }
    std::string_view rest() const { return done() ? std::string_view{} : s_.substr(i_); }

private:
    std::string_view s_;
    std::size_t i_ = 0;
};

struct PortLine {
    std::size_t node = 0;
    std::uint8_t port = 0;
    std::string peer_id;
    unsigned peer_port = 1;
    int line = 0;
};

// The description in a header's comment: `# "text" ...`.
std::string description_in(std::string_view comment) {
    Cursor c(comment);
    if (!c.eat('#')) return {};
    c.skip_space();
    if (const auto q = c.quoted()) return std::string(*q);
    return {};
}

class Parser {
public:
    Parser(std::string_view text, std::string file) : text_(text), file_(std::move(file)) {}

    expected<NetFile, NetError> run() {
        std::size_t start = 0;
        int line_no = 0;
        while (start <= text_.size()) {
            std::size_t end = text_.find('\n', start);
            if (end == std::string_view::npos) end = text_.size();
            std::string_view line = text_.substr(start, end - start);
            if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
            ++line_no;
            if (auto bad = take(line, line_no)) return unexpected(*bad);
            if (end == text_.size()) break;
            start = end + 1;
        }
        if (auto bad = resolve()) return unexpected(*bad);
        return std::move(net_);
    }

private:
    NetError error(int line, std::string message) const { return NetError{file_, line, std::move(message)}; }

    std::optional<NetError> take(std::string_view line, int line_no) {
        Cursor c(line);
        c.skip_space();
        if (c.done()) {  // a blank line ends a node, as in ibsim
            current_.reset();
            return std::nullopt;
        }
        if (c.peek() == '#') return std::nullopt;
        if (c.peek() == '[') {
            if (!current_) return error(line_no, "a port line outside a node (a Switch or Hca line comes first)");
            return port_line(c, line_no);
        }
        current_.reset();
        if (c.peek() == '@') return error(line_no, "aliases ('@') are not supported");
        const std::string word(c.word());
        if (word == "Switch") return header(c, NetNode::Type::switch_node, line_no);
        if (word == "Hca" || word == "Ca") return header(c, NetNode::Type::ca, line_no);
        if (word == "switchguid") return guid_base(c, switch_guid_, line_no);
        if (word == "caguid" || word == "hcaguids") return guid_base(c, ca_guid_, line_no);
        if (word == "vendid" || word == "devid" || word == "sysimgguid" || word == "width" || word == "speed" ||
            word == "extspeed")
            return std::nullopt;  // ibsim's node attributes: the soft fabric's nodes state their own
        if (word == "Rt" || word == "rtguid") return error(line_no, "routers are not supported");
        if (word == "include" || word == "module" || word == "do" || word == "pdebug")
            return error(line_no, "\"" + word + "\" lines are not supported (ibsim's; the file must be whole)");
        return error(line_no, "unknown line \"" + escape_text(line) + "\" (expected Switch, Hca, a port line or switchguid=/caguid=)");
    }

    std::optional<NetError> guid_base(Cursor& c, std::uint64_t& base, int line_no) {
        c.skip_space();
        const bool relative = c.eat('+');
        if (!relative && !c.eat('=')) return error(line_no, "expected '=' or '+' and a GUID");
        c.skip_space();
        const auto v = c.hex_number();
        if (!v) return error(line_no, "expected a GUID in hex");
        base = relative ? base + *v : *v;
        return std::nullopt;  // ibnetdiscover's "(guid)" after it repeats it
    }

    std::optional<NetError> header(Cursor& c, NetNode::Type type, int line_no) {
        c.skip_space();
        const auto ports = c.number();
        if (!ports || *ports == 0 || *ports > kMaxSwitchPorts)
            return error(line_no, "the number of ports must be 1 to 254");
        c.skip_space();
        const auto id = c.quoted();
        if (!id || id->empty()) return error(line_no, "expected the node's id in double quotes");
        if (index_.contains(std::string(*id)))
            return error(line_no, "node \"" + escape_text(*id) + "\" is defined twice (first on line " +
                                      std::to_string(net_.nodes[index_.at(std::string(*id))].line) + ")");
        c.skip_space();
        if (!c.done() && c.peek() != '#') return error(line_no, "unexpected \"" + escape_text(c.rest()) + "\" after the id");
        NetNode node;
        node.type = type;
        node.id = std::string(*id);
        node.description = description_in(c.rest());
        if (node.description.empty()) node.description = node.id;
        node.num_ports = static_cast<unsigned>(*ports);
        node.line = line_no;
        std::uint64_t& base = type == NetNode::Type::switch_node ? switch_guid_ : ca_guid_;
        node.node_guid = base;
        base += type == NetNode::Type::switch_node ? 1 : node.num_ports + 1;
        if (const auto it = guids_.find(node.node_guid); it != guids_.end())
            return error(line_no, "node GUID " + to_hex(node.node_guid) + " is node \"" + escape_text(net_.nodes[it->second].id) +
                                      "\"'s already");
        guids_[node.node_guid] = net_.nodes.size();
        index_[node.id] = net_.nodes.size();
        current_ = net_.nodes.size();
        net_.nodes.push_back(std::move(node));
        return std::nullopt;
    }

    std::optional<NetError> port_line(Cursor& c, int line_no) {
        const NetNode& node = net_.nodes[*current_];
        c.eat('[');
        const auto port = c.number();
        if (!port || !c.eat(']')) return error(line_no, "expected \"[port]\"");
        if (*port == 0 || *port > node.num_ports)
            return error(line_no, "\"" + escape_text(node.id) + "\" has ports 1 to " + std::to_string(node.num_ports) +
                                      ", not " + std::to_string(*port));
        if (c.eat('(') && (!c.hex_number() || !c.eat(')'))) return error(line_no, "expected \"(port GUID)\" in hex");
        c.skip_space();
        const auto peer = c.quoted();
        if (!peer || peer->empty()) return error(line_no, "expected the peer's id in double quotes");
        unsigned peer_port = 1;
        if (c.eat('[')) {
            const auto p = c.number();
            if (!p || !c.eat(']') || *p == 0 || *p > kMaxSwitchPorts)
                return error(line_no, "expected the peer's \"[port]\", 1 to 254");
            peer_port = static_cast<unsigned>(*p);
        }
        if (c.eat('(') && (!c.hex_number() || !c.eat(')'))) return error(line_no, "expected \"(port GUID)\" in hex");
        // ibsim's options (w=, s=, e=) and a comment.
        for (;;) {
            c.skip_space();
            if (c.done() || c.peek() == '#') break;
            const std::string_view key = c.word();
            if ((key != "w" && key != "s" && key != "e") || !c.eat('=') || !c.number())
                return error(line_no, "unexpected \"" + escape_text(c.rest()) + "\" in the port line (options are w=, s=, e=)");
        }
        const auto key = std::pair(*current_, static_cast<std::uint8_t>(*port));
        if (const auto it = listed_.find(key); it != listed_.end())
            return error(line_no, "port " + std::to_string(*port) + " of \"" + escape_text(node.id) + "\" is listed twice (first on line " +
                                      std::to_string(ports_[it->second].line) + ")");
        listed_[key] = ports_.size();
        ports_.push_back(PortLine{.node = *current_, .port = static_cast<std::uint8_t>(*port),
                                  .peer_id = std::string(*peer), .peer_port = peer_port, .line = line_no});
        return std::nullopt;
    }

    std::optional<NetError> resolve() {
        for (const PortLine& p : ports_) {
            const auto it = index_.find(p.peer_id);
            if (it == index_.end()) return error(p.line, "no node \"" + escape_text(p.peer_id) + "\" in the file");
            const NetNode& peer = net_.nodes[it->second];
            if (p.peer_port > peer.num_ports)
                return error(p.line, "\"" + escape_text(peer.id) + "\" has ports 1 to " + std::to_string(peer.num_ports) +
                                         ", not " + std::to_string(p.peer_port));
            const auto peer_key = std::pair(it->second, static_cast<std::uint8_t>(p.peer_port));
            if (peer_key == std::pair(p.node, p.port)) return error(p.line, "a port cannot be cabled to itself");
            if (const auto back = listed_.find(peer_key); back != listed_.end()) {
                const PortLine& q = ports_[back->second];
                const auto q_peer = index_.find(q.peer_id);
                if (q_peer == index_.end() || q_peer->second != p.node || q.peer_port != p.port)
                    return error(p.line, "cables \"" + escape_text(net_.nodes[p.node].id) + "\"[" + std::to_string(p.port) +
                                             "] to \"" + escape_text(peer.id) + "\"[" + std::to_string(p.peer_port) +
                                             "], but line " + std::to_string(q.line) + " cables that port to \"" +
                                             escape_text(q.peer_id) + "\"[" + std::to_string(q.peer_port) + "]");
                if (back->second < static_cast<std::size_t>(&p - ports_.data())) continue;  // listed from the other end first
            }
            NetCable cable{.a = p.node, .a_port = p.port, .b = it->second,
                           .b_port = static_cast<std::uint8_t>(p.peer_port), .line = p.line};
            if (cable.b < cable.a || (cable.b == cable.a && cable.b_port < cable.a_port)) {
                std::swap(cable.a, cable.b);
                std::swap(cable.a_port, cable.b_port);
            }
            net_.cables.push_back(cable);
        }
        return std::nullopt;
    }

    static std::string to_hex(std::uint64_t v) {
        std::ostringstream s;
        s << "0x" << std::hex << v;
        return s.str();
    }

    std::string_view text_;
    std::string file_;
    NetFile net_;
    std::optional<std::size_t> current_;
    std::uint64_t switch_guid_ = kIbsimSwitchGuidBase;
    std::uint64_t ca_guid_ = kIbsimCaGuidBase;
    std::map<std::string, std::size_t> index_;
    std::map<std::uint64_t, std::size_t> guids_;
    std::vector<PortLine> ports_;
    std::map<std::pair<std::size_t, std::uint8_t>, std::size_t> listed_;
};

}  // namespace

std::size_t NetFile::find(std::string_view id) const {
    for (std::size_t i = 0; i < nodes.size(); ++i)
        if (nodes[i].id == id) return i;
    return nodes.size();
}

std::string NetError::to_string() const { return escape_text(file) + ":" + std::to_string(line) + ": " + message; }

expected<NetFile, NetError> parse_net(std::string_view text, const std::string& file) { return Parser(text, file).run(); }

expected<NetFile, NetError> load_net(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) return unexpected(NetError{path, 0, "cannot open the topology file"});
    std::ostringstream all;
    all << in.rdbuf();
    return parse_net(all.str(), path);
}

expected<Topology, NetError> to_topology(const NetFile& net, const std::string& file) {
    Topology t;
    std::vector<std::uint32_t> switch_index(net.nodes.size(), 0);
    unsigned lid = 1;
    for (std::size_t i = 0; i < net.nodes.size(); ++i) {
        const NetNode& n = net.nodes[i];
        if (n.type != NetNode::Type::switch_node) continue;
        switch_index[i] = t.add_switch(n.node_guid, static_cast<std::uint16_t>(lid++), n.num_ports);
    }
    // CA ports get LIDs in file order, node by node and port by port.
    std::map<std::pair<std::size_t, std::uint8_t>, const NetCable*> ca_cable;
    for (const NetCable& c : net.cables) {
        const bool a_sw = net.nodes[c.a].type == NetNode::Type::switch_node;
        const bool b_sw = net.nodes[c.b].type == NetNode::Type::switch_node;
        if (!a_sw && !b_sw) return unexpected(NetError{file, c.line, "a cable between two CAs: no switch would route it"});
        if (a_sw && b_sw) {
            t.cable(switch_index[c.a], c.a_port, switch_index[c.b], c.b_port);
            continue;
        }
        if (a_sw) ca_cable[{c.b, c.b_port}] = &c;
        else ca_cable[{c.a, c.a_port}] = &c;
    }
    for (const auto& [key, c] : ca_cable) {
        const auto [ca, ca_port] = key;
        const bool switch_is_a = net.nodes[c->a].type == NetNode::Type::switch_node;
        const std::size_t sw = switch_is_a ? c->a : c->b;
        const std::uint8_t sw_port = switch_is_a ? c->a_port : c->b_port;
        if (lid > 0xBFFF) return unexpected(NetError{file, c->line, "more ports than unicast LIDs"});
        t.attach(switch_index[sw], sw_port, net.nodes[ca].port_guid(ca_port), static_cast<std::uint16_t>(lid++));
    }
    return t;
}

}  // namespace ipoibd::fabric::routing
