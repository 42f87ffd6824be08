// Stage partitioning against its definition: "uniform" by closed form, "parameters" against an
// exhaustive search over every cut of small pipelines, "type:<regex>" against cuts worked out by hand.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <string>
#include <vector>

#include "dstrain/pipe/partition.hpp"
#include "dstrain/runtime/error.hpp"

using ds::pipe::StageBounds;

namespace {

void require_valid(const StageBounds& bounds, int num_layers, int stages) {
  REQUIRE(bounds.size() == static_cast<size_t>(stages + 1));
  REQUIRE(bounds.front() == 0);
  REQUIRE(bounds.back() == num_layers);
  for (int s = 0; s < stages; ++s) REQUIRE(bounds[s] < bounds[s + 1]);  // no stage without layers
}

int64_t heaviest(const std::vector<int64_t>& weights, const StageBounds& bounds) {
  int64_t most = 0;
  for (size_t s = 0; s + 1 < bounds.size(); ++s)
    most = std::max(most, std::accumulate(weights.begin() + bounds[s], weights.begin() + bounds[s + 1], int64_t{0}));
  return most;
}

// The lightest heaviest stage over every way of cutting `weights` into `stages` non-empty ranges.
int64_t best_by_search(const std::vector<int64_t>& weights, int first, int stages) {
  const int n = static_cast<int>(weights.size());
  if (stages == 1) return std::accumulate(weights.begin() + first, weights.end(), int64_t{0});
  int64_t best = INT64_MAX;
  int64_t load = 0;
  for (int end = first + 1; n - end >= stages - 1; ++end) {
    load += weights[end - 1];
    best = std::min(best, std::max(load, best_by_search(weights, end, stages - 1)));
  }
  return best;
}

}  // namespace

TEST_CASE("uniform partitions give every stage floor or ceil of layers / stages, larger first", "[pipe][partition]") {
  for (int stages = 1; stages <= 8; ++stages) {
    for (int layers = stages; layers <= 30; ++layers) {
      INFO(layers << " layers, " << stages << " stages");
      const StageBounds bounds = ds::pipe::partition_uniform(layers, stages);
      require_valid(bounds, layers, stages);
      for (int s = 0; s < stages; ++s) {
        const int count = bounds[s + 1] - bounds[s];
        REQUIRE(count == layers / stages + (s < layers % stages ? 1 : 0));
      }
    }
  }
  CHECK(ds::pipe::partition_uniform(10, 4) == StageBounds{0, 3, 6, 8, 10});
}

TEST_CASE("parameter partitions make the heaviest stage as light as any cut can", "[pipe][partition]") {
  uint64_t state = 12345;
  auto next_weight = [&state] {
    state = state * 6364136223846793005ULL + 1442695040888963407ULL;
    const uint64_t r = state >> 33;
    return static_cast<int64_t>(r % 4 == 0 ? 0 : r % 1000);  // zeros too: layers without parameters
  };
  for (int layers = 1; layers <= 9; ++layers) {
    for (int stages = 1; stages <= layers; ++stages) {
      for (int trial = 0; trial < 20; ++trial) {
        std::vector<int64_t> weights(layers);
        for (int64_t& w : weights) w = next_weight();
        INFO(layers << " layers, " << stages << " stages, trial " << trial);
        const StageBounds bounds = ds::pipe::partition_balanced(weights, stages);
        require_valid(bounds, layers, stages);
        REQUIRE(heaviest(weights, bounds) == best_by_search(weights, 0, stages));
      }
    }
  }
}

TEST_CASE("a GPT-like model splits its heavy embedding and head apart", "[pipe][partition]") {
  // embedding (wte + wpe), four equal blocks, head (ln_f + the tied wte copy)
  const std::vector<int64_t> weights{9000, 3000, 3000, 3000, 3000, 8200};
  const std::vector<std::string> types{"Embedding", "Block", "Block", "Block", "Block", "Head"};
  CHECK(ds::pipe::partition_layers("parameters", weights, types, 2) == StageBounds{0, 3, 6});
  CHECK(ds::pipe::partition_layers("best", weights, types, 2) == StageBounds{0, 3, 6});
  CHECK(ds::pipe::partition_layers("uniform", weights, types, 4) == StageBounds{0, 2, 4, 5, 6});
  // Four stages: the embedding alone is the floor; earlier stages take as many layers as fit.
  CHECK(ds::pipe::partition_layers("parameters", weights, types, 4) == StageBounds{0, 1, 4, 5, 6});
}

TEST_CASE("type:<regex> balances the count of the layers whose type matches", "[pipe][partition]") {
  // DeepSpeed's "type:" weights: 1 per matching layer, 0 otherwise, balanced like parameters.
  const std::vector<int64_t> parameters{9000, 3000, 3000, 3000, 3000, 8200};
  const std::vector<std::string> types{"Embedding", "Block", "Block", "Block", "Block", "Head"};
  // Weights 0 1 1 1 1 0. Two stages: two blocks each; the zero-weight embedding and head ride along.
  CHECK(ds::pipe::partition_layers("type:Block", parameters, types, 2) == StageBounds{0, 3, 6});
  // Four stages, one block each: stage 0 takes the embedding with its block, stage 3 the head.
  CHECK(ds::pipe::partition_layers("type:Block", parameters, types, 4) == StageBounds{0, 2, 3, 4, 6});
  // Case is ignored and the match may be anywhere in the name (re.search, re.IGNORECASE).
  CHECK(ds::pipe::partition_layers("type:bLoC", parameters, types, 4) == StageBounds{0, 2, 3, 4, 6});
  // Weights 1 0 0 0 0 1: the embedding's stage takes every block, as many layers as fit under 1.
  CHECK(ds::pipe::partition_layers("type:^(embedding|head)$", parameters, types, 2) == StageBounds{0, 5, 6});
  // Three blocks of one type and one of another: "type:attn" weighs the first three only.
  const std::vector<std::string> mixed{"Embedding", "AttnBlock", "AttnBlock", "AttnBlock", "MlpBlock", "Head"};
  CHECK(ds::pipe::partition_layers("type:attn", parameters, mixed, 3) == StageBounds{0, 2, 3, 6});
}

TEST_CASE("a stage without layers is an error naming pipeline.stages", "[pipe][partition]") {
  for (const char* method : {"uniform", "parameters", "type:B"}) {
    INFO(method);
    try {
      ds::pipe::partition_layers(method, {10, 20, 30}, {"A", "B", "C"}, 4);
      FAIL("4 stages of 3 layers were accepted");
    } catch (const ds::Error& e) {
      CHECK(e.key() == std::optional<std::string>("pipeline.stages"));
      CHECK_THAT(e.what(), Catch::Contains("3 layers") && Catch::Contains("4 pipeline stages"));
    }
  }
  CHECK_THROWS_AS(ds::pipe::partition_uniform(5, 0), ds::Error);
  CHECK_THROWS_AS(ds::pipe::partition_balanced({1, -2, 3}, 2), ds::Error);
}

TEST_CASE("an unsupported partition method is an error naming pipeline.partition", "[pipe][partition]") {
  // "profile" is DeepSpeed's unimplemented method; the type regexes below parse but match nothing, or
  // do not parse.
  for (const char* method : {"profile", "type:transformer", "type:(block"}) {
    INFO(method);
    try {
      ds::pipe::partition_layers(method, {1, 2, 3}, {"Embedding", "Block", "Head"}, 2);
      FAIL(method << " was accepted");
    } catch (const ds::Error& e) {
      CHECK(e.key() == std::optional<std::string>("pipeline.partition"));
      CHECK_THAT(e.what(), Catch::Contains(method));
    }
  }
}
