// DeepSpeed's pipeline schedules. A schedule tells one stage of a pipeline what to do for one batch
// of micro-batches, as a sequence of steps, each step a list of instructions run in order. Every
// send in step t meets its receive in step t on the neighbouring stage, so a barrier between steps
// never deadlocks. The streams are DeepSpeed's (deepspeed/runtime/pipe/schedule.py), step for step:
// the same instructions in the same order, the same buffer ids, the same num_pipe_buffers().
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dstrain/pipe/instruction.hpp"

namespace ds::pipe {

using Step = std::vector<Instruction>;

class PipeSchedule {
 public:
  virtual ~PipeSchedule() = default;

  const std::vector<Step>& steps() const { return steps_; }
  std::vector<Step>::const_iterator begin() const { return steps_.begin(); }
  std::vector<Step>::const_iterator end() const { return steps_.end(); }

  int num_micro_batches() const { return micro_batches_; }
  int num_stages() const { return stages_; }
  int stage() const { return stage_id_; }
  bool is_first_stage() const { return stage_id_ == 0; }
  bool is_last_stage() const { return stage_id_ == stages_ - 1; }

  // How many pipeline buffers the engine allocates on this stage; every buffer_id is below it.
  virtual int num_pipe_buffers() const = 0;

  // The micro-batch that step `step_id` works on, mapped as DeepSpeed maps it. Outside
  // [0, num_micro_batches()) on the steps where this stage computes nothing.
  virtual int micro_batch_id(int step_id) const = 0;

 protected:
  // Throws ds::Error unless micro_batches > 0, stages > 0 and 0 <= stage_id < stages.
  PipeSchedule(int micro_batches, int stages, int stage_id);

  bool valid_micro_batch(int micro_batch_id) const;
  bool valid_stage(int stage_id) const;

  // Filled once by each schedule's constructor; a schedule is immutable afterwards.
  std::vector<Step> steps_;

 private:
  int micro_batches_;
  int stages_;
  int stage_id_;
};

// Pipelined forward passes only: micro-batch k runs on stage s at step k + s, over
// micro_batches + stages - 1 steps, alternating between two buffers.
class InferenceSchedule final : public PipeSchedule {
 public:
  InferenceSchedule(int micro_batches, int stages, int stage_id);

  int num_pipe_buffers() const override { return 2; }
  int micro_batch_id(int step_id) const override { return step_id - stage(); }
};

// DeepSpeed's synchronous 1F1B: 2 * (micro_batches + stages - 1) steps, each either a forward or a
// backward step (even stages forward on even steps, odd stages on odd steps), then the tied-gradient
// reduction, the data-parallel reduction and the optimizer step in the last step.
class TrainSchedule final : public PipeSchedule {
 public:
  TrainSchedule(int micro_batches, int stages, int stage_id);

  // As many buffers as micro-batches can be in flight here (forwarded, backward still to come):
  // stages - stage_id, at most micro_batches, at least 2.
  int num_pipe_buffers() const override;
  int micro_batch_id(int step_id) const override { return step_to_micro_batch(step_id).micro_batch_id; }

  struct StepWork {
    int micro_batch_id;
    bool is_forward;
  };
  // DeepSpeed's _step_to_micro_batch.
  StepWork step_to_micro_batch(int step_id) const;

 private:
  int buffer_index(int micro_batch_id) const { return micro_batch_id % num_pipe_buffers(); }
};

// Plain data parallelism with gradient accumulation, one buffer: load, forward and backward each
// micro-batch in one step, then reduce gradients and step the optimizer in the last.
class DataParallelSchedule final : public PipeSchedule {
 public:
  DataParallelSchedule(int micro_batches, int stages, int stage_id);

  int num_pipe_buffers() const override { return 1; }
  int micro_batch_id(int step_id) const override { return step_id; }
};

enum class ScheduleKind { Train, Inference, DataParallel };

// "train", "inference", "data-parallel": the names `dstrain schedule --kind` takes.
std::string to_string(ScheduleKind kind);

std::unique_ptr<PipeSchedule> make_schedule(ScheduleKind kind, int micro_batches, int stages, int stage_id);

}  // namespace ds::pipe
