// ModuleProfile: a model's module tree with each module's parameters and the FLOPs one forward
// costs in it, counted from the shapes (a multiply-add is 2 FLOPs, MACs are half of them), as
// DeepSpeed's flops profiler counts the functions a module calls:
//   Linear(in, out)          2·in·out per token (the bias add not counted, as DeepSpeed)
//   LayerNorm(C)             5·C per token (4·C without a bias)
//   CausalSelfAttention      its two products, q·kᵀ and att·v, at full T×T: 4·T·C per token, the
//                            masked half included (DeepSpeed and PaLM's MFU count them whole),
//                            plus its Linears
//   FeedForward              the GELU, 1 per element of the 4·C hidden (DeepSpeed's gelu count),
//                            plus its Linears
//   GPT                      the tied head, 2·C·V per token, plus the whole tree
//   Embedding, Block, lists  0 of their own (lookups and residual adds)
// A backward costs twice its forward, so a training step is 3x the forward (DeepSpeed's fwd+bwd).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dstrain/engine/models/gpt.hpp"

namespace ds::profiler {

struct ModuleProfile {
  std::string name;   // its attribute name in the parent ("h.0" is "0" under "h"); "" for the root
  std::string type;   // the class, e.g. "CausalSelfAttention"
  int64_t params = 0;  // of its whole subtree, each tensor once
  double flops = 0;    // forward FLOPs of its whole subtree
  std::vector<ModuleProfile> children;

  double macs() const { return flops / 2; }
};

// The GPT's tree for one forward of `batch` sequences of `seq_len` tokens.
ModuleProfile profile_gpt(const models::GPTImpl& model, int64_t batch, int64_t seq_len);

}  // namespace ds::profiler
