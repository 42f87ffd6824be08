// dstrain.step_in_backward: with the optimizer on NVMe, each sub-group is swapped in, stepped and
// swapped out inside the boundary backward as soon as its reduced gradient is whole
// (docs/offload.md, "The step begun in backward"). Whether it can act depends on the config, which
// the memory planner reads too (it turns pipeline_read on for it), and on the engine's model and
// optimizer, which only the engine knows.
#pragma once

#include <string>

#include "dstrain/runtime/config.hpp"

namespace ds {

// Whether the config asks for it: dstrain.step_in_backward, off unless set (the trainer sets it
// true); another value than a bool is a ds::Error naming the key.
bool asks_step_in_backward(const Config& config);

// Why the config rules it out, or "": each sub-group is stepped as soon as its reduced gradient is
// whole, which needs nothing that depends on the whole gradient first (clipping's norm, fp16's
// overflow vote, accumulated micro-steps) and a refresh without collectives (stage 3). Not checked
// here: pipeline_read, the model's device, the optimizer, the number of sub-groups.
std::string step_in_backward_config_obstacle(const Config& config);

}  // namespace ds
