// `dstrain eval --checkpoint DIR [--tag T] [--config X] [--iters N] [--batch-size B]`: prints the
// mean held-out loss of a checkpoint's weights, in one process whatever world size wrote it; DIR
// may be a pipeline's save folder, whose stages' folders are read in turn (model_checkpoint.hpp).
// The model and data.valid come from X when given, else from the config the checkpoint recorded;
// N defaults to dstrain.eval_iters, B to train_micro_batch_size_per_gpu. Validation batch i holds
// the same windows for B samples in one process as for B / W samples on each of W ranks, so the
// trainer's val_loss on W ranks equals `dstrain eval --batch-size W * micro`.
#pragma once

#include <CLI/CLI.hpp>

namespace ds::app {

void add_eval_command(CLI::App& app);

}  // namespace ds::app
