// The host policy's tensor allocator (engine/core/src/huge_page_allocator.hpp), seen through LibTorch:
// where large and small tensors live, what allocated_bytes() counts, and what is kept for reuse.
#include <catch2/catch.hpp>

#include <sys/mman.h>

#include <ATen/ATen.h>

#include <cerrno>
#include <cstdlib>
#include <cstdint>
#include <fstream>
#include <sstream>
#include <string>

#include "dstrain/engine/host_policy.hpp"
#include "dstrain/runtime/memory.hpp"

namespace {

constexpr int64_t kMiB = int64_t{1} << 20;

at::Tensor bytes_tensor(int64_t bytes) { return at::empty({bytes}, at::kByte); }

// allocated_bytes() also counts the small heap blocks a tensor's bookkeeping takes.
bool about(int64_t actual, int64_t expected) { return std::llabs(actual - expected) < 64 * 1024; }

bool mapped(const void* address) {
  unsigned char resident = 0;
  void* page = reinterpret_cast<void*>(reinterpret_cast<uintptr_t>(address) & ~uintptr_t{4095});
  return ::mincore(page, 4096, &resident) == 0 || errno != ENOMEM;
}

// The VmFlags line of the /proc/self/smaps mapping that contains address ("" if none).
std::string flags_of_mapping(const void* address) {
  std::ifstream smaps("/proc/self/smaps");
  const auto target = reinterpret_cast<uintptr_t>(address);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t begin = 0, end = 0;
    char dash = 0;
    std::istringstream head(line);
    if (head >> std::hex >> begin >> dash >> end && dash == '-') {
      inside = begin <= target && target < end;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

// The kernel's transparent huge page mode, e.g. "always [madvise] never" ("" without THP support).
std::string huge_page_modes() {
  std::ifstream setting("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string modes;
  std::getline(setting, modes);
  return modes;
}

// Whether the policy installed the huge-page allocator, after checking that it did exactly where the
// kernel lets a process ask for huge pages; where it does not, the caller's checks cannot run and
// are reported as skipped.
bool huge_pages_or_skip() {
  const std::string modes = huge_page_modes();
  const bool offered = modes.find("[always]") != std::string::npos || modes.find("[madvise]") != std::string::npos;
  INFO("transparent_hugepage/enabled: " << modes);
  REQUIRE(ds::apply_host_policy().huge_pages == offered);
  if (!offered) WARN("SKIP: transparent huge pages are off on this kernel (" << modes << "): LibTorch's allocator stays");
  return offered;
}

}  // namespace

TEST_CASE("tensors of 2 MiB and more get huge-page mappings of their own", "[host_policy]") {
  if (!huge_pages_or_skip()) return;
  const int64_t before = ds::allocated_bytes();
  at::Tensor large = bytes_tensor(6 * kMiB + 1);
  CHECK(reinterpret_cast<uintptr_t>(large.data_ptr()) % (2 * kMiB) == 0);
  CHECK(about(ds::allocated_bytes() - before, 8 * kMiB));  // rounded up to whole huge pages
  large.fill_(7);
  // Advised into huge pages ("hg"); whether the kernel found free huge pages is its business.
  CHECK(flags_of_mapping(large.data_ptr()).find(" hg") != std::string::npos);
  CHECK(large.sum().item<int64_t>() == 7 * (6 * kMiB + 1));
  large.reset();
  CHECK(about(ds::allocated_bytes(), before));

  at::Tensor small = bytes_tensor(kMiB);  // from malloc, as before
  CHECK(reinterpret_cast<uintptr_t>(small.data_ptr()) % 64 == 0);
}

TEST_CASE("a freed mapping is reused by the same length and unmapped before the peak would grow", "[host_policy]") {
  if (!huge_pages_or_skip()) return;
  at::Tensor first = bytes_tensor(22 * kMiB + 3);  // a length no other test uses: 24 MiB mapped
  void* address = first.data_ptr();
  first.reset();
  CHECK(mapped(address));  // kept
  at::Tensor again = bytes_tensor(23 * kMiB);
  CHECK(again.data_ptr() == address);
  again.reset();
  // 2 GiB, more than anything this process had live: keeping the 24 MiB would raise the peak.
  at::Tensor huge = bytes_tensor(2048 * kMiB);
  const auto* begin = static_cast<const char*>(huge.data_ptr());
  const bool reused_by_huge = begin <= address && address < begin + huge.nbytes();
  CHECK((reused_by_huge || !mapped(address)));
}

TEST_CASE("a freed mapping of another length is reused: moved with its pages into a longer one, or shortened",
          "[host_policy]") {
  if (!huge_pages_or_skip()) return;
  // Longer than anything the other tests keep, so that these are the kept mappings chosen.
  at::Tensor first = bytes_tensor(3000 * kMiB);
  first.narrow(0, 0, 64 * kMiB).fill_(7);
  first.reset();
  // Longer: the kept pages move into the head of the new mapping, their bytes with them (a fresh
  // mapping would read zeros), and nothing stays at the old address.
  at::Tensor longer = bytes_tensor(3100 * kMiB);
  CHECK(longer.narrow(0, 0, 64 * kMiB).eq(7).all().item<bool>());
  const auto* begin = static_cast<const char*>(longer.data_ptr());
  longer.reset();
  // Shorter: the same address, the tail past its length unmapped.
  at::Tensor shorter = bytes_tensor(1000 * kMiB);
  CHECK(shorter.data_ptr() == begin);
  CHECK(shorter.narrow(0, 0, 64 * kMiB).eq(7).all().item<bool>());
  CHECK(!mapped(begin + 2000 * kMiB));
}

TEST_CASE("the raw allocator interface frees both kinds of block", "[host_policy]") {
  ds::apply_host_policy();
  c10::Allocator* allocator = c10::GetAllocator(c10::DeviceType::CPU);
  const int64_t before = ds::allocated_bytes();
  void* large = allocator->raw_allocate(4 * kMiB);
  void* small = allocator->raw_allocate(100);
  allocator->raw_deallocate(small);
  CHECK(about(ds::allocated_bytes() - before, 4 * kMiB));
  allocator->raw_deallocate(large);
  CHECK(about(ds::allocated_bytes(), before));
}
