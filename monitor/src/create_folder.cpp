#include "create_folder.hpp"

#include <cerrno>
#include <filesystem>
#include <system_error>

#include "dstrain/runtime/error.hpp"

namespace ds::monitor {

void create_folder(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw Error("cannot create the monitor's folder: " + ec.message()).with_path(path).with_errno(ec.value());
  if (!std::filesystem::is_directory(path, ec))
    throw Error("the monitor's folder is not a directory").with_path(path).with_errno(ENOTDIR);
}

}  // namespace ds::monitor
