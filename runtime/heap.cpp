#include "runtime/heap.h"

#include <malloc.h>

namespace ipoibd::runtime {

bool tune_heap() {
    if constexpr (!kGlibcHeap) return true;
    const bool mmap_set = mallopt(M_MMAP_THRESHOLD, static_cast<int>(kHeapMmapThreshold)) == 1;
    const bool trim_set = mallopt(M_TRIM_THRESHOLD, static_cast<int>(kHeapTrimThreshold)) == 1;
    return mmap_set && trim_set;
}

}  // namespace ipoibd::runtime
