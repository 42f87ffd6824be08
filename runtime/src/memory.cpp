#include "dstrain/runtime/memory.hpp"

#include <malloc.h>

#include <atomic>
#include <cerrno>
#include <fstream>
#include <string>

#include "dstrain/runtime/error.hpp"

namespace ds {

ProcessMemory process_memory() {
  const char* path = "/proc/self/status";
  std::ifstream status(path);
  if (!status) throw Error("cannot read process memory").with_path(path).with_errno(errno);
  ProcessMemory memory;
  std::string line;
  while (std::getline(status, line)) {
    // Lines read "VmRSS:     123456 kB".
    auto kib = [&](const char* key, int64_t& out) {
      const std::string prefix = std::string(key) + ":";
      if (line.compare(0, prefix.size(), prefix) == 0) out = std::stoll(line.substr(prefix.size())) * 1024;
    };
    kib("VmRSS", memory.rss_bytes);
    kib("VmHWM", memory.peak_rss_bytes);
  }
  if (memory.peak_rss_bytes == 0) throw Error("no VmHWM line in process status").with_path(path);
  return memory;
}

namespace {
std::atomic<int64_t> mapped_bytes{0};
}  // namespace

int64_t allocated_bytes() {
  const struct mallinfo2 info = mallinfo2();
  return static_cast<int64_t>(info.uordblks + info.hblkhd) + mapped_bytes.load(std::memory_order_relaxed);
}

void note_mapped_bytes(int64_t delta) { mapped_bytes.fetch_add(delta, std::memory_order_relaxed); }

}  // namespace ds
