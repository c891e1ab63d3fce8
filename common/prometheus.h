// Counters in the Prometheus text exposition format (version 0.0.4), for
// node_exporter's textfile collector or a scrape of the daemons' own
// listener (docs/metrics.md).
//
// Each counter a visit() shows becomes a sample named
// PREFIX_SECTION_NAME{labels} VALUE, e.g.
//   ipoibd_engine_tx_unicast{interface="ib0"} 1234
// with one "# TYPE ... untyped" line per name: visit() does not say which
// values only grow (most) and which go up and down (table sizes), and
// Prometheus treats untyped samples as gauges, which rate() still takes.
// Names keep [a-zA-Z0-9_:] (anything else becomes '_'); label values are
// escaped as the format says (\\, \", \n).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "common/counters.h"
#include "common/expected.h"

namespace ipoibd {

using MetricLabels = std::vector<std::pair<std::string, std::string>>;

class PrometheusText {
public:
    explicit PrometheusText(std::string prefix) : prefix_(std::move(prefix)) {}

    void add(std::string_view section, std::string_view name, const MetricLabels& labels, std::uint64_t value);

    // A sink that adds every counter it is shown under `section`.
    class Sink final : public CounterSink {
    public:
        Sink(PrometheusText& text, std::string section, MetricLabels labels)
            : text_(text), section_(std::move(section)), labels_(std::move(labels)) {}
        void counter(std::string_view name, std::uint64_t value) override { text_.add(section_, name, labels_, value); }

    private:
        PrometheusText& text_;
        std::string section_;
        MetricLabels labels_;
    };

    // The exposition text: names in order, each with its TYPE line and its
    // samples.
    std::string render() const;

private:
    std::string prefix_;
    std::map<std::string, std::vector<std::string>> samples_;  // metric name -> "name{labels} value" lines
};

// `name` with every character outside [a-zA-Z0-9_:] replaced by '_' (and a
// leading digit prefixed with '_').
std::string metric_name(std::string_view name);
// A label value escaped for the text format.
std::string escape_label_value(std::string_view value);

// Writes `text` to `path` atomically (a temporary file in the same
// directory, then rename), mode 0644, as node_exporter's textfile collector
// wants: a scrape never sees half a file.
expected<void, std::string> write_textfile(const std::string& path, std::string_view text);

}  // namespace ipoibd
