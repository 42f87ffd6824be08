#include "dstrain/engine/pipeline_module.hpp"

#include <torch/torch.h>

#include <algorithm>

#include "dstrain/engine/models/activation_checkpointing.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds {
namespace {

const std::string& type_of(const PipelineLayer& layer) {
  return std::visit([](const auto& spec) -> const std::string& { return spec.type; }, layer);
}

const LayerFactory& factory_of(const PipelineLayer& layer) {
  return std::visit([](const auto& spec) -> const LayerFactory& { return spec.build; }, layer);
}

at::Tensor named_parameter(const torch::nn::AnyModule& module, const std::string& name, const std::string& key) {
  const at::Tensor* found = module.ptr()->named_parameters().find(name);
  if (!found)
    throw Error("tied layer '" + key + "' has no parameter '" + name + "' (its tied_weight_attr)").with_key(name);
  return *found;
}

// A stage built from layer specs: layer i registered as "<i>", the tied modules under "tied_modules".
class LayerStageImpl : public torch::nn::Module {
 public:
  struct Layer {
    torch::nn::AnyModule module;
    const TiedLayerSpec* tied = nullptr;
    at::Tensor tied_weight;
  };

  explicit LayerStageImpl(int checkpoint_interval)
      : tied_modules_(register_module("tied_modules", std::make_shared<torch::nn::Module>())),
        checkpoint_interval_(checkpoint_interval) {}

  void add_layer(int index, const LayerSpec& spec) {
    Layer layer{spec.build(), nullptr, at::Tensor()};
    register_module(std::to_string(index), layer.module.ptr());
    layers_.push_back(std::move(layer));
  }

  // The key's module, built by `build` on its first use on this stage.
  void add_tied_layer(const TiedLayerSpec& spec, const LayerFactory& build) {
    auto [it, inserted] = tied_.try_emplace(spec.key);
    if (inserted) {
      it->second = build();
      tied_modules_->register_module(spec.key, it->second.ptr());
    }
    layers_.push_back(Layer{it->second, &spec, named_parameter(it->second, spec.tied_weight_attr, spec.key)});
  }

  std::map<std::string, at::Tensor> tied_weights() const {
    std::map<std::string, at::Tensor> weights;
    for (const Layer& layer : layers_)
      if (layer.tied) weights[layer.tied->key] = layer.tied_weight;
    return weights;
  }

  at::Tensor forward(at::Tensor x) {
    const bool recompute = checkpoint_interval_ > 0 && is_training() && torch::GradMode::is_enabled();
    const size_t chunk = recompute ? static_cast<size_t>(checkpoint_interval_) : layers_.size();
    for (size_t start = 0; start < layers_.size(); start += chunk) {
      const size_t end = std::min(layers_.size(), start + chunk);
      auto run = [this, start, end](const at::Tensor& input) {
        at::Tensor h = input;
        for (size_t i = start; i < end; ++i) h = run_layer(layers_[i], h);
        return h;
      };
      // ds::checkpoint reaches the parameters' gradients only through its input's: a run whose
      // input needs no gradient (the first stage's first) keeps its activations instead. So does
      // a run with a tied layer: its recomputation's backward would deliver the tied parameter's
      // gradient to the reducer a second time when another layer of the stage uses it too.
      const bool has_tied = std::any_of(layers_.begin() + start, layers_.begin() + end,
                                        [](const Layer& layer) { return layer.tied != nullptr; });
      x = recompute && x.requires_grad() && !has_tied ? checkpoint(run, x) : run(x);
    }
    return x;
  }

 private:
  static at::Tensor run_layer(Layer& layer, const at::Tensor& x) {
    if (layer.tied && layer.tied->forward_fn) return layer.tied->forward_fn(layer.module, x, layer.tied_weight);
    return layer.module.forward<at::Tensor>(x);
  }

  std::shared_ptr<torch::nn::Module> tied_modules_;
  int checkpoint_interval_;
  std::vector<Layer> layers_;
  std::map<std::string, torch::nn::AnyModule> tied_;
};

}  // namespace

PipelineModule::PipelineModule(std::vector<PipelineLayer> layers, PipelineLossFn loss, std::string partition_method,
                               int activation_checkpoint_interval)
    : layers_(std::move(layers)),
      loss_(std::move(loss)),
      partition_method_(std::move(partition_method)),
      activation_checkpoint_interval_(activation_checkpoint_interval) {
  if (layers_.empty()) throw Error("a PipelineModule needs at least one layer");
  for (size_t i = 0; i < layers_.size(); ++i) {
    if (!factory_of(layers_[i])) throw Error("PipelineModule layer " + std::to_string(i) + " has no factory");
    types_.push_back(type_of(layers_[i]));
    const auto* tied = std::get_if<TiedLayerSpec>(&layers_[i]);
    if (tied && (tied->key.empty() || tied->key.find('.') != std::string::npos))
      throw Error("tied layer key '" + tied->key + "' must be a non-empty name without dots").with_key(tied->key);
    tied_keys_.push_back(tied ? tied->key : "");
  }
}

PipelineModule::PipelineModule(SlicedModel model, PipelineLossFn loss, std::string partition_method)
    : build_slice_(std::move(model.build)),
      sliced_parameters_(std::move(model.layer_parameters)),
      types_(std::move(model.layer_types)),
      tied_keys_(std::move(model.layer_tied_keys)),
      loss_(std::move(loss)),
      partition_method_(std::move(partition_method)),
      activation_checkpoint_interval_(0) {
  if (types_.empty() || sliced_parameters_.size() != types_.size() || tied_keys_.size() != types_.size())
    throw Error("a SlicedModel needs one parameter count, type and tied key per layer");
}

std::vector<int64_t> PipelineModule::layer_parameters() const {
  if (layers_.empty()) return sliced_parameters_;
  std::vector<int64_t> counts;
  torch::NoGradGuard no_grad;
  for (const PipelineLayer& layer : layers_) {
    int64_t count = 0;
    for (const at::Tensor& param : factory_of(layer)().ptr()->parameters()) count += param.numel();
    counts.push_back(count);
  }
  return counts;
}

pipe::StageBounds PipelineModule::partition(int stages) const {
  const bool by_parameters = partition_method_ == "parameters" || partition_method_ == "best";
  const std::vector<int64_t> counts = by_parameters ? layer_parameters() : std::vector<int64_t>(types_.size(), 0);
  return pipe::partition_layers(partition_method_, counts, types_, stages);
}

std::map<std::string, std::vector<int>> PipelineModule::tied_layers() const {
  std::map<std::string, std::vector<int>> layers;
  for (int i = 0; i < num_layers(); ++i)
    if (!tied_keys_[i].empty()) layers[tied_keys_[i]].push_back(i);
  return layers;
}

PipelineStage PipelineModule::build(int first, int last, uint64_t seed) const {
  if (first < 0 || first >= last || last > num_layers())
    throw Error("PipelineModule slice [" + std::to_string(first) + ", " + std::to_string(last) + ") of " +
                std::to_string(num_layers()) + " layers");
  if (!layers_.empty()) return build_layers(first, last, seed);
  torch::manual_seed(seed);
  return build_slice_(first, last);
}

PipelineStage PipelineModule::build_layers(int first, int last, uint64_t seed) const {
  const auto tied = tied_layers();
  auto stage = std::make_shared<LayerStageImpl>(activation_checkpoint_interval_);
  for (int i = first; i < last; ++i) {
    if (const auto* spec = std::get_if<LayerSpec>(&layers_[i])) {
      torch::manual_seed(seed + i);
      stage->add_layer(i, *spec);
    } else {
      const auto& tied_spec = std::get<TiedLayerSpec>(layers_[i]);
      const int key_first_layer = tied.at(tied_spec.key).front();
      stage->add_tied_layer(tied_spec, [&] {
        torch::manual_seed(seed + key_first_layer);
        return std::get<TiedLayerSpec>(layers_[key_first_layer]).build();
      });
    }
  }
  return PipelineStage(stage, [stage](const at::Tensor& x) { return stage->forward(x); }, stage->tied_weights());
}

}  // namespace ds
