#include "dstrain/engine/data/token_file.hpp"

#include "dstrain/runtime/error.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <climits>

namespace ds::data {

// Tokens and header are read and written as the machine's own integers.
static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "llm.c token files are little-endian");

namespace {

constexpr int64_t kHeaderBytes = kTokenFileHeaderInts * sizeof(int32_t);

class File {
 public:
  File(const std::string& path, int flags) : path_(path), fd_(::open(path.c_str(), flags | O_CLOEXEC, 0644)) {
    if (fd_ < 0) throw Error("cannot open file").with_path(path_).with_errno(errno);
  }
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

  int64_t size() const {
    struct stat info {};
    if (::fstat(fd_, &info) != 0) throw Error("cannot stat file").with_path(path_).with_errno(errno);
    return info.st_size;
  }

  void read_exact(void* data, int64_t length, int64_t offset) const {
    auto* bytes = static_cast<char*>(data);
    for (int64_t done = 0; done < length;) {
      const ssize_t n = ::pread(fd_, bytes + done, length - done, offset + done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        throw Error(n == 0 ? "unexpected end of file" : "read failed")
            .with_path(path_).with_offset(offset + done).with_length(length - done).with_errno(n == 0 ? 0 : errno);
      }
      done += n;
    }
  }

  void write_exact(const void* data, int64_t length, int64_t offset) {
    const auto* bytes = static_cast<const char*>(data);
    for (int64_t done = 0; done < length;) {
      const ssize_t n = ::pwrite(fd_, bytes + done, length - done, offset + done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) throw Error("write failed").with_path(path_).with_offset(offset + done).with_errno(errno);
      done += n;
    }
  }

  // A write's last error (a full disk on NFS, say) may only show up here.
  void close() {
    const int fd = fd_;
    fd_ = -1;
    if (::close(fd) != 0) throw Error("close failed").with_path(path_).with_errno(errno);
  }

 private:
  std::string path_;
  int fd_;
};

}  // namespace

std::vector<uint16_t> read_token_file(const std::string& path) {
  File file(path, O_RDONLY);
  const int64_t size = file.size();
  if (size < kHeaderBytes) {
    throw Error("file of " + std::to_string(size) + " bytes is shorter than an llm.c token file's " +
                std::to_string(kHeaderBytes) + "-byte header")
        .with_path(path);
  }
  std::vector<int32_t> header(kTokenFileHeaderInts);
  file.read_exact(header.data(), kHeaderBytes, 0);
  if (header[0] != kTokenFileMagic) {
    throw Error("bad magic " + std::to_string(header[0]) + ", expected " + std::to_string(kTokenFileMagic) +
                ": not an llm.c token file")
        .with_path(path).with_offset(0);
  }
  if (header[1] != kTokenFileVersion) {
    throw Error("unsupported version " + std::to_string(header[1]) + ", expected " + std::to_string(kTokenFileVersion))
        .with_path(path).with_offset(sizeof(int32_t));
  }
  const int64_t count = header[2];
  const int64_t expected_size = kHeaderBytes + count * static_cast<int64_t>(sizeof(uint16_t));
  if (count < 0 || size != expected_size) {
    throw Error("header's token count " + std::to_string(count) + " needs a file of " +
                std::to_string(expected_size) + " bytes, found " + std::to_string(size))
        .with_path(path).with_offset(2 * sizeof(int32_t));
  }
  std::vector<uint16_t> tokens(count);
  file.read_exact(tokens.data(), count * static_cast<int64_t>(sizeof(uint16_t)), kHeaderBytes);
  return tokens;
}

void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens) {
  if (tokens.size() > static_cast<size_t>(INT32_MAX)) {
    throw Error("too many tokens for one llm.c token file: " + std::to_string(tokens.size())).with_path(path);
  }
  std::vector<int32_t> header(kTokenFileHeaderInts, 0);
  header[0] = kTokenFileMagic;
  header[1] = kTokenFileVersion;
  header[2] = static_cast<int32_t>(tokens.size());
  File file(path, O_WRONLY | O_CREAT | O_TRUNC);
  file.write_exact(header.data(), kHeaderBytes, 0);
  file.write_exact(tokens.data(), tokens.size() * sizeof(uint16_t), kHeaderBytes);
  file.close();
}

std::vector<uint16_t> read_text_tokens(const std::string& path) {
  File file(path, O_RDONLY);
  std::vector<unsigned char> bytes(file.size());
  file.read_exact(bytes.data(), bytes.size(), 0);
  return std::vector<uint16_t>(bytes.begin(), bytes.end());
}

}  // namespace ds::data
