#include "file_request.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

#include "dstrain/io/crc32c.hpp"
#include "in_flight.hpp"

namespace ds::io {

namespace {

int open_or_throw(const std::string& path, int flags, const char* purpose) {
  int fd = ::open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) throw Error(std::string("cannot open file for ") + purpose).with_path(path).with_errno(errno);
  return fd;
}

}  // namespace

uint32_t combine_in_file_order(std::vector<RangeChecksum>& ranges) {
  std::sort(ranges.begin(), ranges.end(), [](const auto& a, const auto& b) { return a.file_offset < b.file_offset; });
  uint32_t crc = 0;
  for (const RangeChecksum& range : ranges) crc = crc32c_combine(crc, range.crc, range.length);
  return crc;
}

FileRequest::FileRequest(Direction direction, std::string path, int slices, uint32_t* checksum)
    : direction_(direction), path_(std::move(path)), slices_left_(slices), checksum_(checksum) {
  if (checksum_) *checksum_ = 0;  // the checksum of no bytes, for a request of none
  const bool read = direction_ == Direction::Read;
  // The buffered open comes first: it creates a missing file for writing and gives the clearest
  // error (ENOENT, EACCES, EISDIR) before O_DIRECT is tried.
  buffered_fd_ = open_or_throw(path_, read ? O_RDONLY : O_WRONLY | O_CREAT, read ? "reading" : "writing");
  direct_fd_ = ::open(path_.c_str(), (read ? O_RDONLY : O_WRONLY) | O_DIRECT | O_CLOEXEC);
  if (direct_fd_ < 0 && errno != EINVAL) {
    int err = errno;
    ::close(buffered_fd_);
    throw Error("cannot open file with O_DIRECT").with_path(path_).with_errno(err);
  }
  queued_at_ = std::chrono::steady_clock::now();
  if (slices_left_ > 0) in_flight(direction_).begin();  // a request of no bytes is done already
}

FileRequest::~FileRequest() {
  if (direct_fd_ >= 0) ::close(direct_fd_);
  ::close(buffered_fd_);
}

void FileRequest::finish_slice(std::optional<Error> error, const RangeChecksum& checksum) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (error && !error_) error_ = std::move(error);
  if (checksum_) slice_checksums_.push_back(checksum);
  if (--slices_left_ == 0) {
    if (checksum_ && !error_) *checksum_ = combine_in_file_order(slice_checksums_);
    finished_at_ = std::chrono::steady_clock::now();
    in_flight(direction_).end();
    finished_.notify_all();
  }
}

void FileRequest::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  finished_.wait(lock, [&] { return slices_left_ == 0; });
  if (error_) throw *error_;
}

}  // namespace ds::io
