#include "dstrain/pipe/schedule.hpp"

#include <algorithm>
#include <string>

#include "dstrain/runtime/error.hpp"

namespace ds::pipe {

PipeSchedule::PipeSchedule(int micro_batches, int stages, int stage_id)
    : micro_batches_(micro_batches), stages_(stages), stage_id_(stage_id) {
  if (micro_batches <= 0) {
    throw Error("pipeline schedule: micro_batches must be positive, got " + std::to_string(micro_batches));
  }
  if (stages <= 0) {
    throw Error("pipeline schedule: stages must be positive, got " + std::to_string(stages));
  }
  if (stage_id < 0 || stage_id >= stages) {
    throw Error("pipeline schedule: stage_id must be in [0, " + std::to_string(stages) + "), got " +
                std::to_string(stage_id));
  }
}

bool PipeSchedule::valid_micro_batch(int micro_batch_id) const {
  return 0 <= micro_batch_id && micro_batch_id < micro_batches_;
}

bool PipeSchedule::valid_stage(int stage_id) const { return 0 <= stage_id && stage_id < stages_; }

namespace {
bool is_even(int x) { return x % 2 == 0; }
}  // namespace

InferenceSchedule::InferenceSchedule(int micro_batches, int stages, int stage_id)
    : PipeSchedule(micro_batches, stages, stage_id) {
  const int total_steps = micro_batches + stages - 1;
  const int prev_stage = stage_id - 1;
  const int next_stage = stage_id + 1;
  for (int step_id = 0; step_id < total_steps; ++step_id) {
    Step cmds;
    const int micro_batch = step_id - stage_id;

    // Neighbouring stages use the two buffers in opposite phase, so that what one stage sends
    // this step comes from the buffer it received into on the step before.
    const int recv_buf = is_even(stage_id) ? step_id % 2 : (step_id + 1) % 2;
    const int send_buf = is_even(stage_id) ? (step_id + 1) % 2 : step_id % 2;

    if ((is_first_stage() || is_last_stage()) && valid_micro_batch(micro_batch)) {
      cmds.push_back({Op::LoadMicroBatch, recv_buf});
    }

    const bool sends = valid_stage(next_stage) && valid_micro_batch(micro_batch - 1);
    const bool receives = valid_stage(prev_stage) && valid_micro_batch(micro_batch);
    // Even stages send before they receive and odd stages receive before they send, so that a
    // chain of blocking exchanges always has a partner ready.
    if (is_even(stage_id)) {
      if (sends) cmds.push_back({Op::SendActivation, send_buf});
      if (receives) cmds.push_back({Op::RecvActivation, recv_buf});
    } else {
      if (receives) cmds.push_back({Op::RecvActivation, recv_buf});
      if (sends) cmds.push_back({Op::SendActivation, send_buf});
    }

    if (valid_micro_batch(micro_batch)) cmds.push_back({Op::ForwardPass, recv_buf});
    steps_.push_back(std::move(cmds));
  }
}

TrainSchedule::TrainSchedule(int micro_batches, int stages, int stage_id)
    : PipeSchedule(micro_batches, stages, stage_id) {
  const int total_steps = 2 * (micro_batches + stages - 1);
  const bool has_prev_stage = valid_stage(stage_id - 1);
  const bool has_next_stage = valid_stage(stage_id + 1);
  int prev_micro_batch = -1;
  for (int step_id = 0; step_id < total_steps; ++step_id) {
    const StepWork work = step_to_micro_batch(step_id);
    const int micro_batch = work.micro_batch_id;
    const bool prev_valid = valid_micro_batch(prev_micro_batch);
    const bool curr_valid = valid_micro_batch(micro_batch);
    Step cmds;

    // The exchange of this step: the result of the previous step leaves, the input of this one
    // arrives. Sending first frees the buffer before a receive can land in it.
    if (work.is_forward) {
      if (prev_valid && has_prev_stage) cmds.push_back({Op::SendGrad, buffer_index(prev_micro_batch)});
      if (curr_valid && has_prev_stage) cmds.push_back({Op::RecvActivation, buffer_index(micro_batch)});
    } else {
      if (curr_valid && has_next_stage) cmds.push_back({Op::RecvGrad, buffer_index(micro_batch)});
      if (prev_valid && has_next_stage) cmds.push_back({Op::SendActivation, buffer_index(prev_micro_batch)});
    }

    // The first stage loads inputs, the last loads labels.
    if ((is_first_stage() || is_last_stage()) && work.is_forward && curr_valid) {
      cmds.push_back({Op::LoadMicroBatch, buffer_index(micro_batch)});
    }

    if (curr_valid) {
      cmds.push_back({work.is_forward ? Op::ForwardPass : Op::BackwardPass, buffer_index(micro_batch)});
    }

    if (step_id == total_steps - 1) {
      cmds.push_back({Op::ReduceTiedGrads});
      cmds.push_back({Op::ReduceGrads});
      cmds.push_back({Op::OptimizerStep});
    }

    prev_micro_batch = micro_batch;
    steps_.push_back(std::move(cmds));
  }
}

int TrainSchedule::num_pipe_buffers() const {
  return std::max(2, std::min(num_stages() - stage(), num_micro_batches()));
}

// Stage s forwards micro-batch k at step 2k + s and runs its backward at step 2k + 2*stages - 1 - s;
// the four cases below are DeepSpeed's inversions of those two lines for each parity.
TrainSchedule::StepWork TrainSchedule::step_to_micro_batch(int step_id) const {
  const int stages = num_stages();
  const int stage_id = stage();
  if (is_even(step_id) && is_even(stage_id)) return {step_id / 2 - stage_id / 2, true};
  if (!is_even(step_id) && !is_even(stage_id)) return {(step_id - 1) / 2 - stage_id / 2, true};
  if (is_even(step_id)) return {step_id / 2 - stages + (stage_id + 1) / 2, false};
  return {(step_id - 1) / 2 - stages + 1 + stage_id / 2, false};
}

DataParallelSchedule::DataParallelSchedule(int micro_batches, int stages, int stage_id)
    : PipeSchedule(micro_batches, stages, stage_id) {
  for (int step_id = 0; step_id < micro_batches; ++step_id) {
    Step cmds = {{Op::LoadMicroBatch, 0}, {Op::ForwardPass, 0}, {Op::BackwardPass, 0}};
    if (step_id == micro_batches - 1) {
      cmds.push_back({Op::ReduceGrads});
      cmds.push_back({Op::OptimizerStep});
    }
    steps_.push_back(std::move(cmds));
  }
}

std::string to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::Train: return "train";
    case ScheduleKind::Inference: return "inference";
    case ScheduleKind::DataParallel: return "data-parallel";
  }
  return "ScheduleKind(" + std::to_string(static_cast<int>(kind)) + ")";
}

std::unique_ptr<PipeSchedule> make_schedule(ScheduleKind kind, int micro_batches, int stages, int stage_id) {
  switch (kind) {
    case ScheduleKind::Train: return std::make_unique<TrainSchedule>(micro_batches, stages, stage_id);
    case ScheduleKind::Inference: return std::make_unique<InferenceSchedule>(micro_batches, stages, stage_id);
    case ScheduleKind::DataParallel:
      return std::make_unique<DataParallelSchedule>(micro_batches, stages, stage_id);
  }
  throw Error("pipeline schedule: unknown kind " + std::to_string(static_cast<int>(kind)));
}

}  // namespace ds::pipe
