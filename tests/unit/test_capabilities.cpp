// Capabilities: names both ways, and keeping only the listed ones in a child
// process (capabilities cannot be taken back).
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "runtime/capabilities.h"
#include "runtime/log.h"
#include "runtime_test_util.h"

namespace ipoibd::runtime {
namespace {

using namespace test;

TEST(Capabilities, Names) {
    EXPECT_EQ(parse_capability("cap_net_admin").value(), CAP_NET_ADMIN);
    EXPECT_EQ(parse_capability("CAP_NET_RAW").value(), CAP_NET_RAW);
    auto bad = parse_capability("cap_fly");
    ASSERT_FALSE(bad.has_value());
    EXPECT_EQ(bad.error(), "unknown capability 'cap_fly' (e.g. cap_net_admin)");
    EXPECT_EQ(capability_name(CAP_NET_ADMIN), "cap_net_admin");
}

// Runs `child` in a forked process (capabilities cannot be taken back) and
// returns its exit status.
template <class F>
int in_child(F child) {
    const pid_t pid = ::fork();
    if (pid == 0) _exit(child());
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 100 + WTERMSIG(status);
}

TEST(Capabilities, KeepOnlyTheListedOnes) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root";
    const int status = in_child([] {
        Pipe p;
        Logger log({.target = LogTarget::stderr_lines, .stderr_fd = p.write.get()});
        const cap_value_t keep[] = {CAP_NET_ADMIN, CAP_NET_RAW};
        auto report = keep_only_capabilities(keep, log);
        if (!report || !report->changed) return 1;
        cap_t now = ::cap_get_proc();
        for (cap_value_t c = 0; CAP_IS_SUPPORTED(c); ++c) {
            const bool wanted = (c == CAP_NET_ADMIN || c == CAP_NET_RAW) &&
                                std::find(report->kept.begin(), report->kept.end(), capability_name(c)) !=
                                    report->kept.end();
            cap_flag_value_t permitted = CAP_CLEAR;
            cap_flag_value_t effective = CAP_CLEAR;
            cap_flag_value_t inheritable = CAP_CLEAR;
            ::cap_get_flag(now, c, CAP_PERMITTED, &permitted);
            ::cap_get_flag(now, c, CAP_EFFECTIVE, &effective);
            ::cap_get_flag(now, c, CAP_INHERITABLE, &inheritable);
            if ((permitted == CAP_SET) != wanted || (effective == CAP_SET) != wanted) return 2;
            if (inheritable == CAP_SET) return 3;
            if (c != CAP_NET_ADMIN && c != CAP_NET_RAW && ::cap_get_bound(c) != 0) return 4;
        }
        ::cap_free(now);
        if (p.drain().find(": info: capabilities reduced to ") == std::string::npos) return 5;
        return 0;
    });
    EXPECT_EQ(status, 0);
}

TEST(Capabilities, NotRootIsANoOpWithANotice) {
    if (::geteuid() != 0) GTEST_SKIP() << "needs root to become someone else";
    const int status = in_child([] {
        if (::setresgid(65534, 65534, 65534) < 0 || ::setresuid(65534, 65534, 65534) < 0) return 1;
        Pipe p;
        Logger log({.target = LogTarget::stderr_lines, .stderr_fd = p.write.get()});
        const cap_value_t keep[] = {CAP_NET_ADMIN};
        auto report = keep_only_capabilities(keep, log);
        if (!report || report->changed) return 2;
        if (p.drain().find(": notice: not running as root") == std::string::npos) return 3;
        return 0;
    });
    EXPECT_EQ(status, 0);
}

}  // namespace
}  // namespace ipoibd::runtime
