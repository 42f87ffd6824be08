// ds::io::SwapFolder: named flat buffers kept as files in one folder, moved asynchronously through
// a RawAioHandle. The building block of ZeRO-Infinity's NVMe offload: a parameter or optimizer
// state partition is swapped out under its name and swapped back in later.
//
//   ds::io::RawAioHandle handle(settings);
//   ds::io::SwapFolder swap("/nvme/swap/rank0", handle);
//   swap.swap_out("param_17", buffer, bytes);
//   swap.wait();
//   swap.swap_in("param_17", buffer, bytes);
//   swap.wait();
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "dstrain/io/raw_aio_handle.hpp"

namespace ds::io {

class SwapFolder {
 public:
  // Creates the folder (and its parents) if missing; throws ds::Error naming the path otherwise.
  SwapFolder(std::string folder, RawAioHandle& handle);

  // Queue a transfer; the buffer must stay untouched until wait(). Names are plain file names
  // (no '/', not "." or ".."). swap_in throws ds::Error for a name never swapped out or a size that
  // differs from the one swapped out.
  void swap_out(const std::string& name, const void* buffer, int64_t num_bytes);
  void swap_in(const std::string& name, void* buffer, int64_t num_bytes);
  // Waits for every queued transfer of the handle; see RawAioHandle::wait.
  int wait() { return handle_.wait(); }

  bool contains(const std::string& name) const { return sizes_.count(name) > 0; }
  int64_t size_of(const std::string& name) const;  // throws ds::Error for an unknown name
  std::string path_of(const std::string& name) const;
  // Deletes the file; the name is unknown afterwards. Do not remove a name with a transfer queued.
  void remove(const std::string& name);

 private:
  std::string folder_;
  RawAioHandle& handle_;
  std::map<std::string, int64_t> sizes_;  // bytes swapped out under each name
};

}  // namespace ds::io
