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
    void* data = nullptr;
    auto kept = std::find_if(kept_.begin(), kept_.end(), [&](const auto& block) { return block.second == length; });
    if (kept != kept_.end()) {
      data = kept->first;
      kept_bytes_ -= length;
      kept_.erase(kept);
    } else {
      const size_t room = std::max(peak_live_, live_ + length) - live_ - length;
      while (kept_bytes_ > room) {
        ::munmap(kept_.front().first, kept_.front().second);
        kept_bytes_ -= kept_.front().second;
        kept_.pop_front();
      }
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
