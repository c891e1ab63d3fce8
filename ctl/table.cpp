#include "ctl/table.h"

#include <algorithm>

#include "ctl/json.h"

namespace ipoibd::ctl {

namespace {

bool is_number_cell(std::string_view s) {
    if (!s.empty() && s.front() == '-') s.remove_prefix(1);
    if (s.empty()) return false;
    bool dot = false;
    for (char c : s) {
        if (c == '.' && !dot) {
            dot = true;
        } else if (c < '0' || c > '9') {
            return false;
        }
    }
    return true;
}

void pad(std::string& out, std::size_t n) { out.append(n, ' '); }

bool is_table(const JsonValue& v) {
    return v.is_array() && !v.items().empty() &&
           std::all_of(v.items().begin(), v.items().end(), [](const JsonValue& i) { return i.is_object(); });
}

std::string scalar_list(const JsonValue& array, std::string_view separator);

// A value as one cell or after "key: ".
std::string cell_text(const JsonValue& v, std::string_view list_separator) {
    switch (v.kind()) {
        case JsonValue::Kind::null: return "-";
        case JsonValue::Kind::boolean: return v.as_bool() ? "true" : "false";
        case JsonValue::Kind::number: return v.text();
        case JsonValue::Kind::string: return printable(v.text());
        case JsonValue::Kind::array:
            if (std::none_of(v.items().begin(), v.items().end(),
                             [](const JsonValue& i) { return i.is_array() || i.is_object(); }))
                return scalar_list(v, list_separator);
            return printable(to_json(v));
        case JsonValue::Kind::object: return printable(to_json(v));
    }
    return "-";
}

std::string scalar_list(const JsonValue& array, std::string_view separator) {
    if (array.items().empty()) return "-";
    std::string out;
    for (std::size_t i = 0; i < array.items().size(); ++i) {
        if (i > 0) out += separator;
        out += cell_text(array.items()[i], separator);
    }
    return out;
}

Table table_of(const JsonValue& array) {
    std::vector<std::string> keys;
    for (const auto& row : array.items())
        for (const auto& m : row.members())
            if (std::find(keys.begin(), keys.end(), m.key) == keys.end()) keys.push_back(m.key);
    std::vector<std::string> headers;
    for (const auto& k : keys) headers.push_back(printable(k));
    Table table(std::move(headers));
    for (const auto& row : array.items()) {
        std::vector<std::string> cells;
        for (const auto& k : keys) {
            const JsonValue* v = row.find(k);
            std::string text = v ? cell_text(*v, ",") : "-";
            cells.push_back(text.empty() ? "-" : std::move(text));
        }
        table.add_row(std::move(cells));
    }
    return table;
}

void format_value(std::string& out, const JsonValue& v, const std::string& indent);

void format_object(std::string& out, const JsonValue& object, const std::string& indent) {
    for (const auto& m : object.members()) {
        const JsonValue& v = m.value;
        out += indent;
        out += printable(m.key);
        if (v.is_object() && !v.members().empty()) {
            out += ":\n";
            format_object(out, v, indent + "  ");
        } else if (is_table(v)) {
            out += ":\n";
            out += table_of(v).render(indent + "  ");
        } else if (v.is_array() && v.items().empty()) {
            out += ": (none)\n";
        } else {
            out += ": ";
            out += cell_text(v, ", ");
            out += '\n';
        }
    }
}

void format_value(std::string& out, const JsonValue& v, const std::string& indent) {
    if (v.is_object()) {
        format_object(out, v, indent);
    } else if (is_table(v)) {
        out += table_of(v).render(indent);
    } else if (v.is_array()) {
        for (const auto& item : v.items()) {
            out += indent;
            out += cell_text(item, ", ");
            out += '\n';
        }
    } else {
        out += indent;
        out += cell_text(v, ", ");
        out += '\n';
    }
}

}  // namespace

std::string printable(std::string_view text) {
    std::string out;
    out.reserve(text.size());
    while (!text.empty()) {
        const auto u = static_cast<unsigned char>(text[0]);
        const std::size_t n = utf8_sequence_length(text);
        // C0 and DEL; C1 (U+0080..U+009F: 0xc2 0x80..0x9f), which a terminal
        // takes as controls too (U+009B is CSI); a byte that starts no
        // well-formed sequence, which an 8-bit terminal may take as C1.
        const bool control = u < 0x20 || u == 0x7f || n == 0 ||
                             (n == 2 && u == 0xc2 && static_cast<unsigned char>(text[1]) <= 0x9f);
        if (control) {
            out += '?';
            text.remove_prefix(n == 0 ? 1 : n);
        } else {
            out += text.substr(0, n);
            text.remove_prefix(n);
        }
    }
    return out;
}

std::size_t display_width(std::string_view text) {
    return static_cast<std::size_t>(
        std::count_if(text.begin(), text.end(), [](char c) { return (static_cast<unsigned char>(c) & 0xc0) != 0x80; }));
}

void Table::add_row(std::vector<std::string> cells) {
    cells.resize(headers_.size(), "-");
    rows_.push_back(std::move(cells));
}

std::string Table::render(std::string_view indent) const {
    const std::size_t columns = headers_.size();
    std::vector<std::size_t> width(columns);
    std::vector<bool> right(columns);
    for (std::size_t c = 0; c < columns; ++c) {
        width[c] = display_width(headers_[c]);
        bool any_number = false;
        bool all_numbers = true;
        for (const auto& row : rows_) {
            width[c] = std::max(width[c], display_width(row[c]));
            if (row[c] == "-") continue;  // a missing value does not decide the alignment
            if (is_number_cell(row[c]))
                any_number = true;
            else
                all_numbers = false;
        }
        right[c] = any_number && all_numbers;
    }
    std::string out;
    auto line = [&](const std::vector<std::string>& cells) {
        out += indent;
        for (std::size_t c = 0; c < columns; ++c) {
            const std::size_t fill = width[c] - display_width(cells[c]);
            const bool last = c + 1 == columns;
            if (right[c]) pad(out, fill);
            out += cells[c];
            if (!last) {
                if (!right[c]) pad(out, fill);
                out += "  ";
            }
        }
        out += '\n';
    };
    line(headers_);
    for (const auto& row : rows_) line(row);
    return out;
}

std::string format_json_text(const JsonValue& value) {
    std::string out;
    format_value(out, value, "");
    return out;
}

}  // namespace ipoibd::ctl
