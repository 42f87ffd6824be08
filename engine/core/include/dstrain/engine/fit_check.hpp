// Before the built-in GPT is built: a config whose predicted peak (ds::MemoryPlan, after the
// planner chose what the user left unset) is over this rank's budget is refused, naming the setting
// behind the largest share and the bytes, instead of an allocator's failure minutes later (a
// billion layers would allocate for half a minute, then die with a bare std::bad_alloc).
#pragma once

#include "dstrain/engine/models/gpt_config.hpp"
#include "dstrain/runtime/config.hpp"

namespace ds {

// ds::Error naming the key; returns when the peak fits or no limit is known. `world` is the
// data-parallel world size; the ranks on this node share the node's limits.
void refuse_unless_fits(const Config& config, const models::GPTConfig& gpt, int world);

}  // namespace ds
