// ds::io::LockedBuffers: page-aligned host buffers pinned in RAM with mlock, the memory behind
// DeepSpeed's new_cpu_locked_tensor. Page alignment lets every piece go through O_DIRECT; buffers of
// 2 MiB or more are 2 MiB-aligned and backed by transparent huge pages where the kernel allows.
//
// When mlock is refused (RLIMIT_MEMLOCK), the buffer is still handed out, page-aligned but
// pageable, and a warning says so once per LockedBuffers.
#pragma once

#include <cstddef>
#include <unordered_map>

namespace ds::io {

class LockedBuffers {
 public:
  LockedBuffers() = default;
  ~LockedBuffers();  // releases whatever is still allocated
  LockedBuffers(const LockedBuffers&) = delete;
  LockedBuffers& operator=(const LockedBuffers&) = delete;

  // Zero-filled. Throws ds::Error (with errno) when the memory itself cannot be mapped.
  void* allocate(size_t num_bytes);
  // Throws ds::Error when buffer did not come from allocate() of this object.
  void release(void* buffer);

  bool is_locked(const void* buffer) const;  // false for buffers this object does not own

 private:
  struct Allocation {
    size_t mapped_bytes;
    bool locked;
  };
  std::unordered_map<const void*, Allocation> allocations_;
  bool warned_ = false;
};

}  // namespace ds::io
