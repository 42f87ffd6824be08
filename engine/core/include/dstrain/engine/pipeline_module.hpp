// ds::PipelineModule: a model described for pipeline parallelism, DeepSpeed's PipelineModule.
//
//   ds::PipelineModule model({ds::TiedLayerSpec{"embed", "Linear", make_embed},            // layer 0
//                             ds::LayerSpec{"Linear", make_hidden},                        // layer 1
//                             ds::TiedLayerSpec{"embed", "Linear", make_embed, "weight",   // layer 2
//                                               [](torch::nn::AnyModule&, const at::Tensor& x,
//                                                  const at::Tensor& weight) { return x.matmul(weight); }}},
//                            [](const at::Tensor& out, const at::Tensor& y) { return (out - y).pow(2).mean(); },
//                            "parameters");
//   ds::PipelineEngine engine(model, config, world);
//
// The model is an ordered list of layers, cut into contiguous stages by partition_method
// ("parameters" | "uniform" | "type:<regex>", pipe::partition_layers). A stage builds only its own
// layers: before layer i's factory runs, torch's generator is seeded with seed + i (DeepSpeed's
// seed_layers), so a stage holds exactly what building every layer in order would. Layers are named
// by their index ("3.weight"), as in DeepSpeed.
// A TiedLayerSpec's module is built once per stage that holds any of its key's layers, seeded with
// the key's first layer, and shared by those layers ("tied_modules.<key>.weight"); every layer of
// the key runs forward_fn (the module's own forward when unset). The stages holding a key sum the
// gradient of its tied_weight_attr parameter over a group of exactly those stages, per replica
// (ReduceTiedGrads), so their copies stay equal.
// With activation_checkpoint_interval = k > 0, training recomputes each run of k layers of a stage
// in backward (ds::checkpoint), except a run whose input needs no gradient (the first stage's
// first, from the loaded inputs: its parameters' gradients need its activations) and a run with a
// tied layer (the tied parameter may be used outside the run too, and the reducer takes each
// gradient once per backward): those keep their activations.
//
// A model that already builds its own contiguous slices with the same seeding (the built-in GPT
// and Llama: gpt_pipeline_module, llama_pipeline_module) joins as a SlicedModel instead, so its
// stages keep the model's own parameter names, checkpoints and exports.
#pragma once

#include <ATen/core/Tensor.h>
#include <torch/nn/module.h>
#include <torch/nn/modules/container/any.h>

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <variant>
#include <vector>

#include "dstrain/pipe/partition.hpp"

namespace ds {

using LayerFactory = std::function<torch::nn::AnyModule()>;

struct LayerSpec {
  std::string type;  // what partition_method "type:<regex>" matches
  LayerFactory build;
};

struct TiedLayerSpec {
  std::string key;
  std::string type;
  LayerFactory build;
  std::string tied_weight_attr = "weight";  // the tied parameter's name in the module
  // This layer's forward, given the shared module, the input and the tied parameter; unset: the
  // module's own forward.
  std::function<at::Tensor(torch::nn::AnyModule& module, const at::Tensor& input, const at::Tensor& tied_weight)>
      forward_fn;
};

using PipelineLayer = std::variant<LayerSpec, TiedLayerSpec>;
// The last stage's loss of one micro-batch: a scalar of the output against the labels.
using PipelineLossFn = std::function<at::Tensor(const at::Tensor& output, const at::Tensor& labels)>;

// One stage's part of a PipelineModule, as its engine trains it: a module holder (ptr(),
// ->forward) over the stage's parameters, and which of them are tied, by key.
class PipelineStage {
 public:
  PipelineStage(std::shared_ptr<torch::nn::Module> module, std::function<at::Tensor(const at::Tensor&)> forward,
                std::map<std::string, at::Tensor> tied)
      : module_(std::move(module)), forward_(std::move(forward)), tied_(std::move(tied)) {}

  at::Tensor forward(const at::Tensor& input) const { return forward_(input); }
  const PipelineStage* operator->() const { return this; }
  torch::nn::Module& operator*() const { return *module_; }
  std::shared_ptr<torch::nn::Module> ptr() const { return module_; }
  // key -> the tied parameter this stage holds
  const std::map<std::string, at::Tensor>& tied() const { return tied_; }

 private:
  std::shared_ptr<torch::nn::Module> module_;
  std::function<at::Tensor(const at::Tensor&)> forward_;
  std::map<std::string, at::Tensor> tied_;
};

// A model that builds its slice [first, last) itself, seeded by torch's default generator as the
// whole model would be; the slice returns its tied parameters by key.
struct SlicedModel {
  std::vector<int64_t> layer_parameters;
  std::vector<std::string> layer_types;
  std::vector<std::string> layer_tied_keys;  // per layer, "" when untied
  std::function<PipelineStage(int first, int last)> build;
};

class PipelineModule {
 public:
  // Throws ds::Error for no layers, a layer without a factory, or a key with a dot.
  PipelineModule(std::vector<PipelineLayer> layers, PipelineLossFn loss, std::string partition_method = "parameters",
                 int activation_checkpoint_interval = 0);
  PipelineModule(SlicedModel model, PipelineLossFn loss, std::string partition_method = "parameters");

  int num_layers() const { return static_cast<int>(types_.size()); }
  // Stage s holds layers [bounds[s], bounds[s + 1]). "parameters" builds every layer once, on
  // every rank, to count its parameters (as DeepSpeed does).
  pipe::StageBounds partition(int stages) const;
  // key -> the layers sharing it
  std::map<std::string, std::vector<int>> tied_layers() const;
  // The layers [first, last), from `seed` (see above).
  PipelineStage build(int first, int last, uint64_t seed) const;
  at::Tensor loss(const at::Tensor& output, const at::Tensor& labels) const { return loss_(output, labels); }

 private:
  std::vector<int64_t> layer_parameters() const;
  PipelineStage build_layers(int first, int last, uint64_t seed) const;

  std::vector<PipelineLayer> layers_;  // empty for a SlicedModel
  std::function<PipelineStage(int, int)> build_slice_;
  std::vector<int64_t> sliced_parameters_;
  std::vector<std::string> types_;
  std::vector<std::string> tied_keys_;
  PipelineLossFn loss_;
  std::string partition_method_;
  int activation_checkpoint_interval_;
};

}  // namespace ds
