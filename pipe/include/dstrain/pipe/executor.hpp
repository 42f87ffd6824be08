// PipelineExecutor: runs DeepSpeed's schedules on one stage of a pipeline, as DeepSpeed's
// PipelineEngine._exec_schedule does. Every instruction becomes one action:
//   LoadMicroBatch   first stage: stage.load_inputs(k); last stage: stage.load_labels(k)
//   RecvActivation   blocking receive from the previous stage into this buffer's receive tensor
//   ForwardPass      stage.forward(input); the last stage also computes the micro-batch's loss
//   SendActivation   blocking send of this buffer's output to the next stage
//   RecvGrad         blocking receive of the output's gradient from the next stage
//   BackwardPass     stage.backward(loss) on the last stage, else stage.backward(output, gradient)
//   SendGrad         blocking send of the input's gradient to the previous stage
//   ReduceTiedGrads, ReduceGrads, OptimizerStep   the stage's model-wide hooks
// Micro-batch k of a batch lives in buffer buffer_id of the instructions; each buffer's receive
// tensors are allocated once, on the stage's device, and reused by every later micro-batch in that
// buffer (the backend moves them between devices as it needs: MPI stages CUDA tensors through the
// host, NCCL sends them from the GPU). The activation
// shape and dtype are agreed with the neighbours at the first exchange of the run (TensorMeta) and
// checked on every send after it. The schedules pair every send with its receive in the same step,
// so the blocking exchanges never deadlock; a stage that throws ends the job (comm::run_or_abort),
// which is what frees a neighbour blocked on it.
#pragma once

#include <optional>
#include <vector>

#include "dstrain/comm/backend.hpp"
#include "dstrain/pipe/schedule.hpp"
#include "dstrain/pipe/stage.hpp"
#include "dstrain/pipe/tensor_meta.hpp"
#include "dstrain/runtime/timers.hpp"

namespace ds::pipe {

class PipelineExecutor {
 public:
  // pipe_group: the stages of this pipeline, ranked by stage; this stage is pipe_group.rank().
  // Both must outlive the executor. device: where the stage's module runs, which is where the
  // activations and gradients it receives land.
  PipelineExecutor(Stage& stage, comm::Backend& pipe_group, at::Device device = at::kCPU);

  // One training batch of `micro_batches` (TrainSchedule), ending with the optimizer step. Returns
  // the mean of the micro-batches' losses, on every stage.
  double train_batch(int micro_batches);
  // Forward only (InferenceSchedule), without gradients. The mean loss, on every stage.
  double eval_batch(int micro_batches);

  // Seconds in each instruction since the last reset, named by op ("RecvActivation", ...). The
  // receives are this stage waiting for its neighbours; a blocking send of a large activation
  // waits for the neighbour's receive, too.
  TimerRegistry& timers() { return timers_; }

 private:
  struct Buffer {
    at::Tensor received;     // RecvActivation lands here, reused
    at::Tensor input;        // what ForwardPass consumed, kept until its gradient has left
    at::Tensor labels;
    at::Tensor output;       // kept for SendActivation and BackwardPass
    at::Tensor loss;
    at::Tensor output_grad;  // RecvGrad lands here, reused
  };

  double run(const PipeSchedule& schedule, bool training);
  void execute(const PipeSchedule& schedule, int step_id, const Instruction& instruction);
  bool is_first_stage() const { return stage_id_ == 0; }
  bool is_last_stage() const { return stage_id_ == stages_ - 1; }
  void load(Buffer& buffer, int micro_batch);
  void forward(Buffer& buffer);
  void backward(Buffer& buffer);
  void recv_activation(Buffer& buffer);
  void send_activation(Buffer& buffer);
  void recv_grad(Buffer& buffer);
  void send_grad(Buffer& buffer);

  Stage& stage_;
  comm::Backend& group_;
  at::Device device_;
  int stage_id_;
  int stages_;
  bool training_ = false;
  std::vector<Buffer> buffers_;
  std::optional<TensorMeta> sent_meta_;      // what this stage sends forward (and receives back)
  std::optional<TensorMeta> received_meta_;  // what the previous stage sends (and gets back)
  double loss_sum_ = 0;
  int losses_ = 0;
  TimerRegistry timers_;
};

}  // namespace ds::pipe
