// The config as the trainer reads it, for the trainer, `dstrain plan` and `dstrain estimate` alike:
// the file, then every `--set KEY=VALUE` in order, then `--steps N` as dstrain.steps (which "auto"
// total_num_steps reads), so that planning a run takes the same flags as making it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

namespace ds::app {

struct ConfigOverrides {
  std::vector<std::string> sets;  // "a.b.c=value": the value parsed as JSON, else a string
  int64_t steps = -1;             // -1: the config's dstrain.steps
};

// --set and --steps on `command`, with the trainer's help texts and checks.
void add_override_options(CLI::App& command, ConfigOverrides& overrides);

// The file at `path` (a JSON object, else a ds::Error naming the path) with the overrides applied.
nlohmann::json config_with_overrides(const std::string& path, const ConfigOverrides& overrides);

}  // namespace ds::app
