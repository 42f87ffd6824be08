#include "dstrain/pipe/partition.hpp"

#include <algorithm>
#include <numeric>
#include <regex>

#include "dstrain/runtime/error.hpp"

namespace ds::pipe {
namespace {

void check_counts(int num_layers, int stages) {
  if (stages < 1)
    throw Error("pipeline stages must be >= 1, got " + std::to_string(stages)).with_key("pipeline.stages");
  if (num_layers < stages) {
    throw Error("cannot cut " + std::to_string(num_layers) + " layers into " + std::to_string(stages) +
                " pipeline stages: every stage needs at least one layer")
        .with_key("pipeline.stages");
  }
}

// The fewest contiguous ranges, none heavier than `limit`, that cover all layers (each range takes
// as many layers as fit). The caller guarantees that no single weight exceeds the limit.
int fewest_stages(const std::vector<int64_t>& weights, int64_t limit) {
  int count = 1;
  int64_t load = 0;
  for (int64_t w : weights) {
    if (load + w > limit) {
      ++count;
      load = 0;
    }
    load += w;
  }
  return count;
}

// DeepSpeed's "type:<regex>" weights: 1 for each layer whose type name the regex matches.
std::vector<int64_t> matching_layers(const std::string& pattern, const std::vector<std::string>& layer_types) {
  std::regex regex;
  try {
    regex = std::regex(pattern, std::regex::ECMAScript | std::regex::icase);
  } catch (const std::regex_error& e) {
    throw Error("pipeline partition \"type:" + pattern + "\": not a regular expression (" + e.what() + ")")
        .with_key("pipeline.partition");
  }
  std::vector<int64_t> weights;
  std::string types;
  for (const std::string& type : layer_types) {
    weights.push_back(std::regex_search(type, regex) ? 1 : 0);
    types += (types.empty() ? "" : ", ") + type;
  }
  if (std::accumulate(weights.begin(), weights.end(), int64_t{0}) == 0)
    throw Error("pipeline partition \"type:" + pattern + "\" matches no layer (the layers are " + types + ")")
        .with_key("pipeline.partition");
  return weights;
}

}  // namespace

StageBounds partition_uniform(int num_layers, int stages) {
  check_counts(num_layers, stages);
  const int base = num_layers / stages;
  const int extra = num_layers % stages;
  StageBounds bounds(stages + 1, 0);
  for (int s = 0; s < stages; ++s) bounds[s + 1] = bounds[s] + base + (s < extra ? 1 : 0);
  return bounds;
}

StageBounds partition_balanced(const std::vector<int64_t>& layer_weights, int stages) {
  const int num_layers = static_cast<int>(layer_weights.size());
  check_counts(num_layers, stages);
  for (int64_t w : layer_weights)
    if (w < 0) throw Error("layer weights must be non-negative, got " + std::to_string(w));

  // The lightest feasible heaviest stage, by bisection: a limit is feasible when the greedy cover
  // needs at most `stages` ranges (more ranges can always be made by splitting, as layers >= stages).
  int64_t low = *std::max_element(layer_weights.begin(), layer_weights.end());
  int64_t high = std::accumulate(layer_weights.begin(), layer_weights.end(), int64_t{0});
  while (low < high) {
    const int64_t mid = low + (high - low) / 2;
    if (fewest_stages(layer_weights, mid) <= stages) {
      high = mid;
    } else {
      low = mid + 1;
    }
  }

  // Each stage takes layers while they fit under the limit, leaving one layer for every stage after
  // it; the last takes the rest, which fits: the greedy cover reaches the end within `stages` ranges
  // and a stage held back by that reserve leaves a single layer to each later stage.
  StageBounds bounds(stages + 1, 0);
  int next = 0;
  for (int s = 0; s + 1 < stages; ++s) {
    const int reserve = stages - 1 - s;
    int64_t load = layer_weights[next++];
    while (num_layers - next > reserve && load + layer_weights[next] <= low) load += layer_weights[next++];
    bounds[s + 1] = next;
  }
  bounds[stages] = num_layers;
  return bounds;
}

StageBounds partition_layers(const std::string& method, const std::vector<int64_t>& layer_parameters,
                             const std::vector<std::string>& layer_types, int stages) {
  if (layer_types.size() != layer_parameters.size())
    throw Error("pipeline partition: " + std::to_string(layer_parameters.size()) + " parameter counts but " +
                std::to_string(layer_types.size()) + " layer types");
  if (method == "uniform") return partition_uniform(static_cast<int>(layer_parameters.size()), stages);
  if (method == "parameters" || method == "best") return partition_balanced(layer_parameters, stages);
  const std::string type_prefix = "type:";
  if (method.compare(0, type_prefix.size(), type_prefix) == 0) {
    check_counts(static_cast<int>(layer_types.size()), stages);
    return partition_balanced(matching_layers(method.substr(type_prefix.size()), layer_types), stages);
  }
  throw Error("pipeline partition method \"" + method +
              "\" is not supported; use \"uniform\", \"parameters\" or \"type:<regex>\"")
      .with_key("pipeline.partition");
}

}  // namespace ds::pipe
