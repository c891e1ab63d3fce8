// The daemon's heap: how much freed memory glibc's malloc keeps instead of
// giving it back to the kernel.
//
// glibc returns the free space at the top of the heap to the kernel (brk)
// once it grows over M_TRIM_THRESHOLD: 128 KiB until its dynamic rule
// raises it, which only the free of a block it had mmap()ed does. Connected
// mode allocates a 64 KiB buffer for every RC message it sends or receives
// (a TUN super-packet, an assembled SEND) and frees a poll's worth of them
// together: the heap's top went past the threshold and back to the kernel
// hundreds of times a second, and every page of the next buffers came back
// as a page fault (85,000 a second in two daemons at 7 Gbit/s,
// docs/performance.md). Datagram mode's buffers live as long as the daemon.
#pragma once

#include <cstddef>

namespace ipoibd::runtime {

// Freed memory at the top of the heap kept before any goes back (M_TRIM_THRESHOLD).
inline constexpr std::size_t kHeapTrimThreshold = std::size_t{16} << 20;
// Blocks at least this large get an mmap() of their own (M_MMAP_THRESHOLD).
// Setting the trim threshold turns glibc's dynamic rule off for both, so
// this is set too: every message buffer and batch stays in the heap.
inline constexpr std::size_t kHeapMmapThreshold = std::size_t{4} << 20;

// Whether malloc is glibc's: a sanitizer build (ASan, TSan, MSan) brings
// its own allocator, where mallopt() does nothing.
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kGlibcHeap = false;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer) || __has_feature(memory_sanitizer)
inline constexpr bool kGlibcHeap = false;
#else
inline constexpr bool kGlibcHeap = true;
#endif
#else
inline constexpr bool kGlibcHeap = true;
#endif

// Sets both (mallopt(3)); false if glibc refused either. Called once at
// start-up, before the data path allocates; process-wide. Under a
// sanitizer's allocator: nothing to set, true.
bool tune_heap();

}  // namespace ipoibd::runtime
