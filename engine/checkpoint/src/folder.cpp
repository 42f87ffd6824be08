#include "dstrain/engine/checkpoint/folder.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "dstrain/io/shard_file.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/remove_tree.hpp"

namespace ds {
namespace {

namespace fs = std::filesystem;

bool ends_with(const std::string& text, const std::string& suffix) {
  return text.size() >= suffix.size() && text.compare(text.size() - suffix.size(), suffix.size(), suffix) == 0;
}

bool all_digits(const std::string& text) {
  return !text.empty() && std::all_of(text.begin(), text.end(), [](unsigned char c) { return std::isdigit(c) != 0; });
}

std::string host_name() {
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0) return "unknown-host";
  return name;
}

// Whether `owner` ("<host>.<pid>", or a bare "<pid>" as earlier versions wrote) names a process
// that is provably gone: one of this host whose pid no longer runs. Another host's cannot be known.
bool owner_is_gone(const std::string& owner) {
  const auto dot = owner.rfind('.');
  const std::string pid = dot == std::string::npos ? owner : owner.substr(dot + 1);
  if (!all_digits(pid)) return false;
  if (dot != std::string::npos && owner.substr(0, dot) != host_name()) return false;
  return ::kill(static_cast<pid_t>(std::stoll(pid)), 0) != 0 && errno == ESRCH;
}

// What an interrupted save left and nobody will finish: ".<tag>.partial" (an earlier version's,
// owner-less) or ".<tag>.partial.<owner>", and "x.tmp.<owner>", whose owner is gone.
bool is_debris(const std::string& name) {
  if (name.size() > 1 && name[0] == '.') {
    if (ends_with(name, ".partial")) return true;
    const auto at = name.find(".partial.");
    if (at != std::string::npos) return owner_is_gone(name.substr(at + 9));
  }
  const auto at = name.find(".tmp.");
  return at != std::string::npos && owner_is_gone(name.substr(at + 5));
}

// The step of a "global_step<N>" tag, or -1.
int64_t step_of(const std::string& tag) {
  const std::string prefix = "global_step";
  if (tag.rfind(prefix, 0) != 0 || tag.size() == prefix.size()) return -1;
  for (size_t i = prefix.size(); i < tag.size(); ++i)
    if (!std::isdigit(static_cast<unsigned char>(tag[i]))) return -1;
  return std::stoll(tag.substr(prefix.size()));
}

}  // namespace

std::string owner_id() { return host_name() + "." + std::to_string(::getpid()); }

SaveDirLock::SaveDirLock(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  const std::string path = (fs::path(dir) / ".dstrain.lock").string();
  fd_ = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw Error("cannot open the save folder's lock file").with_path(path).with_errno(errno);
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    if (err != EWOULDBLOCK) throw Error("cannot lock the save folder").with_path(path).with_errno(err);
    std::string holder;
    std::getline(std::ifstream(path), holder);
    throw Error("the save folder is in use by another dstrain job (" +
                (holder.empty() ? std::string("holder not recorded yet") : holder) +
                "); give this job its own --save-dir, or stop that one first")
        .with_path(path);
  }
  const std::string holder = "host " + host_name() + " pid " + std::to_string(::getpid()) + "\n";
  if (::ftruncate(fd_, 0) != 0 || ::pwrite(fd_, holder.data(), holder.size(), 0) != static_cast<ssize_t>(holder.size()))
    log::warn("checkpoint: could not record the holder in ", path, ": ", std::strerror(errno));
}

SaveDirLock::~SaveDirLock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
}

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot open for fsync").with_path(path).with_errno(errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw Error("fsync failed").with_path(path).with_errno(err);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + owner_id();
  try {
    io::ShardWriter out(tmp);
    out.append(text.data(), static_cast<int64_t>(text.size()));
    out.finish();
    if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error("rename failed").with_path(path).with_errno(errno);
  } catch (...) {
    ::unlink(tmp.c_str());  // nothing half-written stays behind
    throw;
  }
  fsync_path(fs::absolute(path).parent_path().string());
}

void prepare_save_dir(const std::string& dir) {
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_directory(dir, ec))
    throw Error("--save-dir is not a directory").with_path(dir).with_errno(ENOTDIR);
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create the checkpoint directory").with_path(dir).with_errno(ec.value());
  {
    const std::string probe = (fs::path(dir) / (".write_probe." + std::to_string(::getpid()))).string();
    io::ShardWriter out(probe);  // throws with the path and errno when the directory is not writable
    out.append("ok", 2);
    out.finish();
    fs::remove(probe, ec);
  }
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (!is_debris(entry.path().filename().string())) continue;
    try {
      remove_tree(entry.path().string());
      log::info("checkpoint: removed ", entry.path().string(), ", left by an interrupted save");
    } catch (const Error&) {
      // Another rank may be removing it too; what is left is removed at the next start.
    }
  }
}

void prune_checkpoints(const std::string& dir, int keep) {
  if (keep <= 0) return;
  std::string latest;
  std::ifstream(fs::path(dir) / "latest") >> latest;
  std::vector<std::pair<int64_t, fs::path>> complete;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const int64_t step = step_of(entry.path().filename().string());
    if (step >= 0 && fs::exists(entry.path() / "index.json")) complete.emplace_back(step, entry.path());
  }
  std::sort(complete.begin(), complete.end());
  for (size_t i = 0; i + static_cast<size_t>(keep) < complete.size(); ++i) {
    if (complete[i].second.filename() == latest) continue;
    // index.json first: a half-removed checkpoint is then never taken for a complete one.
    fs::remove(complete[i].second / "index.json", ec);
    try {
      remove_tree(complete[i].second.string());
      log::info("checkpoint: removed ", complete[i].second.string(), " (--keep-last ", keep, ")");
    } catch (const Error& e) {
      log::warn("checkpoint: could not remove an old checkpoint (--keep-last ", keep, "): ", e.what());
    }
  }
}

}  // namespace ds
