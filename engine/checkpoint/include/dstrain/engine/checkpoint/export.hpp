// Reading a sharded checkpoint outside an engine, in one process: its config, its fp32 weights
// into a module with the same parameter names (e.g. to write a plain LibTorch file with torch::save),
// or straight to Hugging Face's files. The folder comes from ds::ckpt::checkpoint_folder(dir, tag);
// a pipeline's checkpoint is one folder per stage (checkpoint_folders).
#pragma once

#include <torch/nn/module.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dstrain/engine/checkpoint/hf_format.hpp"

namespace ds {

// How far a long read of a checkpoint is: `done` of `total` bytes, counting the shards verified and
// then the weights read. Called after each shard and each parameter.
using CheckpointProgress = std::function<void(int64_t done, int64_t total)>;

// The effective config the checkpoint in `folder` was trained with.
nlohmann::json checkpoint_config(const std::string& folder);
// Verifies every shard's checksum, then copies every parameter of `module` from the checkpoint's
// fp32 weights (converted to the parameter's dtype), one parameter at a time, read straight from
// the shards. A missing name or a shape mismatch is a ds::Error naming it and the file.
void load_checkpoint_weights(const std::string& folder, torch::nn::Module& module);
// The same from the folders of one checkpoint (a pipeline's stages, in order): each parameter comes
// from the first folder that holds it (the tied wte.weight is in the first and the last stage), the
// folders' shards are verified one folder at a time, and a parameter no folder holds is a ds::Error
// naming it and the first folder.
void load_checkpoint_weights(const std::vector<std::string>& folders, torch::nn::Module& module,
                             const CheckpointProgress& progress = {});

// The checkpoint folders of one checkpoint in `dir`: <dir>/<tag>, or for a pipeline's save folder
// (stage0/, stage1/, ...) each stage's <tag>, in stage order. An empty tag: the latest (for a
// pipeline the newest complete in every stage, ckpt::newest_common_tag).
std::vector<std::string> checkpoint_folders(const std::string& dir, const std::string& tag);

struct HfExport {
  int64_t tensors = 0;
  int64_t bytes = 0;               // of the tensors' data: the index's metadata.total_size
  std::vector<std::string> files;  // the weights files written, in order
};
// Writes the model weights of the checkpoint in `folders` (checkpoint_folders) as transformers'
// GPT2LMHeadModel or LlamaForCausalLM: fp32 tensors under the names and layouts of
// ckpt/hf_format.hpp, and <out_dir>/config.json. As save_pretrained(max_shard_size=...) writes them:
// one <out_dir>/model.safetensors when the tensors' data fits in `max_shard_bytes`, else
// model-00001-of-0000N.safetensors ... cut by ckpt::shard_starts, with model.safetensors.index.json
// ({"metadata": {"total_size": data bytes}, "weight_map": {tensor: file}}); weights files of an
// earlier export in the folder that this one did not write are removed, so that no loader picks a
// stale one. Streams: verifies one stage's shards through a 4 MiB buffer, then reads one parameter
// at a time from the shards that hold it and appends it to its file, so memory holds one parameter
// (the largest, at the end) and no shard whole. A checkpoint lacking some of the model's parameters
// (one stage of a pipeline) is a ds::Error naming the count and the folder.
HfExport export_hf(const std::vector<std::string>& folders, const std::string& out_dir,
                   int64_t max_shard_bytes = ckpt::kHfMaxShardBytes, const CheckpointProgress& progress = {});

}  // namespace ds
