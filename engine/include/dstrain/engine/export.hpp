// Reading a consolidated checkpoint outside an engine: its config, and its fp32 weights into a
// module with the same parameter names (e.g. to write a plain LibTorch file with torch::save).
#pragma once

#include <torch/nn/module.h>

#include <string>

#include <nlohmann/json.hpp>

namespace ds {

// The checkpoint file of <dir>/<tag>.pt; an empty tag reads <dir>/latest.
std::string checkpoint_path(const std::string& dir, const std::string& tag);
// The effective config the checkpoint was trained with.
nlohmann::json checkpoint_config(const std::string& path);
// Copies every parameter of `module` from the checkpoint's fp32 weights (converted to the
// parameter's dtype). A missing name or a shape mismatch is a ds::Error naming it.
void load_checkpoint_weights(const std::string& path, torch::nn::Module& module);

}  // namespace ds
