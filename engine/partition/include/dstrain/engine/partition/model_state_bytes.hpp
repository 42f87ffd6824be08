// ds::ModelStateBytes: one rank's bytes of model state, as the ZeRO paper counts it. The engine
// reports them after a step (EngineCore::model_state_bytes); the memory plan predicts them.
#pragma once

#include <cstdint>

namespace ds {

struct ModelStateBytes {
  int64_t parameters = 0;  // model weights held (whole, or shards under stage 3) + fp32 master shard
                           // (none of its own in fp32 with the master in memory: it is the model's storage)
  int64_t gradients = 0;   // param.grad() held + the fp32 gradient shard (or its swap buffers)
  int64_t optimizer = 0;   // optimizer state shards
  int64_t total() const { return parameters + gradients + optimizer; }
};

}  // namespace ds
