#include "dstrain/engine/profiler/module_profile.hpp"

#include <torch/torch.h>

#include "dstrain/engine/models/gpt_blocks.hpp"

namespace ds::profiler {
namespace {

// "ds::models::CausalSelfAttentionImpl" -> "CausalSelfAttention".
std::string type_of(const torch::nn::Module& module) {
  std::string name = module.name();
  if (const auto colon = name.rfind("::"); colon != std::string::npos) name = name.substr(colon + 2);
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Impl") == 0) name.resize(name.size() - 4);
  return name;
}

// The FLOPs the module's own forward spends outside its children (module_profile.hpp's table).
double own_flops(const torch::nn::Module& module, int64_t batch, int64_t seq_len) {
  const double tokens = static_cast<double>(batch) * seq_len;
  if (const auto* linear = dynamic_cast<const torch::nn::LinearImpl*>(&module))
    return 2 * tokens * linear->weight.size(0) * linear->weight.size(1);
  if (const auto* norm = dynamic_cast<const models::LayerNormImpl*>(&module))
    return tokens * norm->weight.size(0) * (norm->bias.defined() ? 5 : 4);
  if (const auto* attention = dynamic_cast<const models::CausalSelfAttentionImpl*>(&module))
    return 4 * tokens * seq_len * attention->c_proj->weight.size(0);
  if (const auto* feed_forward = dynamic_cast<const models::FeedForwardImpl*>(&module))
    return tokens * feed_forward->c_fc->weight.size(0);
  if (const auto* gpt = dynamic_cast<const models::GPTImpl*>(&module))
    return gpt->ln_f ? 2 * tokens * gpt->wte->weight.size(0) * gpt->wte->weight.size(1) : 0.0;
  return 0;
}

ModuleProfile profile_module(const std::string& name, const torch::nn::Module& module, int64_t batch,
                             int64_t seq_len) {
  ModuleProfile profile;
  profile.name = name;
  profile.type = type_of(module);
  for (const at::Tensor& param : module.parameters()) profile.params += param.numel();
  profile.flops = own_flops(module, batch, seq_len);
  for (const auto& child : module.named_children()) {
    profile.children.push_back(profile_module(child.key(), *child.value(), batch, seq_len));
    profile.flops += profile.children.back().flops;
  }
  return profile;
}

}  // namespace

ModuleProfile profile_gpt(const models::GPTImpl& model, int64_t batch, int64_t seq_len) {
  return profile_module("", model, batch, seq_len);
}

}  // namespace ds::profiler
