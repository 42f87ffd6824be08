// ModuleProfile: a model's module tree with each module's parameters and the FLOPs one forward
// costs in it, counted from the shapes (a multiply-add is 2 FLOPs, MACs are half of them), as
// DeepSpeed's flops profiler counts the functions a module calls. Per token:
//   Linear(in, out)          2·in·out (the bias add not counted, as DeepSpeed)
//   LayerNorm(C)             5·C (4·C without a bias)
//   RMSNorm(C)               4·C: the squares, their sum, the scaling by 1/rms, the weight
//   CausalSelfAttention,     their two products, q·kᵀ and att·v, at full T×T: 4·T·C, C the query
//   LlamaAttention           heads' width, the masked half included (DeepSpeed and PaLM's MFU count
//                            them whole; grouped-query attention changes only the k/v Linears);
//                            the Llama's RoPE, 3 per rotated element of q and k (two products and
//                            a sum): 3·(C + kv_width); plus their Linears
//   FeedForward              the GELU, 1 per element of the 4·C hidden (DeepSpeed's gelu count)
//   LlamaMLP                 SwiGLU: the SiLU and the product, 2 per element of intermediate_size
//   GPT, Llama               a tied head, 2·C·V (an untied lm_head is a Linear)
//   Embedding, containers    0 (lookups; the blocks' residual adds are not counted)
// plus, for each module, the whole subtree below it. A backward costs twice its forward, so a
// training step is 3x the forward (DeepSpeed's fwd+bwd).
//
// Any other module (a PipelineModule's user layers) is walked the same way: its Linears, LayerNorms
// and Embeddings counted by shape, with every row of the forward's batch x seq_len through each
// Linear; a module of another type that holds parameters of its own has its params counted and its
// FLOPs not (flops_counted false: the report names it), and no module's own work outside these
// types (activations, products it computes itself) is counted.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace torch::nn {
class Module;
}

namespace ds::profiler {

struct ModuleProfile {
  std::string name;   // its attribute name in the parent ("h.0" is "0" under "h"); "" for the root
  std::string type;   // the class, e.g. "CausalSelfAttention"
  int64_t params = 0;  // of its whole subtree, each tensor once
  double flops = 0;    // forward FLOPs of its whole subtree
  bool flops_counted = true;  // false: parameters of its own in a type whose FLOPs are unknown
  std::vector<ModuleProfile> children;

  double macs() const { return flops / 2; }
};

// The tree for one forward of `batch` sequences of `seq_len` tokens, by the table above: the GPT
// and the Llama whole or a pipeline slice of either (GPTImpl(config, first, last)), or any module.
ModuleProfile profile_module(const torch::nn::Module& model, int64_t batch, int64_t seq_len);

// "name (Type)" of every module in the tree whose FLOPs are not counted, by its dotted path.
std::vector<std::string> uncounted_modules(const ModuleProfile& model);

}  // namespace ds::profiler
