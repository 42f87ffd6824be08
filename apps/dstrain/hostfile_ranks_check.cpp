#include "hostfile_ranks_check.hpp"

#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "dstrain/runtime/error.hpp"

namespace ds::app {
namespace {

constexpr int64_t kHostBytes = 64;

std::string host_name() {
  char name[kHostBytes] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || name[0] == '\0') return "unknown-host";
  return name;
}

// "node1: ranks 0-1, node2: rank 2", hosts in the order of their first rank.
std::string ranks_per_host(const std::vector<std::string>& hosts) {
  std::vector<std::pair<std::string, std::vector<int>>> placed;
  for (int r = 0; r < static_cast<int>(hosts.size()); ++r) {
    auto it = std::find_if(placed.begin(), placed.end(), [&](const auto& p) { return p.first == hosts[r]; });
    if (it == placed.end()) it = placed.insert(placed.end(), {hosts[r], {}});
    it->second.push_back(r);
  }
  std::string text;
  for (const auto& [host, ranks] : placed) {
    const bool run = ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size());
    std::string list;
    if (ranks.size() == 1) list = "rank " + std::to_string(ranks[0]);
    else if (run) list = "ranks " + std::to_string(ranks.front()) + "-" + std::to_string(ranks.back());
    else
      for (int r : ranks) list += (list.empty() ? "ranks " : ",") + std::to_string(r);
    text += (text.empty() ? "" : ", ") + host + ": " + list;
  }
  return text;
}

}  // namespace

void check_ranks_fit_batch(comm::Backend& world, const Config& config, c10::Device device) {
  const int n = world.world_size();
  const int stages = config.pipeline().stages.value_or(1);
  std::optional<Error> failure;
  if (n % stages != 0) {
    failure = Error(std::to_string(n) + " ranks do not divide into pipeline.stages " + std::to_string(stages));
    failure->with_key("pipeline.stages");
  } else {
    try {
      Config resolved = config;
      resolved.resolve_batch(n / stages);
    } catch (const Error& e) {
      failure = e;
    }
  }
  // Every rank has the same config and world size (the build and config check ran before), so
  // every rank is here, or none.
  if (!failure) return;
  torch::Tensor mine = torch::zeros({kHostBytes}, torch::kUInt8);
  const std::string name = host_name();
  std::memcpy(mine.data_ptr<uint8_t>(), name.data(), name.size());
  torch::Tensor all = torch::empty({kHostBytes * n}, torch::TensorOptions().device(device).dtype(torch::kUInt8));
  world.all_gather_into(all, mine.to(device));
  all = all.cpu();
  std::vector<std::string> hosts;
  for (int r = 0; r < n; ++r) hosts.emplace_back(reinterpret_cast<const char*>(all.data_ptr<uint8_t>()) + r * kHostBytes);
  Error error(failure->message() + "; mpirun started " + std::to_string(n) + " ranks (" + ranks_per_host(hosts) +
              "): give the hostfile's slots or -np a count the batch keys fit (dstrain check-hostfile checks a "
              "hostfile before the launch)");
  if (failure->key()) error.with_key(*failure->key());
  throw error;
}

}  // namespace ds::app
