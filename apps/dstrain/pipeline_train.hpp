// `dstrain --config X.json` with pipeline.stages > 1: trains the built-in GPT with the pipeline
// engine (ds::PipelineEngine), world = stages x replicas, reporting as the data-parallel loop does.
#pragma once

#include <memory>

#include "dstrain/comm/backend.hpp"
#include "dstrain/runtime/config.hpp"
#include "train_command.hpp"

namespace ds::app {

int run_pipeline_training(const Config& config, const TrainOptions& options, std::shared_ptr<comm::Backend> world);

}  // namespace ds::app
