// Reading a sharded checkpoint outside an engine, in one process: its config, and its fp32 weights
// into a module with the same parameter names (e.g. to write a plain LibTorch file with torch::save).
// The folder comes from ds::ckpt::checkpoint_folder(dir, tag).
#pragma once

#include <torch/nn/module.h>

#include <string>

#include <nlohmann/json.hpp>

namespace ds {

// The effective config the checkpoint in `folder` was trained with.
nlohmann::json checkpoint_config(const std::string& folder);
// Verifies every shard's checksum, then copies every parameter of `module` from the checkpoint's
// fp32 weights (converted to the parameter's dtype), one parameter at a time, read straight from
// the shards. A missing name or a shape mismatch is a ds::Error naming it and the file.
void load_checkpoint_weights(const std::string& folder, torch::nn::Module& module);

}  // namespace ds
