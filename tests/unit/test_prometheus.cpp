// The Prometheus text format (common/prometheus.h): names, labels, escaping,
// one TYPE line per name, and the atomic textfile.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>

#include "common/prometheus.h"

namespace ipoibd {
namespace {

// The text format's line grammar (exposition format 0.0.4), for the lines
// this writer makes: comments "# TYPE name type" and samples.
bool valid_exposition(const std::string& text, std::string* bad) {
    static const std::regex type_line(R"(^# TYPE [a-zA-Z_:][a-zA-Z0-9_:]* (counter|gauge|untyped)$)");
    static const std::regex sample(
        R"re(^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\\\|\\"|\\n)*"(,[a-zA-Z_][a-zA-Z0-9_]*="([^"\\\n]|\\\\|\\"|\\n)*")*\})? -?[0-9]+$)re");
    std::istringstream in(text);
    std::string line;
    while (std::getline(in, line)) {
        if (std::regex_match(line, type_line) || std::regex_match(line, sample)) continue;
        *bad = line;
        return false;
    }
    return true;
}

TEST(Prometheus, SamplesByNameWithLabelsAndOneTypeLine) {
    PrometheusText t("ipoibd");
    t.add("engine", "tx_unicast", {{"instance", "ib0"}, {"interface", "ib0"}}, 12);
    t.add("engine", "tx_unicast", {{"instance", "ib0"}, {"interface", "ib0.8001"}}, 3);
    t.add("port", "undelivered_P_Key mismatch", {}, 1);
    const std::string text = t.render();
    EXPECT_EQ(text,
              "# TYPE ipoibd_engine_tx_unicast untyped\n"
              "ipoibd_engine_tx_unicast{instance=\"ib0\",interface=\"ib0\"} 12\n"
              "ipoibd_engine_tx_unicast{instance=\"ib0\",interface=\"ib0.8001\"} 3\n"
              "# TYPE ipoibd_port_undelivered_P_Key_mismatch untyped\n"
              "ipoibd_port_undelivered_P_Key_mismatch 1\n");
    std::string bad;
    EXPECT_TRUE(valid_exposition(text, &bad)) << bad;
}

TEST(Prometheus, LabelValuesAreEscapedNamesSanitised) {
    EXPECT_EQ(escape_label_value("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    EXPECT_EQ(metric_name("9lives-x.y"), "_9lives_x_y");
    PrometheusText t("x");
    t.add("s", "n", {{"description", "node \"evil\"\\\nline"}}, 1);
    std::string bad;
    EXPECT_TRUE(valid_exposition(t.render(), &bad)) << bad;
}

TEST(Prometheus, TheTextfileIsReplacedWhole) {
    const auto dir = std::filesystem::temp_directory_path() / ("prom-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "ipoibd.prom").string();
    ASSERT_TRUE(write_textfile(path, "a 1\n"));
    ASSERT_TRUE(write_textfile(path, "b 2\n"));
    std::ifstream in(path);
    std::stringstream ss;
    ss << in.rdbuf();
    EXPECT_EQ(ss.str(), "b 2\n");
    struct stat st {};
    ASSERT_EQ(::stat(path.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 0777, 0644u);
    EXPECT_EQ(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator{}), 1)
        << "no temporary left behind";
    auto bad = write_textfile((dir / "missing" / "x.prom").string(), "x 1\n");
    ASSERT_FALSE(bad);
    EXPECT_NE(bad.error().find("could not write"), std::string::npos) << bad.error();
    std::filesystem::remove_all(dir);
}

// A file or hard link someone put at a predictable temporary name is
// neither written through (a hard link to another file was emptied by
// O_TRUNC) nor renamed into place: the temporary file is a new one.
TEST(Prometheus, TheTextfileIsNotWrittenThroughAFileAtATemporaryName) {
    const auto dir = std::filesystem::temp_directory_path() / ("prom-link-" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string path = (dir / "ipoibd.prom").string();
    const std::string victim = (dir / "victim").string();
    std::ofstream(victim) << "precious\n";
    // The names the old writer used: PATH.tmp.PID.
    std::filesystem::create_hard_link(victim, path + ".tmp." + std::to_string(::getpid()));
    ASSERT_TRUE(write_textfile(path, "a 1\n"));
    std::stringstream v, p;
    v << std::ifstream(victim).rdbuf();
    p << std::ifstream(path).rdbuf();
    EXPECT_EQ(v.str(), "precious\n");
    EXPECT_EQ(p.str(), "a 1\n");
    std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace ipoibd
