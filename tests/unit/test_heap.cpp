// runtime/heap.h: freed message buffers stay in the process.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <cstdint>
#include <vector>

#include "runtime/heap.h"

namespace {

long minor_faults() {
    rusage u{};
    getrusage(RUSAGE_SELF, &u);
    return u.ru_minflt;
}

// Connected mode's pattern: a poll's worth of 64 KiB message buffers
// allocated, filled and freed together, again and again. With glibc's
// defaults the heap's top goes back to the kernel after every round and
// each round's buffers fault their pages in again (16 x 16 pages a round:
// about 22,000 faults in 100 rounds); tuned, only the first round faults.
TEST(HeapTest, MessageBuffersFreedTogetherDoNotFaultTheirPagesInAgain) {
    if (!ipoibd::runtime::kGlibcHeap) GTEST_SKIP() << "the sanitizer's allocator replaces glibc's malloc";
    ASSERT_TRUE(ipoibd::runtime::tune_heap());
    constexpr int kRounds = 100, kBuffers = 16;
    constexpr std::size_t kMessage = 65524;
    std::vector<std::vector<std::uint8_t>> live;
    live.reserve(kBuffers);
    const long before = minor_faults();
    for (int round = 0; round < kRounds; ++round) {
        for (int i = 0; i < kBuffers; ++i) live.emplace_back(kMessage, static_cast<std::uint8_t>(round));
        live.clear();
    }
    const long faults = minor_faults() - before;
    // The first round's pages (16 x 16) and some slack for the test itself.
    EXPECT_LT(faults, 4 * kBuffers * 16) << faults << " page faults in " << kRounds << " rounds";
}

}  // namespace
