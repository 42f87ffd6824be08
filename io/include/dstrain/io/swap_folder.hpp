// ds::io::SwapFolder: named flat buffers kept as files in one folder, moved asynchronously through
// a RawAioHandle. The building block of ZeRO-Infinity's NVMe offload: a parameter or optimizer
// state partition is swapped out under its name and swapped back in later. A new file is
// preallocated; each swap_out's CRC-32C is kept, and wait() checks every swap_in against it.
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
#include <memory>
#include <string>
#include <vector>

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
  // Waits for every queued transfer of the handle (see RawAioHandle::wait), then checks each
  // swap_in's bytes against the checksum of its name's last swap_out: a ds::Error naming the file
  // when they differ (the file was changed behind the folder's back).
  int wait();

  bool contains(const std::string& name) const { return sizes_.count(name) > 0; }
  int64_t size_of(const std::string& name) const;  // throws ds::Error for an unknown name
  std::string path_of(const std::string& name) const;
  // Deletes the file; the name is unknown afterwards. Do not remove a name with a transfer queued.
  void remove(const std::string& name);

 private:
  std::string folder_;
  RawAioHandle& handle_;
  std::map<std::string, int64_t> sizes_;  // bytes swapped out under each name
  std::map<std::string, uint32_t> written_crc_;  // CRC-32C of each name's last swap_out
  struct PendingCheck {
    std::string name;
    uint32_t crc = 0;  // set by the handle when the read finishes
  };
  std::vector<std::unique_ptr<PendingCheck>> pending_;  // swap_ins since the last wait()
};

}  // namespace ds::io
