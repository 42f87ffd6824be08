#include "dstrain/engine/checkpoint/folder.hpp"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
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

// "x.tmp.<pid>": a temporary file of an atomic write that never got renamed.
bool is_orphaned_tmp(const std::string& name) {
  const auto at = name.rfind(".tmp.");
  if (at == std::string::npos || at + 5 == name.size()) return false;
  return std::all_of(name.begin() + static_cast<std::ptrdiff_t>(at) + 5, name.end(),
                     [](unsigned char c) { return std::isdigit(c) != 0; });
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

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot open for fsync").with_path(path).with_errno(errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw Error("fsync failed").with_path(path).with_errno(err);
}

void write_file_atomically(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  io::ShardWriter out(tmp);
  out.append(text.data(), static_cast<int64_t>(text.size()));
  out.finish();
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error("rename failed").with_path(path).with_errno(errno);
  fsync_path(fs::path(path).parent_path().string());
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
    const std::string name = entry.path().filename().string();
    const bool partial = name.size() > 1 && name[0] == '.' && ends_with(name, ".partial");
    if (!partial && !is_orphaned_tmp(name)) continue;
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
