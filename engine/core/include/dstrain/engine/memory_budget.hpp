// ds::MemoryBudget: how much memory one rank may use, the tightest of what limits this node:
//
//   cgroup     the memory limit of this process's cgroup and of every group above it (v1
//              memory.limit_in_bytes, v2 memory.max; found from /proc/self/cgroup), the lowest
//   available  MemAvailable of /proc/meminfo
//   config     dstrain.memory_limit: bytes, or a string such as "1.5GB" (docs/config.md)
//
// divided among the ranks on the node (OpenMPI's local size): they share the group and the host.
// Torch-free; every path can be pointed elsewhere (tests write fake cgroup trees).
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json.hpp>

namespace ds {

class Config;

struct MemoryLimit {
  int64_t bytes = 0;
  std::string source;  // e.g. "cgroup /sys/fs/cgroup/memory/job (memory.limit_in_bytes)"
  std::string path;    // the file it was read from; "" for dstrain.memory_limit
};

struct MemoryBudget {
  std::optional<MemoryLimit> node;  // the tightest limit found; none when nothing limits
  int ranks_per_node = 1;
  // node's bytes / ranks_per_node; 0 when unlimited.
  int64_t per_rank() const { return node ? node->bytes / ranks_per_node : 0; }
};

struct MemorySources {
  std::string proc_self_cgroup = "/proc/self/cgroup";
  std::string cgroup_root = "/sys/fs/cgroup";  // v1 controllers below it (memory/), v2 at it or at unified/
  std::string meminfo = "/proc/meminfo";
};

// The lowest cgroup memory limit on the way from this process's group up to the root, v1 and v2
// alike; none when no group sets one (v1's "unlimited" is a huge number, v2's is "max").
std::optional<MemoryLimit> cgroup_memory_limit(const MemorySources& sources = {});
// MemAvailable in bytes; none when the file or line is missing.
std::optional<int64_t> mem_available(const std::string& meminfo = "/proc/meminfo");
// A size as dstrain.memory_limit takes it: a number of bytes, or a string of a number and a unit,
// B, KB/MB/GB/TB (powers of 1000) or KiB/MiB/GiB/TiB (powers of 1024). ds::Error naming `key`.
int64_t parse_memory_size(const nlohmann::json& value, const std::string& key);

// The budget of a rank of this node under `config` (its dstrain.memory_limit), with
// ranks_per_node ranks sharing the limits.
MemoryBudget memory_budget(const Config& config, int ranks_per_node, const MemorySources& sources = {});

}  // namespace ds
