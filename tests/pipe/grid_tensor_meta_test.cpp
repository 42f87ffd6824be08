// The rank grid (DeepSpeed's stage-major PipeDataParallelTopology) and the activation header.
#include <catch2/catch.hpp>

#include <ATen/ATen.h>

#include <set>
#include <utility>

#include "dstrain/pipe/grid.hpp"
#include "dstrain/pipe/tensor_meta.hpp"
#include "dstrain/runtime/error.hpp"

using ds::pipe::PipelineGrid;
using ds::pipe::TensorMeta;

TEST_CASE("the grid is stage-major: a stage's replicas hold consecutive ranks", "[pipe][grid]") {
  // DeepSpeed: PipeDataParallelTopology(num_pp=2, num_dp=2) puts stage 0 on ranks 0, 1.
  const PipelineGrid r1(4, 2, 1);
  CHECK(r1.stage() == 0);
  CHECK(r1.replica() == 1);
  const PipelineGrid r2(4, 2, 2);
  CHECK(r2.stage() == 1);
  CHECK(r2.replica() == 0);
  CHECK(r2.is_last_stage());
  for (int world : {1, 2, 4, 6, 8, 12}) {
    for (int stages = 1; stages <= world; ++stages) {
      if (world % stages != 0) continue;
      std::set<std::pair<int, int>> seen;
      for (int rank = 0; rank < world; ++rank) {
        const PipelineGrid grid(world, stages, rank);
        REQUIRE(grid.replicas() * stages == world);
        REQUIRE(grid.rank_of(grid.stage(), grid.replica()) == rank);
        REQUIRE(rank / grid.replicas() == grid.stage());
        seen.insert({grid.stage(), grid.replica()});
      }
      REQUIRE(seen.size() == static_cast<size_t>(world));  // every (stage, replica) exactly once
    }
  }
}

TEST_CASE("stages that do not divide the world are an error naming pipeline.stages", "[pipe][grid]") {
  try {
    PipelineGrid(6, 4, 0);
    FAIL("4 stages over 6 ranks were accepted");
  } catch (const ds::Error& e) {
    CHECK(e.key() == std::optional<std::string>("pipeline.stages"));
  }
  CHECK_THROWS_AS(PipelineGrid(4, 0, 0), ds::Error);
  CHECK_THROWS_AS(PipelineGrid(4, 2, 4), ds::Error);
}

TEST_CASE("a tensor header carries shape and dtype and reads back", "[pipe][tensor_meta]") {
  for (const at::Tensor& tensor :
       {at::zeros({4, 16, 32}, at::kFloat), at::zeros({3}, at::kBFloat16), at::scalar_tensor(0.0, at::kDouble),
        at::zeros({2, 1, 1, 1, 1, 1, 1, 5}, at::kHalf)}) {
    const TensorMeta meta = TensorMeta::of(tensor);
    const at::Tensor header = meta.encode();
    REQUIRE(header.numel() == TensorMeta::kHeaderLength);
    const TensorMeta back = TensorMeta::decode(header);
    REQUIRE(back == meta);
    const at::Tensor buffer = back.empty();
    CHECK(buffer.sizes() == tensor.sizes());
    CHECK(buffer.scalar_type() == tensor.scalar_type());
    CHECK_NOTHROW(meta.check(tensor, "x"));
  }
  CHECK_THROWS_AS(TensorMeta::of(at::zeros({1, 1, 1, 1, 1, 1, 1, 1, 1})), ds::Error);
  at::Tensor bad = TensorMeta::of(at::zeros({2})).encode();
  bad[1] = TensorMeta::kMaxDims + 1;
  CHECK_THROWS_AS(TensorMeta::decode(bad), ds::Error);
}

TEST_CASE("a tensor that differs from the agreed meta names both", "[pipe][tensor_meta]") {
  const TensorMeta agreed = TensorMeta::of(at::zeros({4, 16, 32}));
  try {
    agreed.check(at::zeros({4, 8, 32}), "the activation stage 0 sends");
    FAIL("a different shape passed");
  } catch (const ds::Error& e) {
    CHECK_THAT(e.what(), Catch::Contains("the activation stage 0 sends is [4, 8, 32] Float") &&
                             Catch::Contains("agreed on [4, 16, 32] Float"));
  }
  CHECK_THROWS_AS(agreed.check(at::zeros({4, 16, 32}, at::kDouble), "x"), ds::Error);
}
