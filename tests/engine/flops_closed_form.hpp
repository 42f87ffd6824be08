// Closed-form parameter and FLOP counts of the built-in GPT and Llama (module_profile.hpp's table,
// written out by hand from the models' shapes), shared by the flops profiler's tests.
#pragma once

#include <cstdint>

#include "dstrain/engine/models/gpt_config.hpp"
#include "dstrain/engine/models/llama_config.hpp"

namespace ds::test {

inline models::GPTConfig shape(int64_t layers, int64_t heads, int64_t width, int64_t block, int64_t vocab,
                               bool bias) {
  models::GPTConfig config;
  config.n_layer = layers;
  config.n_head = heads;
  config.n_embd = width;
  config.block_size = block;
  config.vocab_size = vocab;
  config.bias = bias;
  return config;
}

// GPT-2's count: per block ln_1, ln_2 (C weights, C biases each), c_attn 3C² + 3C, c_proj C² + C,
// c_fc 4C² + 4C, c_proj 4C² + C; the embeddings; ln_f. Without biases only the weights.
inline double closed_form_params(const models::GPTConfig& c) {
  const double C = c.n_embd;
  const double block = c.bias ? 12 * C * C + 13 * C : 12 * C * C + 2 * C;
  return c.vocab_size * C + c.block_size * C + c.n_layer * block + (c.bias ? 2 * C : C);
}

// One forward of B sequences of T tokens: per token and block 2·12C² in the Linears, 2·(4 or 5)C in
// the two LayerNorms, 4C in the GELU; per sequence and block 4·T²·C in attention's two products;
// per token the final LayerNorm and the tied head 2·C·V.
inline double closed_form_flops(const models::GPTConfig& c, int64_t B, int64_t T) {
  const double C = c.n_embd, tokens = double(B) * T, norm = c.bias ? 5 * C : 4 * C;
  const double per_block = tokens * (24 * C * C + 2 * norm + 4 * C) + B * 4.0 * T * T * C;
  return c.n_layer * per_block + tokens * (norm + 2 * C * c.vocab_size);
}

inline models::LlamaConfig llama_shape(int64_t layers, int64_t heads, int64_t kv_heads, int64_t hidden, int64_t inner,
                                       int64_t vocab, bool tied) {
  return models::LlamaConfig::from_json({{"vocab_size", vocab},
                                         {"hidden_size", hidden},
                                         {"intermediate_size", inner},
                                         {"num_hidden_layers", layers},
                                         {"num_attention_heads", heads},
                                         {"num_key_value_heads", kv_heads},
                                         {"max_position_embeddings", 16},
                                         {"tie_word_embeddings", tied}});
}

// HF's LlamaForCausalLM: per layer q_proj and o_proj C², k_proj and v_proj C·kv (kv = kv_heads ·
// head_dim), gate, up and down C·I, two RMSNorms of C; the embedding V·C, the final norm C, and
// lm_head V·C unless tied.
inline double llama_closed_form_params(const models::LlamaConfig& c) {
  const double C = c.hidden_size, kv = c.num_key_value_heads * (C / c.num_attention_heads), I = c.intermediate_size;
  const double layer = 2 * C * C + 2 * C * kv + 3 * C * I + 2 * C;
  return c.vocab_size * C * (c.tie_word_embeddings ? 1 : 2) + c.num_hidden_layers * layer + C;
}

// One forward of B sequences of T tokens: per token and layer 2·(2C² + 2C·kv + 3C·I) in the
// projections, 2·4C in the two RMSNorms, 2I in SwiGLU, 3·(C + kv) in RoPE on q and k; per sequence
// and layer 4·T²·C in attention's two products; per token the final RMSNorm and the head 2·C·V.
inline double llama_closed_form_flops(const models::LlamaConfig& c, int64_t B, int64_t T) {
  const double C = c.hidden_size, kv = c.num_key_value_heads * (C / c.num_attention_heads), I = c.intermediate_size;
  const double tokens = double(B) * T;
  const double per_layer =
      tokens * (2 * (2 * C * C + 2 * C * kv + 3 * C * I) + 8 * C + 2 * I + 3 * (C + kv)) + B * 4.0 * T * T * C;
  return c.num_hidden_layers * per_layer + tokens * (4 * C + 2 * C * c.vocab_size);
}

}  // namespace ds::test
