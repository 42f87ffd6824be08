// `dstrain estimate` (model-state bytes per rank for each ZeRO stage) and `dstrain export`
// (a checkpoint's fp32 weights as a plain LibTorch file).
#pragma once

#include <CLI/CLI.hpp>

namespace ds::app {

void add_estimate_command(CLI::App& app);
void add_export_command(CLI::App& app);

}  // namespace ds::app
