// ds::Error: the one exception type of dstrain. It carries the context a user needs to fix the
// problem: the config key, the file path and offset, the rank, and the errno.
#pragma once

#include <cstdint>
#include <exception>
#include <optional>
#include <string>

namespace ds {

class Error : public std::exception {
 public:
  explicit Error(std::string message);

  Error& with_key(std::string key);
  Error& with_path(std::string path);
  Error& with_offset(int64_t offset);
  Error& with_length(int64_t length);
  Error& with_rank(int rank);
  Error& with_errno(int errnum);

  // The message followed by its context, e.g.
  // "read past end of file [path=/nvme/x, offset=4096, length=8192, errno=0]".
  const char* what() const noexcept override { return formatted_.c_str(); }

  const std::string& message() const { return message_; }
  const std::optional<std::string>& key() const { return key_; }
  const std::optional<std::string>& path() const { return path_; }
  const std::optional<int64_t>& offset() const { return offset_; }
  const std::optional<int64_t>& length() const { return length_; }
  const std::optional<int>& rank() const { return rank_; }
  const std::optional<int>& errnum() const { return errnum_; }

 private:
  void format();

  std::string message_;
  std::optional<std::string> key_;
  std::optional<std::string> path_;
  std::optional<int64_t> offset_;
  std::optional<int64_t> length_;
  std::optional<int> rank_;
  std::optional<int> errnum_;
  std::string formatted_;
};

}  // namespace ds
