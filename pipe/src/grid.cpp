#include "dstrain/pipe/grid.hpp"

#include <string>

#include "dstrain/runtime/error.hpp"

namespace ds::pipe {

PipelineGrid::PipelineGrid(int world_size, int stages, int rank) : stages_(stages) {
  if (stages < 1 || world_size % stages != 0) {
    throw Error("pipeline stages (" + std::to_string(stages) + ") must be >= 1 and divide the world size (" +
                std::to_string(world_size) + ")")
        .with_key("pipeline.stages");
  }
  if (rank < 0 || rank >= world_size) {
    throw Error("rank " + std::to_string(rank) + " outside a world of " + std::to_string(world_size)).with_rank(rank);
  }
  replicas_ = world_size / stages;
  stage_ = rank / replicas_;
  replica_ = rank % replicas_;
}

}  // namespace ds::pipe
