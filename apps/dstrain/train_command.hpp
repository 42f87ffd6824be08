// `dstrain --config X.json`: trains the built-in model of the config's "dstrain" block.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace ds::app {

struct TrainOptions {
  std::string config_path;
  int64_t steps = -1;  // -1: the config's dstrain.steps
  std::string save_dir;
  int64_t save_interval = 0;  // save every N steps (0: only at the end)
  int keep_last = 0;          // keep the newest K periodic checkpoints (0: all)
  bool resume = false;
  std::string metrics_path;
  std::vector<std::string> overrides;  // "a.b.c=value" (value parsed as JSON, else a string)
  double comm_timeout_seconds = 1800;  // any wait in communication longer than this ends the job
};

void add_train_options(CLI::App& app, TrainOptions& options);
// A resumed run must have steps left: a ds::Error naming --steps otherwise.
void check_resumed_steps(int64_t checkpoint_step, int64_t steps);
// Stops training on a non-finite loss with a ds::Error (not under fp16, which skips such steps).
void check_finite_loss(double loss, int64_t step, bool fp16);
int run_training(const TrainOptions& options);

}  // namespace ds::app
