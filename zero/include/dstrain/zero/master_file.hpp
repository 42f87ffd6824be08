// ds::zero::MasterFile: the optimizer's fp32 master file as a second reader sees it. With
// offload_optimizer and offload_param both on NVMe at stage 3 (fp32, one file system) the
// OptimizerSwapper rewrites the master file every step and it holds exactly this rank's partition,
// so the ParamSwapper reads the parameters' chunks from it rather than writing a file of its own
// (docs/offload.md). The file's owner may hold parts of it in memory, newer than the file, between
// steps and during a step begun in backward; these are what a reader asks of it.
#pragma once

#include <cstdint>
#include <string>

namespace ds::zero {

class MasterFile {
 public:
  virtual ~MasterFile() = default;
  // The file: this rank's shard at the shard's own offsets, fp32, padded with zeros to 4096 bytes.
  virtual std::string master_path() const = 0;
  // Where master elements [offset, offset + count) all lie in the owner's memory, their address
  // (valid until the owner's next store into the file), else nullptr.
  virtual const float* master_in_memory(int64_t offset, int64_t count) const = 0;
  // Waits for the owner's writes still in flight to elements [offset, offset + count), so that a
  // read of them gets the new values.
  virtual void settle(int64_t offset, int64_t count) = 0;
  // Copies over dst, which holds elements [offset, offset + count) as read from the file, the
  // values the owner holds newer than the file. Whether there were any.
  virtual bool overlay_unwritten_master(int64_t offset, int64_t count, float* dst) const = 0;
};

}  // namespace ds::zero
