// Reading a sharded checkpoint outside an engine, in one process: its config, its fp32 weights
// into a module with the same parameter names (e.g. to write a plain LibTorch file with torch::save),
// or straight to Hugging Face's files. The folder comes from ds::ckpt::checkpoint_folder(dir, tag).
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ds {

// The effective config the checkpoint in `folder` was trained with.
nlohmann::json checkpoint_config(const std::string& folder);
// Verifies every shard's checksum, then copies every parameter of `module` from the checkpoint's
// fp32 weights (converted to the parameter's dtype), one parameter at a time, read straight from
// the shards. A missing name or a shape mismatch is a ds::Error naming it and the file.
void load_checkpoint_weights(const std::string& folder, torch::nn::Module& module);

// The checkpoint folders of one checkpoint in `dir`: <dir>/<tag>, or for a pipeline's save folder
// (stage0/, stage1/, ...) each stage's <tag>, in stage order. An empty tag: the latest (for a
// pipeline the newest complete in every stage, ckpt::newest_common_tag).
std::vector<std::string> checkpoint_folders(const std::string& dir, const std::string& tag);

struct HfExport {
  int64_t tensors = 0;
  int64_t bytes = 0;  // of model.safetensors
};
// Writes the model weights of the checkpoint in `folders` (checkpoint_folders) as transformers'
// GPT2LMHeadModel or LlamaForCausalLM: <out_dir>/model.safetensors (fp32, names and layouts of
// ckpt/hf_format.hpp) and <out_dir>/config.json. Streams: verifies one stage's shards through a 4 MiB buffer, then reads
// one parameter at a time from the shards that hold it and appends it, so memory holds one
// parameter (the largest, at the end) and no shard whole. A checkpoint lacking some of the model's
// parameters (one stage of a pipeline) is a ds::Error naming the count and the folder.
HfExport export_hf(const std::vector<std::string>& folders, const std::string& out_dir);

}  // namespace ds
