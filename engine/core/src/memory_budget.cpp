#include "dstrain/engine/memory_budget.hpp"

#include <cctype>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>
#include <vector>

#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds {
namespace {

namespace fs = std::filesystem;

// cgroup v1 writes "no limit" as the largest page-aligned int64 (9223372036854771712); anything
// from 2^60 bytes on limits nothing real.
constexpr int64_t kUnlimited = int64_t{1} << 60;

std::optional<int64_t> read_limit_file(const fs::path& file) {
  std::ifstream in(file);
  std::string text;
  if (!(in >> text) || text == "max") return std::nullopt;
  try {
    const long long value = std::stoll(text);
    if (value <= 0 || value >= kUnlimited) return std::nullopt;
    return value;
  } catch (const std::exception&) {
    return std::nullopt;
  }
}

// The lowest of `file_name` in `leaf` and every folder above it up to `top`, both included.
void lowest_up_the_tree(const fs::path& top, const fs::path& leaf, const char* file_name,
                        std::optional<MemoryLimit>& lowest) {
  const fs::path stop = top.lexically_normal();
  for (fs::path dir = leaf.lexically_normal();; dir = dir.parent_path()) {
    const fs::path file = dir / file_name;
    if (const auto bytes = read_limit_file(file); bytes && (!lowest || *bytes < lowest->bytes))
      lowest = MemoryLimit{*bytes, "cgroup " + dir.string() + " (" + file_name + ")", file.string()};
    if (dir == stop || !dir.has_relative_path() || dir == dir.parent_path()) break;
  }
}

// The folder of the group that /proc/self/cgroup names `path` (relative) in the hierarchy mounted at
// `mount`. In a container without a cgroup namespace of its own, that path starts at the host's
// root while the mount starts at the container's group (/docker/<id>/job is mounted as job): the
// folder is then the longest tail of the path that exists below the mount, else the mount itself.
fs::path group_folder(const fs::path& mount, const fs::path& path) {
  for (auto first = path.begin(); first != path.end(); ++first) {
    fs::path tail;
    for (auto part = first; part != path.end(); ++part) tail /= *part;
    if (std::error_code error; fs::is_directory(mount / tail, error)) return mount / tail;
  }
  return mount;
}

bool has_memory_controller(const std::string& controllers) {
  std::stringstream list(controllers);
  for (std::string name; std::getline(list, name, ',');)
    if (name == "memory") return true;
  return false;
}

}  // namespace

std::optional<MemoryLimit> cgroup_memory_limit(const MemorySources& sources) {
  std::ifstream in(sources.proc_self_cgroup);
  std::optional<MemoryLimit> lowest;
  const fs::path root(sources.cgroup_root);
  // Each line is "hierarchy-id:controllers:path"; v2's unified hierarchy is "0::path".
  for (std::string line; std::getline(in, line);) {
    const size_t first = line.find(':'), second = line.find(':', first + 1);
    if (first == std::string::npos || second == std::string::npos) continue;
    const std::string id = line.substr(0, first);
    const std::string controllers = line.substr(first + 1, second - first - 1);
    const fs::path path = fs::path(line.substr(second + 1)).relative_path();
    if (has_memory_controller(controllers)) {
      lowest_up_the_tree(root / "memory", group_folder(root / "memory", path), "memory.limit_in_bytes", lowest);
    } else if (id == "0" && controllers.empty()) {
      // Unified alone, the hierarchy is mounted at the root; beside v1 (hybrid), at unified/.
      const fs::path top = fs::exists(root / "cgroup.controllers") ? root : root / "unified";
      lowest_up_the_tree(top, group_folder(top, path), "memory.max", lowest);
    }
  }
  return lowest;
}

std::optional<int64_t> mem_available(const std::string& meminfo) {
  std::ifstream in(meminfo);
  for (std::string line; std::getline(in, line);) {
    std::istringstream fields(line);
    std::string name;
    int64_t kib = 0;
    if (fields >> name >> kib && name == "MemAvailable:") return kib * 1024;
  }
  return std::nullopt;
}

int64_t parse_memory_size(const nlohmann::json& value, const std::string& key) {
  const auto invalid = [&] {
    return Error("expected a positive number of bytes or a size such as \"1.5GB\" or \"512MiB\", got " + value.dump())
        .with_key(key);
  };
  if (value.is_number()) {
    const double bytes = value.get<double>();
    if (!std::isfinite(bytes) || bytes < 1) throw invalid();
    return static_cast<int64_t>(bytes);
  }
  if (!value.is_string()) throw invalid();
  const std::string text = value.get<std::string>();
  size_t used = 0;
  double number = 0;
  try {
    number = std::stod(text, &used);
  } catch (const std::exception&) {
    throw invalid();
  }
  std::string unit = text.substr(used);
  while (!unit.empty() && std::isspace(static_cast<unsigned char>(unit.front()))) unit.erase(0, 1);
  static const std::vector<std::pair<std::string, double>> kUnits = {
      {"", 1},      {"B", 1},          {"KB", 1e3},       {"MB", 1e6},       {"GB", 1e9},
      {"TB", 1e12}, {"KiB", 1024.0},   {"MiB", 1048576.0}, {"GiB", 1073741824.0}, {"TiB", 1099511627776.0}};
  for (const auto& [name, scale] : kUnits)
    if (unit == name) {
      const double bytes = number * scale;
      if (!std::isfinite(bytes) || bytes < 1 || bytes >= static_cast<double>(kUnlimited)) throw invalid();
      return static_cast<int64_t>(bytes);
    }
  throw invalid();
}

MemoryBudget memory_budget(const Config& config, int ranks_per_node, const MemorySources& sources) {
  MemoryBudget budget;
  budget.ranks_per_node = std::max(1, ranks_per_node);
  auto consider = [&](std::optional<MemoryLimit> limit) {
    if (limit && (!budget.node || limit->bytes < budget.node->bytes)) budget.node = std::move(limit);
  };
  consider(cgroup_memory_limit(sources));
  if (const auto available = mem_available(sources.meminfo))
    consider(MemoryLimit{*available, "MemAvailable (" + sources.meminfo + ")", sources.meminfo});
  if (const auto it = config.dstrain_block().find("memory_limit"); it != config.dstrain_block().end() && !it->is_null())
    consider(MemoryLimit{parse_memory_size(*it, "dstrain.memory_limit"), "dstrain.memory_limit", ""});
  return budget;
}

}  // namespace ds
