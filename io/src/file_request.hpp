// One pread or pwrite request of a handle: the open file, and the worker slices still running on it.
// The file is opened twice: with O_DIRECT for the 4096-aligned pieces (unless the file system
// refuses O_DIRECT), and buffered for the unaligned rest.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>

#include "dstrain/runtime/error.hpp"

namespace ds::io {

enum class Direction { Read, Write };

class FileRequest {
 public:
  // Opens path (writes create it and never truncate it); throws ds::Error with path and errno.
  FileRequest(Direction direction, std::string path, int slices);
  ~FileRequest();
  FileRequest(const FileRequest&) = delete;
  FileRequest& operator=(const FileRequest&) = delete;

  Direction direction() const { return direction_; }
  const std::string& path() const { return path_; }
  int direct_fd() const { return direct_fd_; }  // -1 when the file system refuses O_DIRECT
  int buffered_fd() const { return buffered_fd_; }

  // Each worker calls this once when its slice is done, with the slice's error if it had one.
  void finish_slice(std::optional<Error> error);
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
  std::chrono::steady_clock::time_point queued_at_;
  std::chrono::steady_clock::time_point finished_at_;
};

}  // namespace ds::io
