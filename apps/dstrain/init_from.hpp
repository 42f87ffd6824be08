// dstrain.model.init_from: DIR, a run that starts from Hugging Face weights (fine-tuning) of GPT-2
// or a Llama. DIR is a folder as transformers saves it (config.json with model.safetensors, or with
// model.safetensors.index.json and its shards; what `dstrain export --format safetensors` writes).
// Its config.json gives the model's type and sizes; the dstrain.model block may omit them (or set
// them to null) or must agree.
#pragma once

#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "dstrain/runtime/config.hpp"
#include "model_choice.hpp"

namespace ds::comm {
class Backend;
}

namespace ds::app {

// Takes dstrain.model.init_from out of the whole config `json` and writes DIR/config.json's type and
// sizes into the dstrain.model block, which then describes the model alone (as checkpoints record
// it). Returns DIR, or "" when the block has no init_from. A type or size the block gives otherwise
// is a ds::Error naming its key and the file.
std::string take_init_from(nlohmann::json& json);

// The model `choice` describes with the weights in `dir`: built whole, loaded, then partitioned when
// `partition` and the config is at ZeRO stage 3 (rank 0's values are broadcast, as zero::build does).
CausalLM model_from_hf(const std::string& dir, const ModelChoice& choice, const Config& config, bool partition,
                       std::shared_ptr<comm::Backend> world);

}  // namespace ds::app
