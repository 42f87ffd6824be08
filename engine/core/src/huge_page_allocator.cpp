#include "huge_page_allocator.hpp"

#include <sys/mman.h>

#include <c10/core/impl/alloc_cpu.h>

#include <algorithm>
#include <cstdint>
#include <deque>
#include <fstream>
#include <mutex>
#include <new>
#include <string>
#include <unordered_map>
#include <utility>

#include "dstrain/runtime/memory.hpp"

namespace ds {
namespace {

constexpr size_t kHugePage = HugePageAllocator::kHugePage;

void* map_huge(size_t length) {
  // Over-map by one huge page and trim, so that the tensor starts on a huge-page boundary (older
  // kernels do not align anonymous mappings themselves).
  void* raw = ::mmap(nullptr, length + kHugePage, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) throw std::bad_alloc();
  const auto base = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = (base + kHugePage - 1) & ~(kHugePage - 1);
  if (aligned > base) ::munmap(raw, aligned - base);
  if (const uintptr_t tail = base + length + kHugePage - (aligned + length); tail > 0)
    ::munmap(reinterpret_cast<void*>(aligned + length), tail);
  void* data = reinterpret_cast<void*>(aligned);
  ::madvise(data, length, MADV_HUGEPAGE);  // a hint: without it the tensor still works, in small pages
  return data;
}

// The mappings, live and kept. Leaked on purpose: static tensors are freed after static objects die.
class Mappings {
 public:
  void* take(size_t length) {
    std::lock_guard<std::mutex> lock(mutex_);
    void* data = reuse(length);
    if (!data) {
      evict_for(length);
      data = map_huge(length);
    }
    live_ += length;
    peak_live_ = std::max(peak_live_, live_);
    length_of_.emplace(data, length);
    note_mapped_bytes(static_cast<int64_t>(length));
    return data;
  }

  // Keeps the mapping at data if it is one; false for memory from malloc.
  bool give_back(void* data) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = length_of_.find(data);
    if (it == length_of_.end()) return false;
    const size_t length = it->second;
    length_of_.erase(it);
    live_ -= length;
    kept_.emplace_back(data, length);  // live + kept is unchanged, so still within peak_live_
    kept_bytes_ += length;
    note_mapped_bytes(-static_cast<int64_t>(length));
    return true;
  }

 private:
  // A kept mapping made `length` long, its pages faulted in already as far as they go, or nullptr.
  // Of the same length if there is one; else the shortest longer one, its tail unmapped; else the
  // longest shorter one, moved to the head of a new mapping. Sizes that vary from step to step
  // (ZeRO-3's gathers, activations) then reuse resident pages instead of faulting in and zeroing
  // fresh ones: exact lengths alone left 4% of a ZeRO-3 step's CPU time in clear_page.
  void* reuse(size_t length) {
    auto same = kept_.end(), longer = kept_.end(), shorter = kept_.end();
    for (auto it = kept_.begin(); it != kept_.end(); ++it) {
      const size_t size = it->second;
      if (size == length) {
        same = it;
        break;
      }
      if (size > length && (longer == kept_.end() || size < longer->second)) longer = it;
      if (size < length && (shorter == kept_.end() || size > shorter->second)) shorter = it;
    }
    if (same != kept_.end()) return take_kept(same);
    if (longer != kept_.end()) {
      const size_t size = longer->second;
      char* data = static_cast<char*>(take_kept(longer));
      ::munmap(data + length, size - length);  // lengths are whole huge pages: the tail is aligned
      return data;
    }
    if (shorter == kept_.end()) return nullptr;
    const auto [old, size] = *shorter;
    kept_.erase(shorter);
    kept_bytes_ -= size;
    evict_for(length);
    void* data = nullptr;
    try {
      data = map_huge(length);
    } catch (const std::bad_alloc&) {
      ::munmap(old, size);
      throw;
    }
    // Both ends on huge-page boundaries, so the kernel moves whole page-table entries, no bytes.
    if (::mremap(old, size, size, MREMAP_MAYMOVE | MREMAP_FIXED, data) == MAP_FAILED) ::munmap(old, size);
    return data;
  }

  void* take_kept(std::deque<std::pair<void*, size_t>>::iterator block) {
    void* data = block->first;
    kept_bytes_ -= block->second;
    kept_.erase(block);
    return data;
  }

  // Unmaps kept mappings, oldest first, until a live mapping of `length` more bytes leaves the
  // mapped bytes (live plus kept) within the most ever live at once.
  void evict_for(size_t length) {
    const size_t room = std::max(peak_live_, live_ + length) - live_ - length;
    while (kept_bytes_ > room) {
      ::munmap(kept_.front().first, kept_.front().second);
      kept_bytes_ -= kept_.front().second;
      kept_.pop_front();
    }
  }

  std::mutex mutex_;
  std::unordered_map<void*, size_t> length_of_;  // live mappings
  std::deque<std::pair<void*, size_t>> kept_;    // freed mappings, oldest first
  size_t live_ = 0;
  size_t kept_bytes_ = 0;
  size_t peak_live_ = 0;
};

Mappings& mappings() {
  static auto* all = new Mappings();
  return *all;
}

void release(void* data) {
  if (!mappings().give_back(data)) c10::free_cpu(data);
}

}  // namespace

c10::DataPtr HugePageAllocator::allocate(size_t bytes) DS_ALLOCATE_CONST {
  const c10::Device cpu(c10::DeviceType::CPU);
  if (bytes < kHugePage) {
    // Freed without the lookup: release() of a small block is free_cpu() too.
    void* data = c10::alloc_cpu(bytes);
    return {data, data, &c10::free_cpu, cpu};
  }
  void* data = mappings().take((bytes + kHugePage - 1) & ~(kHugePage - 1));
  return {data, data, &release, cpu};
}

c10::DeleterFnPtr HugePageAllocator::raw_deleter() const { return &release; }

bool install_huge_page_allocator() {
  std::ifstream setting("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(setting, modes);
  if (modes.find("[always]") == std::string::npos && modes.find("[madvise]") == std::string::npos) return false;
  static HugePageAllocator allocator;
  c10::SetAllocator(c10::DeviceType::CPU, &allocator, /*priority=*/1);
  return true;
}

}  // namespace ds
