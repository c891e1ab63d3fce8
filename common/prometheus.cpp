#include "common/prometheus.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace ipoibd {

std::string metric_name(std::string_view name) {
    std::string out;
    out.reserve(name.size() + 1);
    for (char c : name) {
        const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == ':';
        out.push_back(ok ? c : '_');
    }
    if (out.empty() || (out.front() >= '0' && out.front() <= '9')) out.insert(out.begin(), '_');
    return out;
}

std::string escape_label_value(std::string_view value) {
    std::string out;
    out.reserve(value.size());
    for (char c : value) {
        if (c == '\\')
            out += "\\\\";
        else if (c == '"')
            out += "\\\"";
        else if (c == '\n')
            out += "\\n";
        else
            out.push_back(c);
    }
    return out;
}

void PrometheusText::add(std::string_view section, std::string_view name, const MetricLabels& labels,
                         std::uint64_t value) {
    std::string metric = metric_name(prefix_ + "_" + std::string(section) + "_" + std::string(name));
    std::string line = metric;
    if (!labels.empty()) {
        line += '{';
        for (std::size_t i = 0; i < labels.size(); ++i) {
            if (i) line += ',';
            line += metric_name(labels[i].first) + "=\"" + escape_label_value(labels[i].second) + "\"";
        }
        line += '}';
    }
    line += ' ' + std::to_string(value);
    samples_[metric].push_back(std::move(line));
}

std::string PrometheusText::render() const {
    std::string out;
    for (const auto& [metric, lines] : samples_) {
        out += "# TYPE " + metric + " untyped\n";
        for (const std::string& l : lines) out += l + "\n";
    }
    return out;
}

// The temporary file is a new one of an unpredictable name (mkostemp:
// O_EXCL): in a directory others may write to, a fixed name could be a
// file or a hard link someone put there, which O_TRUNC would empty and the
// rename would make the textfile.
expected<void, std::string> write_textfile(const std::string& path, std::string_view text) {
    std::string tmp = path + ".tmp.XXXXXX";
    const int fd = ::mkostemp(tmp.data(), O_CLOEXEC);
    if (fd < 0) return unexpected("could not write " + path + ".tmp.*: " + std::strerror(errno));
    std::size_t done = 0;
    while (done < text.size()) {
        const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
        if (n <= 0) {
            if (n < 0 && errno == EINTR) continue;
            const int err = n == 0 ? EIO : errno;
            ::close(fd);
            ::unlink(tmp.c_str());
            return unexpected("could not write " + tmp + ": " + std::strerror(err));
        }
        done += static_cast<std::size_t>(n);
    }
    ::fchmod(fd, 0644);  // the collector runs as another user; counters are not secret
    ::close(fd);
    if (::rename(tmp.c_str(), path.c_str()) != 0) {
        const int err = errno;
        ::unlink(tmp.c_str());
        return unexpected("could not rename " + tmp + " to " + path + ": " + std::strerror(err));
    }
    return {};
}

}  // namespace ipoibd
