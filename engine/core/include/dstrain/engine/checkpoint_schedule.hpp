// Periodic checkpoints for a training loop, and the checks a save directory gets before step 1.
//
//   ds::SaveDirLock lock(dir);                             // one job in the folder (its rank 0)
//   ds::prepare_save_dir(dir);                             // before training: fails fast
//   ds::CheckpointSchedule checkpoints({dir, /*interval=*/500, /*keep_last=*/3});
//   each step:  ...; engine->step(); checkpoints.after_step(*engine);
//   at the end: checkpoints.finish(*engine);
#pragma once

#include <cstdint>
#include <string>

#include "dstrain/engine/checkpoint/folder.hpp"

namespace ds {

class EngineCore;

struct CheckpointPolicy {
  std::string dir;
  int64_t interval = 0;  // save every `interval` optimizer steps; 0: only at finish()
  int keep_last = 0;     // keep the newest K global_step<N> checkpoints; 0: keep all
};

class CheckpointSchedule {
 public:
  // A negative interval or keep_last is a ds::Error naming the option.
  explicit CheckpointSchedule(CheckpointPolicy policy);

  // After an optimizer step: saves (then prunes) when the engine's step count is a multiple of the
  // interval. Collective. Returns whether it saved.
  bool after_step(EngineCore& engine);
  // At the end of training: saves unless this step was saved already. Collective.
  void finish(EngineCore& engine);

 private:
  void save(EngineCore& engine);

  CheckpointPolicy policy_;
  int64_t last_saved_ = -1;
};

}  // namespace ds
