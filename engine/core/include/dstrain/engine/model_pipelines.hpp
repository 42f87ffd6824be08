// The built-in models as PipelineModules: each model's own layers (embedding, blocks, head; see
// gpt.hpp and llama.hpp), built by the model's slice constructor so that a stage keeps the model's
// parameter names (its checkpoints and exports read as the whole model's), with the tied embedding
// under one key and the language-model loss (cross-entropy over the logits, in fp32).
#pragma once

#include <string>

#include "dstrain/engine/models/gpt_config.hpp"
#include "dstrain/engine/models/llama_config.hpp"
#include "dstrain/engine/pipeline_module.hpp"

namespace ds {

// Layers 0 and n_layer + 1 share wte (key "wte").
PipelineModule gpt_pipeline_module(const models::GPTConfig& config, const std::string& partition_method);
// With tie_word_embeddings, layers 0 and num_hidden_layers + 1 share model.embed_tokens.weight
// (key "embed_tokens").
PipelineModule llama_pipeline_module(const models::LlamaConfig& config, const std::string& partition_method);

}  // namespace ds
