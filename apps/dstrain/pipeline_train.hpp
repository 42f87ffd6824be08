// `dstrain --config X.json` with pipeline.stages > 1: trains the built-in GPT with the pipeline
// engine (ds::PipelineEngine), world = stages x replicas, reporting as the data-parallel loop does.
#pragma once

#include <memory>

#include "dstrain/comm/backend.hpp"
#include "dstrain/runtime/config.hpp"
#include "preemption.hpp"
#include "train_command.hpp"
#include "trainer_block.hpp"

namespace ds::app {

// Trains `steps` steps; with --resume, from the tag --tag names in every stage or else the newest
// one complete in every stage (ckpt::newest_common_tag). Returns the exit code, as run_training.
int run_pipeline_training(const Config& config, const TrainOptions& options, const TrainerBlock& trainer, int64_t steps,
                          std::shared_ptr<comm::Backend> world, Preemption& preemption);

}  // namespace ds::app
