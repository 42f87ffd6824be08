// Test-side reference for the pipeline protocol. It runs the instruction streams of every stage of
// one pipeline together, the way an executor would: exchanges are blocking point-to-point (a send
// completes only when the neighbour has reached the matching receive in the same step), and each
// buffer remembers which micro-batch it holds. It knows nothing of how schedules are built; it fails
// on the first thing an executor could not do: a send with no partner, a buffer overwritten while
// its micro-batch still needs it, a gradient that does not belong to the buffer it arrives in.
#pragma once

#include <vector>

#include "dstrain/pipe/schedule.hpp"

namespace pipe_test {

enum class Mode { Training, Inference };

struct ModelOp {
  int step;
  ds::pipe::Op op;
};

struct StageRecord {
  std::vector<std::vector<int>> forward_steps;   // per micro-batch: the steps that forwarded it
  std::vector<std::vector<int>> backward_steps;  // per micro-batch: the steps that backwarded it
  int inputs_loaded = 0;                         // data loads as inputs (first stage)
  int labels_loaded = 0;                         // data loads as labels (last stage)
  int activations_sent = 0;
  int activations_received = 0;
  int grads_sent = 0;
  int grads_received = 0;
  int peak_in_flight = 0;  // most micro-batches held in this stage's buffers at once
  std::vector<ModelOp> model_ops;  // ReduceTiedGrads, ReduceGrads, OptimizerStep, in order
};

// `streams[s]` is the step list of stage s. Throws std::logic_error naming the stage, step and
// instruction of the first violation.
std::vector<StageRecord> simulate_pipeline(const std::vector<std::vector<ds::pipe::Step>>& streams,
                                           int micro_batches, Mode mode);

}  // namespace pipe_test
