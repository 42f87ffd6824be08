// HugePageAllocator: LibTorch's CPU allocator for a training process. Tensors of 2 MiB and more get
// a mapping of their own, aligned to 2 MiB and advised into transparent huge pages; smaller ones
// come from malloc as before (64-byte aligned, as c10's).
//
// Why: a step allocates and frees the same large tensors every time (gathered ZeRO-3 weights, their
// gradients, activations). On the heap they fragment it: freed holes stay resident, and stage 3's
// peak RSS was ~400 MB above its live tensors at 100M parameters. In 4 KiB pages of their own they
// cost a page fault per 4 KiB: 66 ms to fault in 16 MB here, against 1.5 ms in huge pages, about
// the time to write it once (docs/performance.md).
//
// Freed mappings are kept for reuse, as long as the mapped bytes (live plus kept) stay within the
// most ever live at once; a new mapping that would pass it first unmaps kept ones, oldest first.
// A tensor takes a kept mapping of its mapped length, else the shortest longer one (its tail
// unmapped), else the longest shorter one moved into the head of a new mapping. So reuse never
// raises the peak, and a step whose sizes differ from the last one's still reuses resident pages
// instead of faulting in and zeroing fresh ones.
#pragma once

#include <c10/core/Allocator.h>
#include <torch/version.h>

#include <cstring>

// LibTorch 2.3 made Allocator::allocate non-const.
#if TORCH_VERSION_MAJOR > 2 || (TORCH_VERSION_MAJOR == 2 && TORCH_VERSION_MINOR >= 3)
#define DS_ALLOCATE_CONST
#else
#define DS_ALLOCATE_CONST const
#endif

namespace ds {

class HugePageAllocator final : public c10::Allocator {
 public:
  static constexpr size_t kHugePage = size_t{2} << 20;

  c10::DataPtr allocate(size_t bytes) DS_ALLOCATE_CONST override;
  // LibTorch 2.x also asks an allocator to copy its own bytes (later with a "sync" flag); 1.13 does not,
  // and then these are plain members. No `override`: each matches whichever the base declares.
  void copy_data(void* dest, const void* src, size_t count) const { std::memcpy(dest, src, count); }
  void copy_data(void* dest, const void* src, size_t count, bool /*sync*/) const { std::memcpy(dest, src, count); }
  c10::DeleterFnPtr raw_deleter() const override;
};

// Installs it as LibTorch's CPU allocator, if this kernel gives huge pages on request
// (/sys/kernel/mm/transparent_hugepage/enabled is "always" or "madvise"); returns whether it did.
bool install_huge_page_allocator();

}  // namespace ds
