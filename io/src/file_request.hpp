// One pread or pwrite request of a handle: the open file, and the worker slices still running on it.
// The file is opened twice: with O_DIRECT for the 4096-aligned pieces (unless the file system
// refuses O_DIRECT), and buffered for the unaligned rest. A checksummed request gathers the CRC-32C
// of each slice and hands the caller the whole range's once the last slice is done.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "dstrain/runtime/error.hpp"

namespace ds::io {

enum class Direction { Read, Write };

// The CRC-32C of the bytes of one file range.
struct RangeChecksum {
  int64_t file_offset = 0;
  int64_t length = 0;
  uint32_t crc = 0;
};

// The checksum of ranges that tile one range, whatever order they come in.
uint32_t combine_in_file_order(std::vector<RangeChecksum>& ranges);

class FileRequest {
 public:
  // Opens path (writes create it and never truncate it); throws ds::Error with path and errno.
  // With `checksum`, *checksum is the CRC-32C of the request's bytes once wait() has returned.
  FileRequest(Direction direction, std::string path, int slices, uint32_t* checksum = nullptr);
  ~FileRequest();
  FileRequest(const FileRequest&) = delete;
  FileRequest& operator=(const FileRequest&) = delete;

  Direction direction() const { return direction_; }
  const std::string& path() const { return path_; }
  int direct_fd() const { return direct_fd_; }  // -1 when the file system refuses O_DIRECT
  int buffered_fd() const { return buffered_fd_; }
  bool checksummed() const { return checksum_ != nullptr; }

  // Each worker calls this once when its slice is done, with the slice's error if it had one, and
  // (checksummed) the slice's checksum.
  void finish_slice(std::optional<Error> error, const RangeChecksum& checksum);
  // Blocks until every slice has finished, then throws the first slice error if there was one.
  void wait();
  // When the request was opened (queued), and when its last slice finished (valid after wait()).
  std::chrono::steady_clock::time_point queued_at() const { return queued_at_; }
  std::chrono::steady_clock::time_point finished_at() const { return finished_at_; }

 private:
  const Direction direction_;
  const std::string path_;
  int direct_fd_ = -1;
  int buffered_fd_ = -1;

  std::mutex mutex_;
  std::condition_variable finished_;
  int slices_left_;
  std::optional<Error> error_;
  uint32_t* checksum_;
  std::vector<RangeChecksum> slice_checksums_;
  std::chrono::steady_clock::time_point queued_at_;
  std::chrono::steady_clock::time_point finished_at_;
};

}  // namespace ds::io
