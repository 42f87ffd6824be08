#include "partition_file.hpp"

#include <cstdlib>
#include <cstring>
#include <memory>

#include "dstrain/io/swap_preflight.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/remove_tree.hpp"

namespace ds::zero {
namespace {

constexpr const char* kKey = "zero_optimization.offload_param.nvme_path";

int64_t padded(int64_t num_bytes) {
  return (num_bytes + io::kDirectIoAlignment - 1) / io::kDirectIoAlignment * io::kDirectIoAlignment;
}

// A 4096-aligned staging buffer of a padded chunk: O_DIRECT needs the address aligned too.
std::unique_ptr<char, decltype(&std::free)> staging(int64_t num_bytes) {
  void* memory = std::aligned_alloc(io::kDirectIoAlignment, padded(num_bytes));
  if (!memory) throw Error("cannot allocate a staging buffer for a partition chunk").with_length(num_bytes);
  return {static_cast<char*>(memory), &std::free};
}

}  // namespace

// The size of the model is unknown until it is built, so the preflight checks the path and that it
// takes O_DIRECT, not the space: a full disk fails the append that meets it, naming the key.
PartitionFile::PartitionFile(const std::string& nvme_path, int rank, const io::AioSettings& aio)
    : handle_(aio),
      rank_(rank),
      folder_(io::make_swap_folder(nvme_path, "dstrain-build-rank" + std::to_string(rank), kKey, 0)) {}

PartitionFile::~PartitionFile() {
  try {
    remove_tree(folder_);
  } catch (const Error& e) {
    log::warn_all("zero.Init: could not remove the partition's build folder: ", e.what());
  }
}

int64_t PartitionFile::append(const void* data, int64_t num_bytes) {
  auto buffer = staging(num_bytes);
  std::memcpy(buffer.get(), data, num_bytes);
  std::memset(buffer.get() + num_bytes, 0, padded(num_bytes) - num_bytes);
  const int64_t offset = bytes_;
  try {
    handle_.sync_pwrite(buffer.get(), padded(num_bytes), path(), offset);
  } catch (Error& e) {
    e.with_key(kKey).with_rank(rank_);
    throw;
  }
  bytes_ += padded(num_bytes);
  return offset;
}

void PartitionFile::read(int64_t offset, void* dst, int64_t num_bytes) {
  auto buffer = staging(num_bytes);
  handle_.sync_pread(buffer.get(), padded(num_bytes), path(), offset);
  std::memcpy(dst, buffer.get(), num_bytes);
}

}  // namespace ds::zero
