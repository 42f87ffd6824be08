// Hugging Face weights of GPT-2 or a Llama (a folder as transformers saves it: config.json and
// model.safetensors, or model.safetensors.index.json and its shards) into a module with the
// parameter names of dstrain's GPT or Llama, e.g. to start training from them
// (dstrain.model.init_from).
#pragma once

#include <torch/nn/module.h>

#include <string>

#include <nlohmann/json.hpp>

namespace ds {

// The dstrain.model block that <dir>/config.json gives (ckpt::model_block_from_hf); a ds::Error
// naming the file when it is missing, unreadable or of a model dstrain does not have.
nlohmann::json hf_model_block(const std::string& dir);

// Copies every parameter of `module`, a model of `type` ("gpt", "llama"), from the weights in `dir`,
// one tensor at a time, converted from the file's dtype (F32, F16, BF16, F64) to the parameter's,
// GPT-2's Conv1D weights transposed. A parameter the files lack, a tensor the module has no place
// for (but a tied Llama's lm_head.weight), or a shape that differs is a ds::Error naming both names
// and the file.
void load_hf_weights(const std::string& dir, torch::nn::Module& module, const std::string& type = "gpt");

}  // namespace ds
