#include "dstrain/engine/data/token_source.hpp"

#include "dstrain/runtime/error.hpp"

#include <torch/torch.h>

#include <string>

namespace ds::data {

Batch TokenSource::batch(int64_t step, int64_t micro_step, int rank, int world_size, int64_t micro_batch_size) const {
  if (step < 0 || micro_step < 0 || micro_batch_size <= 0 || world_size <= 0 || rank < 0 || rank >= world_size) {
    throw Error("invalid batch request: step " + std::to_string(step) + ", micro step " +
                std::to_string(micro_step) + ", rank " + std::to_string(rank) + " of " +
                std::to_string(world_size) + ", micro-batch size " + std::to_string(micro_batch_size));
  }
  const int64_t row = block_size_ + 1;
  const int64_t first = (micro_step * world_size + rank) * micro_batch_size;
  at::Tensor rows = torch::empty({micro_batch_size, row}, torch::kLong);
  int64_t* tokens = rows.data_ptr<int64_t>();
  for (int64_t i = 0; i < micro_batch_size; ++i) sample(step, first + i, tokens + i * row);
  return {rows.narrow(1, 0, block_size_).contiguous(), rows.narrow(1, 1, block_size_).contiguous()};
}

}  // namespace ds::data
