#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "dstrain/zero/shard_layout.hpp"

TEST_CASE("ShardLayout cuts every parameter into equal padded chunks", "[zero]") {
  std::vector<at::Tensor> params = {torch::arange(10, torch::kFloat), torch::arange(3, torch::kFloat).view({3, 1}),
                                    torch::arange(8, torch::kFloat)};
  for (int partitions : {1, 2, 3, 4}) {
    std::vector<at::Tensor> shards;
    for (int rank = 0; rank < partitions; ++rank) {
      ds::zero::ShardLayout layout(params, partitions, rank);
      int64_t expected_numel = 0;
      for (const auto& p : params) expected_numel += (p.numel() + partitions - 1) / partitions;
      REQUIRE(layout.shard_numel() == expected_numel);
      at::Tensor shard = torch::full({layout.shard_numel()}, -1.0f);
      for (size_t i = 0; i < params.size(); ++i) layout.copy_chunk(i, params[i], rank, layout.chunk_view(i, shard));
      shards.push_back(shard);
    }
    // Gathering the chunks rank-major and trimming the padding gives every parameter back.
    ds::zero::ShardLayout layout(params, partitions, 0);
    for (size_t i = 0; i < params.size(); ++i) {
      std::vector<at::Tensor> chunks;
      for (int rank = 0; rank < partitions; ++rank) chunks.push_back(layout.chunk_view(i, shards[rank]));
      at::Tensor gathered = torch::cat(chunks);
      at::Tensor restored = torch::empty_like(params[i]);
      layout.copy_gathered(i, gathered, restored);
      REQUIRE(torch::equal(restored, params[i]));
      REQUIRE(gathered.narrow(0, params[i].numel(), gathered.numel() - params[i].numel()).eq(0).all().item<bool>());
    }
  }
}
