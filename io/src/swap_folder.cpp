#include "dstrain/io/swap_folder.hpp"

#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "dstrain/io/preallocate.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::io {

namespace {

void check_name(const std::string& name, const std::string& folder) {
  if (name.empty() || name == "." || name == ".." || name.find('/') != std::string::npos)
    throw Error("invalid swap name '" + name + "': it must be a plain file name").with_path(folder);
}

}  // namespace

SwapFolder::SwapFolder(std::string folder, RawAioHandle& handle) : folder_(std::move(folder)), handle_(handle) {
  std::error_code error;
  std::filesystem::create_directories(folder_, error);
  if (error) throw Error("cannot create the swap folder").with_path(folder_).with_errno(error.value());
}

void SwapFolder::swap_out(const std::string& name, const void* buffer, int64_t num_bytes) {
  check_name(name, folder_);
  // A name swapped out again with fewer bytes would otherwise keep the old tail in its file.
  if (contains(name) && sizes_[name] > num_bytes && ::truncate(path_of(name).c_str(), num_bytes) != 0)
    throw Error("cannot shorten the swap file").with_path(path_of(name)).with_errno(errno);
  if (!contains(name) || sizes_[name] < num_bytes) preallocate(path_of(name), num_bytes);
  sizes_[name] = num_bytes;
  handle_.async_pwrite(buffer, num_bytes, path_of(name), 0, &written_crc_[name]);
}

void SwapFolder::swap_in(const std::string& name, void* buffer, int64_t num_bytes) {
  check_name(name, folder_);
  if (size_of(name) != num_bytes)
    throw Error("swap_in of '" + name + "' asks for " + std::to_string(num_bytes) + " bytes, but " +
                std::to_string(size_of(name)) + " were swapped out")
        .with_path(path_of(name));
  pending_.push_back(std::make_unique<PendingCheck>(PendingCheck{name}));
  handle_.async_pread(buffer, num_bytes, path_of(name), 0, &pending_.back()->crc);
}

int SwapFolder::wait() {
  std::vector<std::unique_ptr<PendingCheck>> checks;
  checks.swap(pending_);
  const int completed = handle_.wait();
  for (const auto& check : checks)
    if (check->crc != written_crc_.at(check->name))
      throw Error("swap file of '" + check->name + "' corrupted: read back with another CRC-32C than it was written with")
          .with_path(path_of(check->name))
          .with_offset(0)
          .with_length(size_of(check->name));
  return completed;
}

int64_t SwapFolder::size_of(const std::string& name) const {
  auto found = sizes_.find(name);
  if (found == sizes_.end()) throw Error("nothing was swapped out under '" + name + "'").with_path(path_of(name));
  return found->second;
}

std::string SwapFolder::path_of(const std::string& name) const { return folder_ + "/" + name + ".swp"; }

void SwapFolder::remove(const std::string& name) {
  size_of(name);  // throws for an unknown name
  if (::unlink(path_of(name).c_str()) != 0 && errno != ENOENT)
    throw Error("cannot remove the swap file").with_path(path_of(name)).with_errno(errno);
  sizes_.erase(name);
  written_crc_.erase(name);
}

}  // namespace ds::io
