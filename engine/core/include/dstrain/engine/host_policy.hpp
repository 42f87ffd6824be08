// HostPolicy: how one rank uses its node's cores and memory, decided once per process.
//
//   threads  LibTorch's intra-op threads and OpenBLAS's: OMP_NUM_THREADS when set, else the cores
//            this process may run on divided among the ranks on this node (OpenMPI's local size),
//            at least 1; a launcher that bound the rank to fewer cores than the node has already
//            divided them, and the rank takes all of its own.
//   malloc   glibc keeps freed memory for reuse: mmap only above its largest threshold (32 MiB) and
//            never trim the heap. A training step frees and allocates the same large buffers every
//            step (activations, gradients, buckets); with glibc's defaults many are fresh mmaps,
//            page-faulted and unmapped each step, which costs as much system time as the step's math.
//            Left alone when GLIBC_TUNABLES sets malloc tunables.
//   tensors  LibTorch tensors of 2 MiB and more live in mappings of their own, in transparent huge
//            pages, unmapped when freed (engine/src/huge_page_allocator.hpp): they neither fragment
//            the heap nor cost a page fault per 4 KiB. Where the kernel gives no huge pages
//            (transparent_hugepage "never") LibTorch's allocator stays.
#pragma once

#include <string>

namespace ds {

struct HostPolicy {
  int threads = 1;
  std::string threads_reason;  // "OMP_NUM_THREADS", or "4 cores / 2 ranks on this node"
  bool malloc_tuned = false;
  bool huge_pages = false;  // HugePageAllocator installed
};

// Applies the policy on the first call; later calls return what was applied.
const HostPolicy& apply_host_policy();

// "threads 2 (4 cores / 2 ranks on this node), malloc keeps freed memory" for a start-up line.
std::string describe(const HostPolicy& policy);

}  // namespace ds
