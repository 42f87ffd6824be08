// `dstrain --config X.json`: trains the built-in model of the config's "dstrain" block.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace ds::app {

struct TrainOptions {
  std::string config_path;
  int64_t steps = -1;  // -1: the config's dstrain.steps
  std::string save_dir;
  bool resume = false;
  std::string metrics_path;
  std::vector<std::string> overrides;  // "a.b.c=value" (value parsed as JSON, else a string)
  double comm_timeout_seconds = 1800;  // any wait in communication longer than this ends the job
};

void add_train_options(CLI::App& app, TrainOptions& options);
int run_training(const TrainOptions& options);

}  // namespace ds::app
