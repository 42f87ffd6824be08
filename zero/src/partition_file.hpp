// PartitionFile: where ds::zero::Init puts this rank's chunks when offload_param is on NVMe, so that
// a model larger than memory is built straight onto disk. One file, <nvme_path>/dstrain-build-rank<r>-
// XXXXXX/partition.swp, that chunks are appended to as their modules are partitioned, each padded to
// 4096 bytes so that every transfer goes O_DIRECT (no chunk sits in the page cache either). The
// folder is made by io::make_swap_folder's preflight and removed with the object: Init's chunks share
// it, so it goes when the engine has taken every one of them over, or when the model is dropped.
// Torch-free: raw bytes; one thread.
#pragma once

#include <cstdint>
#include <string>

#include "dstrain/io/aio_settings.hpp"
#include "dstrain/io/raw_aio_handle.hpp"

namespace ds::zero {

class PartitionFile {
 public:
  // Checks nvme_path (errors name zero_optimization.offload_param.nvme_path) and creates the folder.
  PartitionFile(const std::string& nvme_path, int rank, const io::AioSettings& aio);
  ~PartitionFile();  // removes the folder
  PartitionFile(const PartitionFile&) = delete;
  PartitionFile& operator=(const PartitionFile&) = delete;

  const std::string& folder() const { return folder_; }
  std::string path() const { return folder_ + "/partition.swp"; }
  int64_t bytes() const { return bytes_; }  // the file's size: every chunk, padded

  // Writes num_bytes from data at the end of the file, padded with zeros; returns their offset.
  int64_t append(const void* data, int64_t num_bytes);
  // Reads num_bytes written by append at offset into dst.
  void read(int64_t offset, void* dst, int64_t num_bytes);

 private:
  io::RawAioHandle handle_;  // first: a folder is only made once the handle exists
  int rank_;
  std::string folder_;
  int64_t bytes_ = 0;
};

}  // namespace ds::zero
