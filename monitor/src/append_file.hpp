// AppendFile: a file opened for appending whose every write reaches the kernel before it returns
// (no user-space buffer), so a process killed after a step keeps that step's lines.
#pragma once

#include <cstdint>
#include <string>

namespace ds::monitor {

class AppendFile {
 public:
  // Creates the file if missing; ds::Error with the path and errno if it cannot be opened.
  explicit AppendFile(std::string path);
  ~AppendFile();
  AppendFile(const AppendFile&) = delete;
  AppendFile& operator=(const AppendFile&) = delete;

  // Writes all `size` bytes at the end of the file; ds::Error with the path and errno otherwise.
  void append(const void* bytes, size_t size);
  void append(const std::string& text) { append(text.data(), text.size()); }

  // The file's size when it was opened.
  int64_t size_at_open() const { return size_at_open_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  int fd_ = -1;
  int64_t size_at_open_ = 0;
};

}  // namespace ds::monitor
