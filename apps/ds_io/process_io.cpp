#include "process_io.hpp"

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>
#include <ctime>
#include <memory>
#include <vector>

#include "benchmark.hpp"
#include "dstrain/io/crc32c.hpp"
#include "dstrain/io/locked_buffers.hpp"
#include "dstrain/io/preallocate.hpp"
#include "dstrain/io/raw_aio_handle.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::io_bench {

namespace {

double monotonic_s() {
  timespec now;
  ::clock_gettime(CLOCK_MONOTONIC, &now);
  return static_cast<double>(now.tv_sec) + static_cast<double>(now.tv_nsec) * 1e-9;
}

double cpu_s() {
  rusage usage;
  ::getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + static_cast<double>(t.tv_usec) * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Pseudo-random bytes (splitmix64): cheap enough for gigabytes, and no two processes alike.
void fill_random(char* buffer, int64_t size, uint64_t seed) {
  uint64_t state = seed;
  for (int64_t i = 0; i < size; i += 8) {
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    std::memcpy(buffer + i, &z, static_cast<size_t>(std::min<int64_t>(8, size - i)));
  }
}

int64_t size_of(const std::string& path) {
  struct stat status;
  return ::stat(path.c_str(), &status) == 0 ? status.st_size : -1;
}

// With --create, a file to read is written with at least io_size bytes, on disk rather than dirty in
// the page cache (an O_DIRECT read would otherwise first flush it, inside the timed loop).
void create_file(const std::string& path, const char* content, int64_t size) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) throw Error("cannot create the file to read").with_path(path).with_errno(errno);
  try {
    io::preallocate(fd, path, size);
  } catch (...) {
    ::close(fd);
    throw;
  }
  for (int64_t done = 0; done < size;) {
    ssize_t n = ::pwrite(fd, content + done, static_cast<size_t>(size - done), done);
    if (n <= 0) {
      int err = errno;
      ::close(fd);
      throw Error("cannot fill the file to read").with_path(path).with_offset(done).with_errno(err);
    }
    done += n;
  }
  int synced = ::fsync(fd);
  int err = errno;
  ::close(fd);
  if (synced != 0) throw Error("cannot sync the file to read").with_path(path).with_errno(err);
}

// The independent check: plain pread of the file against the buffer. Empty when they agree.
std::string compare_with_file(const std::string& path, const char* buffer, int64_t size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "cannot open " + path + ": " + std::strerror(errno);
  std::vector<char> chunk(8 << 20);
  std::string problem;
  for (int64_t done = 0; done < size && problem.empty();) {
    ssize_t n = ::pread(fd, chunk.data(), static_cast<size_t>(std::min<int64_t>(size - done, chunk.size())), done);
    if (n <= 0) {
      problem = path + " ends at byte " + std::to_string(done) + " of " + std::to_string(size);
    } else if (std::memcmp(chunk.data(), buffer + done, static_cast<size_t>(n)) != 0) {
      int64_t at = done;
      while (chunk[static_cast<size_t>(at - done)] == buffer[at]) ++at;
      problem = path + " differs from the buffer at byte " + std::to_string(at);
    } else {
      done += n;
    }
  }
  ::close(fd);
  return problem;
}

// All requests queued before the one wait, so the handle has the next one while it finishes the
// last; *checksum is the whole range's, combined from the requests' in file order.
void transfer_in_requests(io::RawAioHandle& handle, bool read, char* buffer, int64_t size, int64_t request_size,
                          const std::string& path, uint32_t* checksum) {
  std::vector<uint32_t> crcs((size + request_size - 1) / request_size);
  for (int64_t offset = 0, i = 0; offset < size; offset += request_size, ++i) {
    const int64_t length = std::min(request_size, size - offset);
    uint32_t* crc = checksum ? &crcs[i] : nullptr;
    if (read)
      handle.async_pread(buffer + offset, length, path, offset, crc);
    else
      handle.async_pwrite(buffer + offset, length, path, offset, crc);
  }
  handle.wait();
  if (!checksum) return;
  *checksum = 0;
  for (int64_t offset = 0, i = 0; offset < size; offset += request_size, ++i)
    *checksum = io::crc32c_combine(*checksum, crcs[i], std::min(request_size, size - offset));
}

}  // namespace

void ParentLink::send(const std::string& line) const {
  std::string text = line;
  for (char& c : text)
    if (c == '\n') c = ' ';
  text += '\n';
  // Short lines through a pipe are written whole; nothing to retry.
  if (::write(to_parent, text.data(), text.size()) < 0) _exit(3);
}

bool ParentLink::barrier() const {
  send("ready");
  char go;
  return ::read(from_parent, &go, 1) == 1;
}

void run_process(const Options& options, bool read, const io::AioSettings& settings, int process,
                 const ParentLink& link) {
  const std::string path = file_of(options.folder, process);
  const int64_t size = options.io_size;
  io::LockedBuffers locked;
  char* buffer = static_cast<char*>(locked.allocate(static_cast<size_t>(size)));
  // Every page is touched here, so that page faults stay out of the timed loops.
  fill_random(buffer, size, 0x5eed0000ull + static_cast<uint64_t>(process));
  if (read) {
    const int64_t existing = size_of(path);
    if (existing < size && !options.create)
      throw Error(existing < 0 ? std::string("no file to read (run a write first, or pass --create)")
                               : "the file to read has " + std::to_string(existing) + " bytes, fewer than --io_size " +
                                     std::to_string(size) + " (pass --create to rewrite it)")
          .with_path(path);
    if (existing < size) create_file(path, buffer, size);
    std::memset(buffer, 0, static_cast<size_t>(size));
  }

  std::unique_ptr<io::RawAioHandle> shared_handle;
  if (options.handle) shared_handle = std::make_unique<io::RawAioHandle>(settings);
  int64_t direct_bytes = 0, buffered_bytes = 0;
  double cpu_total = 0;
  uint32_t checksum = 0;
  for (int loop = 0; loop < options.loops; ++loop) {
    if (!read) {
      // DeepSpeed writes a fresh file each loop: overwriting allocated blocks can be faster.
      if (!options.overwrite && ::unlink(path.c_str()) != 0 && errno != ENOENT)
        throw Error("cannot remove the previous loop's file").with_path(path).with_errno(errno);
      // Outside the timed loop, as fio lays its files out before its clock starts.
      io::preallocate(path, size);
    }
    if (!link.barrier()) return;

    const double cpu_start = cpu_s();
    const double start = monotonic_s();
    // Without --handle, each loop sets its rings up anew, as DeepSpeed's aio_read/aio_write do.
    std::unique_ptr<io::RawAioHandle> loop_handle;
    if (!shared_handle) loop_handle = std::make_unique<io::RawAioHandle>(settings);
    io::RawAioHandle& handle = shared_handle ? *shared_handle : *loop_handle;
    const int64_t direct_before = handle.direct_bytes(), buffered_before = handle.buffered_bytes();
    if (options.request_size > 0 && options.request_size < size)
      transfer_in_requests(handle, read, buffer, size, options.request_size, path,
                           options.checksum ? &checksum : nullptr);
    else if (read)
      handle.sync_pread(buffer, size, path, 0, options.checksum ? &checksum : nullptr);
    else
      handle.sync_pwrite(buffer, size, path, 0, options.checksum ? &checksum : nullptr);
    direct_bytes += handle.direct_bytes() - direct_before;
    buffered_bytes += handle.buffered_bytes() - buffered_before;
    loop_handle.reset();
    const double end = monotonic_s();
    cpu_total += cpu_s() - cpu_start;
    link.send("loop " + std::to_string(start) + " " + std::to_string(end));
  }
  link.send("cpu " + std::to_string(cpu_total));
  link.send("bytes " + std::to_string(direct_bytes) + " " + std::to_string(buffered_bytes));
  if (options.validate) {
    std::string problem = compare_with_file(path, buffer, size);
    if (problem.empty() && options.checksum && checksum != io::crc32c(0, buffer, static_cast<size_t>(size)))
      problem = "the handle's CRC-32C of " + path + " differs from the buffer's";
    if (!problem.empty()) link.send("invalid " + problem);
  }
}

}  // namespace ds::io_bench
