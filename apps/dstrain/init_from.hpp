// dstrain.model.init_from: DIR, a run that starts from Hugging Face GPT-2 weights (fine-tuning).
// DIR is a folder as transformers saves it (config.json with model.safetensors, or with
// model.safetensors.index.json and its shards; what `dstrain export --format safetensors` writes).
// Its config.json gives the model's sizes; the dstrain.model block may omit them (or set them to
// null) or must agree.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/runtime/config.hpp"

namespace ds::comm {
class Backend;
}

namespace ds::app {

// Takes dstrain.model.init_from out of the whole config `json` and writes DIR/config.json's sizes
// into the dstrain.model block, which then describes the model alone (as checkpoints record it).
// Returns DIR, or "" when the block has no init_from. A size the block gives otherwise is a
// ds::Error naming its key and the file; so is a model type other than "gpt".
std::string take_init_from(nlohmann::json& json);

// The GPT of `model_config` with the weights in `dir`: built whole, loaded, then partitioned when
// `partition` and the config is at ZeRO stage 3 (rank 0's values are broadcast, as zero::build does).
models::GPT gpt_from_hf(const std::string& dir, const models::GPTConfig& model_config, const Config& config,
                        bool partition, std::shared_ptr<comm::Backend> world);

}  // namespace ds::app
