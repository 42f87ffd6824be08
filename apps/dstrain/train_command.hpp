// `dstrain --config X.json`: trains the built-in model of the config's "dstrain" block.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "progress.hpp"

namespace ds {
class CheckpointSchedule;
class EngineCore;
namespace comm {
class Backend;
}
}  // namespace ds

namespace ds::app {

class Preemption;

struct TrainOptions {
  std::string config_path;
  int64_t steps = -1;  // -1: the config's dstrain.steps
  std::string save_dir;
  int64_t save_interval = 0;  // save every N steps (0: only at the end)
  int keep_last = 0;          // keep the newest K periodic checkpoints (0: all)
  bool resume = false;
  std::string tag;  // with --resume: this tag (in every stage); empty: the newest complete one
  std::string metrics_path;
  ProgressMode progress = ProgressMode::Auto;  // --progress: the bar (progress.hpp)
  std::vector<std::string> overrides;  // "a.b.c=value" (value parsed as JSON, else a string)
  double comm_timeout_seconds = 1800;  // any wait in communication longer than this ends the job
  std::string preempt_signals = "TERM,USR1";  // save and exit on these (preemption.hpp); "none"
  unsigned preempt_timeout_seconds = 600;     // after the first signal, the step and the save get this long
};

void add_train_options(CLI::App& app, TrainOptions& options);
// A resumed run must have steps left: a ds::Error naming --steps otherwise.
void check_resumed_steps(int64_t checkpoint_step, int64_t steps);
// Stops training on a non-finite loss with a ds::Error (not under fp16, which skips such steps).
void check_finite_loss(double loss, int64_t step, bool fp16);
// Collective, after each step: when any rank has been asked to stop (preemption.hpp), saves a
// checkpoint to --save-dir (unless this step is saved already), says so and returns true.
bool stop_if_preempted(Preemption& preemption, comm::Backend& world, const TrainOptions& options,
                       CheckpointSchedule& checkpoints, EngineCore& engine);
// Trains; returns the process's exit code (0, or kPreemptedExitCode).
int run_training(const TrainOptions& options);

}  // namespace ds::app
