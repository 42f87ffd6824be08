// What this process holds in memory, for the trainer's report, the memory benchmarks and the tests
// that check a memory claim. Linux only: read from /proc/self/status and glibc's allocator.
#pragma once

#include <cstdint>

namespace ds {

struct ProcessMemory {
  int64_t rss_bytes = 0;       // VmRSS: resident now
  int64_t peak_rss_bytes = 0;  // VmHWM: the most ever resident (the "high water mark")
};

// Throws ds::Error (with the path) if /proc/self/status cannot be read.
ProcessMemory process_memory();

// Bytes the C allocator has handed out and not yet had back (heap in use plus mmapped blocks,
// glibc's mallinfo2), plus those of mappings made beside it (note_mapped_bytes). Unlike RSS it
// falls the moment a tensor is freed, so the difference between two readings is what was
// allocated in between and is still alive (activations saved for backward, say), whatever the
// allocator keeps cached.
int64_t allocated_bytes();

// An allocator that maps memory itself (engine's HugePageAllocator) reports each mapping made
// (positive) and released (negative) here. Thread-safe.
void note_mapped_bytes(int64_t delta);

}  // namespace ds
