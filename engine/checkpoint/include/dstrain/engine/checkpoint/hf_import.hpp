// Hugging Face GPT-2 weights (a folder as transformers saves it: config.json and model.safetensors,
// or model.safetensors.index.json and its shards) into a module with the GPT's parameter names,
// e.g. to start training from them (dstrain.model.init_from).
#pragma once

#include <torch/nn/module.h>

#include <string>

#include <nlohmann/json.hpp>

namespace ds {

// The dstrain.model sizes that <dir>/config.json gives (ckpt::model_sizes_from_hf); a ds::Error
// naming the file when it is missing, unreadable or not a GPT-2 config.
nlohmann::json hf_model_sizes(const std::string& dir);

// Copies every parameter of `module` from the weights in `dir`, one tensor at a time, converted
// from the file's dtype (F32, F16, BF16, F64) to the parameter's, Conv1D weights transposed. A
// parameter the files lack, a tensor the module has no place for, or a shape that differs is a
// ds::Error naming both names and the file.
void load_hf_weights(const std::string& dir, torch::nn::Module& module);

}  // namespace ds
