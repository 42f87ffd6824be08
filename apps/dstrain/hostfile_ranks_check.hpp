// The check, at start, that the ranks mpirun placed (from the hostfile's slots or -np) make a world
// size the config's batch keys fit: the batch rule's own error, naming its key, with how many ranks
// run on which host, before anything slow. `dstrain check-hostfile` makes the same check before a
// launch.
#pragma once

#include <c10/core/Device.h>

#include "dstrain/comm/backend.hpp"
#include "dstrain/runtime/config.hpp"

namespace ds::app {

// Collective. Every rank throws the same ds::Error (the key of the batch rule that fails, e.g.
// train_batch_size) when the world size does not fit, naming each host and its ranks.
void check_ranks_fit_batch(comm::Backend& world, const Config& config, c10::Device device);

}  // namespace ds::app
