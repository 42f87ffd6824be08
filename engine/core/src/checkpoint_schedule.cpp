#include "dstrain/engine/checkpoint_schedule.hpp"

#include "dstrain/engine/checkpoint/folder.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/rank_env.hpp"

namespace ds {

CheckpointSchedule::CheckpointSchedule(CheckpointPolicy policy) : policy_(std::move(policy)) {
  if (policy_.interval < 0) throw Error("the save interval must be >= 0").with_key("--save-interval");
  if (policy_.keep_last < 0) throw Error("keep-last must be >= 0").with_key("--keep-last");
}

void CheckpointSchedule::save(EngineCore& engine) {
  engine.save_checkpoint(policy_.dir);
  last_saved_ = engine.global_steps();
  // With node-local storage every node's first rank prunes its own folder.
  const bool node_local = engine.config().checkpoint().use_node_local_storage;
  if (engine.dp_group().rank() == 0 || (node_local && rank_env_from_environment().local_rank == 0))
    prune_checkpoints(policy_.dir, policy_.keep_last);
}

bool CheckpointSchedule::after_step(EngineCore& engine) {
  if (policy_.interval == 0 || engine.global_steps() % policy_.interval != 0 || engine.global_steps() == last_saved_)
    return false;
  save(engine);
  return true;
}

void CheckpointSchedule::finish(EngineCore& engine) {
  if (engine.global_steps() != last_saved_) save(engine);
}

}  // namespace ds
