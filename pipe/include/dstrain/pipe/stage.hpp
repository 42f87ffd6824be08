// What the pipeline executor needs from the stage it runs: the stage's data, its slice of the
// model, and the model-wide work at the end of a batch. The executor owns the schedule, the
// buffers and the traffic between stages; a Stage owns the model and its optimizer. dstrain's
// engine implements it for the built-in GPT (ds::PipelineEngine); tests implement it with toys.
#pragma once

#include <ATen/core/Tensor.h>

namespace ds::pipe {

class Stage {
 public:
  virtual ~Stage() = default;

  // LoadMicroBatch of micro-batch `micro_batch` of the current batch: the first stage loads its
  // inputs, the last its labels (a stage that is both loads both), on the stage's device.
  virtual at::Tensor load_inputs(int micro_batch) = 0;
  virtual at::Tensor load_labels(int micro_batch) = 0;

  // ForwardPass: this stage's layers. `input` is the loaded inputs on the first stage, else the
  // previous stage's activation as a leaf that collects its gradient when training.
  virtual at::Tensor forward(const at::Tensor& input) = 0;
  // The last stage's loss of one micro-batch: a scalar of the output against the labels.
  virtual at::Tensor loss(const at::Tensor& output, const at::Tensor& labels) = 0;

  // BackwardPass on the last stage, from a micro-batch's loss: the stage scales it (by 1 / the
  // number of micro-batches, and its loss scale) as EngineCore::backward(loss) does.
  virtual void backward(const at::Tensor& loss) = 0;
  // BackwardPass on the other stages, from the gradient of the output that the next stage sent.
  virtual void backward(const at::Tensor& output, const at::Tensor& output_grad) = 0;

  // The last step of a training batch, in this order.
  virtual void reduce_tied_grads() = 0;  // sum tied weights' gradients over the stages holding them
  virtual void reduce_grads() = 0;       // average gradients over the pipeline's replicas
  virtual void optimizer_step() = 0;
};

}  // namespace ds::pipe
