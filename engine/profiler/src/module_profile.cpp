#include "dstrain/engine/profiler/module_profile.hpp"

#include <torch/torch.h>

#include <optional>

#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/gpt_blocks.hpp"
#include "dstrain/engine/models/llama.hpp"
#include "dstrain/engine/models/llama_blocks.hpp"
#include "dstrain/engine/models/rms_norm.hpp"

namespace ds::profiler {
namespace {

// "ds::models::CausalSelfAttentionImpl" -> "CausalSelfAttention".
std::string type_of(const torch::nn::Module& module) {
  std::string name = module.name();
  if (const auto colon = name.rfind("::"); colon != std::string::npos) name = name.substr(colon + 2);
  if (name.size() > 4 && name.compare(name.size() - 4, 4, "Impl") == 0) name.resize(name.size() - 4);
  return name;
}

// The FLOPs the module's own forward spends outside its children (module_profile.hpp's table);
// nullopt for a type the table does not know.
std::optional<double> own_flops(const torch::nn::Module& module, int64_t batch, int64_t seq_len) {
  const double tokens = static_cast<double>(batch) * seq_len;
  if (const auto* linear = dynamic_cast<const torch::nn::LinearImpl*>(&module))
    return 2 * tokens * linear->weight.size(0) * linear->weight.size(1);
  if (const auto* norm = dynamic_cast<const models::LayerNormImpl*>(&module))
    return tokens * norm->weight.size(0) * (norm->bias.defined() ? 5 : 4);
  if (const auto* norm = dynamic_cast<const torch::nn::LayerNormImpl*>(&module))
    return norm->weight.defined() ? tokens * norm->weight.numel() * (norm->bias.defined() ? 5 : 4) : 0.0;
  if (const auto* norm = dynamic_cast<const models::RMSNormImpl*>(&module)) return tokens * norm->weight.size(0) * 4;
  if (dynamic_cast<const torch::nn::EmbeddingImpl*>(&module)) return 0.0;
  if (const auto* attention = dynamic_cast<const models::CausalSelfAttentionImpl*>(&module))
    return 4 * tokens * seq_len * attention->c_proj->weight.size(0);
  if (const auto* attention = dynamic_cast<const models::LlamaAttentionImpl*>(&module)) {
    const double query_width = attention->q_proj->weight.size(0), kv_width = attention->k_proj->weight.size(0);
    return 4 * tokens * seq_len * query_width + 3 * tokens * (query_width + kv_width);
  }
  if (const auto* feed_forward = dynamic_cast<const models::FeedForwardImpl*>(&module))
    return tokens * feed_forward->c_fc->weight.size(0);
  if (const auto* mlp = dynamic_cast<const models::LlamaMLPImpl*>(&module))
    return 2 * tokens * mlp->gate_proj->weight.size(0);
  if (const auto* gpt = dynamic_cast<const models::GPTImpl*>(&module))
    return gpt->ln_f ? 2 * tokens * gpt->wte->weight.size(0) * gpt->wte->weight.size(1) : 0.0;
  if (const auto* llama = dynamic_cast<const models::LlamaImpl*>(&module)) {
    const bool tied_head = llama->norm && !llama->lm_head;
    return tied_head ? 2 * tokens * llama->config().vocab_size * llama->config().hidden_size : 0.0;
  }
  // Containers and blocks whose work is all in their children (and residual adds).
  if (module.named_parameters(/*recurse=*/false).is_empty()) return 0.0;
  return std::nullopt;
}

ModuleProfile profile_tree(const std::string& name, const torch::nn::Module& module, int64_t batch, int64_t seq_len) {
  ModuleProfile profile;
  profile.name = name;
  profile.type = type_of(module);
  for (const at::Tensor& param : module.parameters()) profile.params += param.numel();
  const std::optional<double> own = own_flops(module, batch, seq_len);
  profile.flops = own.value_or(0.0);
  profile.flops_counted = own.has_value();
  for (const auto& child : module.named_children()) {
    profile.children.push_back(profile_tree(child.key(), *child.value(), batch, seq_len));
    profile.flops += profile.children.back().flops;
  }
  return profile;
}

void collect_uncounted(const ModuleProfile& module, const std::string& path, std::vector<std::string>& names) {
  if (!module.flops_counted) names.push_back((path.empty() ? std::string("(root)") : path) + " (" + module.type + ")");
  for (const ModuleProfile& child : module.children)
    collect_uncounted(child, path.empty() ? child.name : path + "." + child.name, names);
}

}  // namespace

ModuleProfile profile_module(const torch::nn::Module& model, int64_t batch, int64_t seq_len) {
  return profile_tree("", model, batch, seq_len);
}

std::vector<std::string> uncounted_modules(const ModuleProfile& model) {
  std::vector<std::string> names;
  collect_uncounted(model, "", names);
  return names;
}

}  // namespace ds::profiler
