// `dstrain estimate` (model-state bytes per rank for each ZeRO stage), `dstrain plan` (the
// memory plan per rank: every buffer, the predicted peak and the budget) and `dstrain export`
// (a checkpoint's fp32 weights as a plain LibTorch file, or as Hugging Face's model.safetensors and
// config.json).
#pragma once

#include <CLI/CLI.hpp>

namespace ds::app {

void add_estimate_command(CLI::App& app);
void add_plan_command(CLI::App& app);
void add_export_command(CLI::App& app);

}  // namespace ds::app
