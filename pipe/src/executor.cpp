#include "dstrain/pipe/executor.hpp"

#include <ATen/ATen.h>
#include <ATen/core/grad_mode.h>

#include <algorithm>
#include <string>

#include "dstrain/runtime/error.hpp"

namespace ds::pipe {
namespace {

// Tags keep the header, the activations and the gradients apart, whatever else shares the group.
constexpr int kMetaTag = 1;
constexpr int kActivationTag = 2;
constexpr int kGradTag = 3;

}  // namespace

PipelineExecutor::PipelineExecutor(Stage& stage, comm::Backend& pipe_group, at::Device device)
    : stage_(stage),
      group_(pipe_group),
      device_(device),
      stage_id_(pipe_group.rank()),
      stages_(pipe_group.world_size()) {}

double PipelineExecutor::train_batch(int micro_batches) {
  return run(TrainSchedule(micro_batches, stages_, stage_id_), true);
}

double PipelineExecutor::eval_batch(int micro_batches) {
  at::NoGradGuard no_grad;
  return run(InferenceSchedule(micro_batches, stages_, stage_id_), false);
}

double PipelineExecutor::run(const PipeSchedule& schedule, bool training) {
  training_ = training;
  buffers_.resize(std::max<size_t>(buffers_.size(), schedule.num_pipe_buffers()));
  loss_sum_ = 0;
  losses_ = 0;
  const std::vector<Step>& steps = schedule.steps();
  for (size_t step_id = 0; step_id < steps.size(); ++step_id) {
    for (const Instruction& instruction : steps[step_id]) execute(schedule, static_cast<int>(step_id), instruction);
  }
  // The last stage knows the loss; DeepSpeed broadcasts it to the pipeline likewise.
  at::Tensor mean = at::zeros({1}, at::kDouble);
  if (is_last_stage()) mean.fill_(loss_sum_ / losses_);
  group_.broadcast(mean, stages_ - 1);
  for (Buffer& buffer : buffers_) buffer.input = buffer.labels = buffer.output = buffer.loss = at::Tensor();
  return mean.item<double>();
}

void PipelineExecutor::execute(const PipeSchedule& schedule, int step_id, const Instruction& instruction) {
  ScopedTimer timer(&timers_, to_string(instruction.op));
  auto buffer = [&]() -> Buffer& { return buffers_.at(instruction.buffer_id); };
  switch (instruction.op) {
    case Op::LoadMicroBatch: return load(buffer(), schedule.micro_batch_id(step_id));
    case Op::RecvActivation: return recv_activation(buffer());
    case Op::ForwardPass: return forward(buffer());
    case Op::SendActivation: return send_activation(buffer());
    case Op::RecvGrad: return recv_grad(buffer());
    case Op::BackwardPass: return backward(buffer());
    case Op::SendGrad: return send_grad(buffer());
    case Op::ReduceTiedGrads: return stage_.reduce_tied_grads();
    case Op::ReduceGrads: return stage_.reduce_grads();
    case Op::OptimizerStep: return stage_.optimizer_step();
  }
  throw Error("pipeline stage " + std::to_string(stage_id_) + " cannot execute " + to_string(instruction));
}

void PipelineExecutor::load(Buffer& buffer, int micro_batch) {
  if (is_first_stage()) buffer.input = stage_.load_inputs(micro_batch);
  if (is_last_stage()) buffer.labels = stage_.load_labels(micro_batch);
}

void PipelineExecutor::forward(Buffer& buffer) {
  buffer.output = stage_.forward(buffer.input);
  if (!is_last_stage()) return;
  buffer.loss = stage_.loss(buffer.output, buffer.labels);
  loss_sum_ += buffer.loss.item<double>();
  ++losses_;
}

void PipelineExecutor::backward(Buffer& buffer) {
  if (is_last_stage()) {
    stage_.backward(buffer.loss);
  } else {
    stage_.backward(buffer.output, buffer.output_grad);
  }
  buffer.output = buffer.loss = at::Tensor();
  // Other stages keep the input until SendGrad has sent its gradient.
  if (is_first_stage()) buffer.input = at::Tensor();
}

void PipelineExecutor::recv_activation(Buffer& buffer) {
  const int previous = stage_id_ - 1;
  if (!received_meta_) {
    at::Tensor header = at::empty({TensorMeta::kHeaderLength}, at::kLong);
    group_.recv(header, previous, kMetaTag);
    received_meta_ = TensorMeta::decode(header);
  }
  if (!buffer.received.defined()) buffer.received = received_meta_->empty(device_);
  group_.recv(buffer.received, previous, kActivationTag);
  // A leaf over the receive buffer itself, no copy: the forward's graph may keep it, which is safe
  // because a schedule receives into a buffer again only after that buffer's backward ran (the
  // protocol simulator of tests/pipe checks this for every shape).
  buffer.input = buffer.received.detach();
  if (training_ && buffer.input.is_floating_point()) buffer.input.requires_grad_(true);
}

void PipelineExecutor::send_activation(Buffer& buffer) {
  const int next = stage_id_ + 1;
  if (!sent_meta_) {
    sent_meta_ = TensorMeta::of(buffer.output);
    group_.send(sent_meta_->encode(), next, kMetaTag);
  } else {
    sent_meta_->check(buffer.output, "the activation stage " + std::to_string(stage_id_) + " sends");
  }
  group_.send(buffer.output.detach(), next, kActivationTag);
  if (!training_) buffer.output = at::Tensor();
}

void PipelineExecutor::recv_grad(Buffer& buffer) {
  if (!buffer.output_grad.defined()) buffer.output_grad = sent_meta_.value().empty(device_);
  group_.recv(buffer.output_grad, stage_id_ + 1, kGradTag);
}

void PipelineExecutor::send_grad(Buffer& buffer) {
  const at::Tensor grad = buffer.input.grad();
  if (!grad.defined()) {
    throw Error("pipeline stage " + std::to_string(stage_id_) +
                ": its input got no gradient in backward; a stage's output must depend on its input");
  }
  received_meta_.value().check(grad, "the gradient stage " + std::to_string(stage_id_) + " sends back");
  group_.send(grad, stage_id_ - 1, kGradTag);
  buffer.input = at::Tensor();
}

}  // namespace ds::pipe
