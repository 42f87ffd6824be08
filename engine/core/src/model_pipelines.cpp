#include "dstrain/engine/model_pipelines.hpp"

#include <torch/torch.h>

#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/llama.hpp"
#include "dstrain/engine/models/loss.hpp"

namespace ds {
namespace {

at::Tensor language_model_loss(const at::Tensor& logits, const at::Tensor& targets) {
  return models::cross_entropy_loss(logits.to(at::kFloat), targets);
}

// The embedding and the head under `key` when the model ties them.
std::vector<std::string> tied_keys(int64_t num_layers, bool tied, const std::string& key) {
  std::vector<std::string> keys(num_layers);
  if (tied) keys.front() = keys.back() = key;
  return keys;
}

template <class Slice>
PipelineStage stage_of(Slice slice, const std::string& key) {
  std::map<std::string, at::Tensor> tied;
  if (const at::Tensor weight = slice->tied_weight(); weight.defined()) tied[key] = weight;
  return PipelineStage(slice.ptr(), [impl = slice.ptr()](const at::Tensor& x) { return impl->forward(x); },
                       std::move(tied));
}

}  // namespace

PipelineModule gpt_pipeline_module(const models::GPTConfig& config, const std::string& partition_method) {
  SlicedModel model{models::layer_parameter_counts(config), models::layer_types(config),
                    tied_keys(config.num_layers(), true, "wte"), [config](int first, int last) {
                      return stage_of(models::GPT(config, first, last), "wte");
                    }};
  return PipelineModule(std::move(model), language_model_loss, partition_method);
}

PipelineModule llama_pipeline_module(const models::LlamaConfig& config, const std::string& partition_method) {
  SlicedModel model{models::layer_parameter_counts(config), models::layer_types(config),
                    tied_keys(config.num_layers(), config.tie_word_embeddings, "embed_tokens"),
                    [config](int first, int last) {
                      return stage_of(models::Llama(config, first, last), "embed_tokens");
                    }};
  return PipelineModule(std::move(model), language_model_loss, partition_method);
}

}  // namespace ds
