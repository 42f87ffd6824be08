#include "io_test_support.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/remove_tree.hpp"

namespace ds::io::testing {

namespace {

[[noreturn]] void fail(const std::string& what, const std::string& path) {
  throw std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

}  // namespace

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/dstrain_io_test_XXXXXX";
  if (!::mkdtemp(pattern.data())) fail("mkdtemp", pattern);
  path_ = pattern;
}

TempDir::~TempDir() {
  try {
    ds::remove_tree(path_);
  } catch (const ds::Error&) {
    // A destructor must not throw; a folder left in TMPDIR harms no later test.
  }
}

Bytes random_bytes(size_t count, uint64_t seed) {
  std::mt19937_64 generator(seed);
  Bytes bytes(count);
  for (char& byte : bytes) byte = static_cast<char>(generator());
  return bytes;
}

void plain_write(const std::string& path, const Bytes& bytes, int64_t offset) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0644);
  if (fd < 0) fail("open", path);
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::pwrite(fd, bytes.data() + done, bytes.size() - done, offset + static_cast<int64_t>(done));
    if (n <= 0) fail("pwrite", path);
    done += static_cast<size_t>(n);
  }
  ::close(fd);
}

Bytes plain_read(const std::string& path, int64_t offset, int64_t length) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) fail("open", path);
  Bytes bytes(static_cast<size_t>(length));
  int64_t done = 0;
  while (done < length) {
    ssize_t n = ::pread(fd, bytes.data() + done, static_cast<size_t>(length - done), offset + done);
    if (n < 0) fail("pread", path);
    if (n == 0) break;
    done += n;
  }
  ::close(fd);
  bytes.resize(static_cast<size_t>(done));
  return bytes;
}

Bytes plain_read_all(const std::string& path) { return plain_read(path, 0, file_size(path)); }

int64_t file_size(const std::string& path) {
  struct stat status;
  return ::stat(path.c_str(), &status) == 0 ? status.st_size : -1;
}

bool supports_o_direct(const std::string& directory) {
  std::string probe = directory + "/.o_direct_probe";
  int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_DIRECT, 0644);
  if (fd >= 0) ::close(fd);
  ::unlink(probe.c_str());
  return fd >= 0;
}

std::string run_in_child(const std::function<void()>& body) {
  int channel[2];
  if (::pipe(channel) != 0) fail("pipe", "");
  pid_t child = ::fork();
  if (child < 0) fail("fork", "");
  if (child == 0) {
    ::close(channel[0]);
    std::string message;
    try {
      body();
    } catch (const std::exception& error) {
      message = error.what();
      if (message.empty()) message = "exception without message";
    }
    if (!message.empty() && ::write(channel[1], message.data(), message.size()) < 0) ::_exit(2);
    ::_exit(message.empty() ? 0 : 1);
  }
  ::close(channel[1]);
  std::string message;
  char chunk[512];
  ssize_t n;
  while ((n = ::read(channel[0], chunk, sizeof chunk)) > 0) message.append(chunk, static_cast<size_t>(n));
  ::close(channel[0]);
  int status = 0;
  ::waitpid(child, &status, 0);
  if (!WIFEXITED(status)) return "child died with signal " + std::to_string(WTERMSIG(status));
  if (WEXITSTATUS(status) != 0 && message.empty()) return "child exited with " + std::to_string(WEXITSTATUS(status));
  return message;
}

AlignedBuffer::AlignedBuffer(size_t bytes) {
  void* memory = nullptr;
  if (::posix_memalign(&memory, 4096, bytes == 0 ? 4096 : bytes) != 0) throw std::bad_alloc();
  data_ = static_cast<char*>(memory);
}

AlignedBuffer::~AlignedBuffer() { std::free(data_); }

}  // namespace ds::io::testing
