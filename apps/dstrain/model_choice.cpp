#include "model_choice.hpp"

#include "dstrain/engine/models/gpt_inference.hpp"
#include "dstrain/engine/models/llama_inference.hpp"
#include "trainer_block.hpp"

namespace ds::app {

at::Tensor CausalLM::forward(const at::Tensor& tokens) const {
  return std::visit([&](auto model) { return model->forward(tokens); }, model_);
}

std::vector<int64_t> CausalLM::generate(const std::vector<int64_t>& prompt, int64_t max_new_tokens,
                                        const models::Sampling& sampling, uint64_t seed,
                                        const std::function<void(int64_t)>& on_token) const {
  return std::visit(
      [&](auto model) { return models::generate(*model, prompt, max_new_tokens, sampling, seed, on_token); },
      model_);
}

std::shared_ptr<torch::nn::Module> CausalLM::ptr() const {
  return std::visit([](const auto& model) -> std::shared_ptr<torch::nn::Module> { return model.ptr(); }, model_);
}

std::string ModelChoice::name() const {
  return std::holds_alternative<models::GPTConfig>(config) ? "GPT" : "Llama";
}

int64_t ModelChoice::vocab_size() const {
  return std::visit([](const auto& c) { return c.vocab_size; }, config);
}

int64_t ModelChoice::max_sequence_length() const {
  if (const auto* gpt = std::get_if<models::GPTConfig>(&config)) return gpt->block_size;
  return std::get<models::LlamaConfig>(config).max_position_embeddings;
}

std::string ModelChoice::max_sequence_key() const {
  return std::holds_alternative<models::GPTConfig>(config) ? "block_size" : "max_position_embeddings";
}

std::string ModelChoice::summary() const {
  if (const auto* gpt = std::get_if<models::GPTConfig>(&config))
    return "GPT with " + std::to_string(gpt->n_layer) + " layers, " + std::to_string(gpt->n_embd) + " wide";
  const auto& llama = std::get<models::LlamaConfig>(config);
  return "Llama with " + std::to_string(llama.num_hidden_layers) + " layers, " + std::to_string(llama.hidden_size) +
         " wide, " + std::to_string(llama.num_attention_heads) + " heads sharing " +
         std::to_string(llama.num_key_value_heads) + " key/value heads";
}

CausalLM ModelChoice::build() const {
  if (const auto* gpt = std::get_if<models::GPTConfig>(&config)) return models::GPT(*gpt);
  return models::Llama(std::get<models::LlamaConfig>(config));
}

ModelShape ModelChoice::shape() const {
  if (const auto* gpt = std::get_if<models::GPTConfig>(&config)) return gpt_shape(*gpt);
  const auto& llama = std::get<models::LlamaConfig>(config);
  ModelShape shape;
  shape.numels = models::parameter_numels(llama);
  shape.hidden = llama.hidden_size;
  return shape;
}

ModelChoice choose_model(const nlohmann::json& model_block, int64_t activation_checkpoint_interval) {
  check_model_type(model_block);
  ModelChoice choice;
  if (model_block.is_object() && model_block.value("type", "gpt") == "llama") {
    models::LlamaConfig llama = models::LlamaConfig::from_json(model_block);
    llama.activation_checkpoint_interval = activation_checkpoint_interval;
    choice.config = llama;
  } else {
    models::GPTConfig gpt = models::GPTConfig::from_json(model_block);
    gpt.activation_checkpoint_interval = activation_checkpoint_interval;
    choice.config = gpt;
  }
  return choice;
}

}  // namespace ds::app
