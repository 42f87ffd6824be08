#include "dstrain/engine/checkpoint/export.hpp"

#include <torch/torch.h>

#include <filesystem>

#include "dstrain/engine/checkpoint/index.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds {

nlohmann::json checkpoint_config(const std::string& folder) { return ckpt::CheckpointIndex::read(folder).config; }

void load_checkpoint_weights(const std::string& folder, torch::nn::Module& module) {
  const ckpt::CheckpointIndex index = ckpt::CheckpointIndex::read(folder);
  const std::string index_path = (std::filesystem::path(folder) / "index.json").string();
  ckpt::ShardSet shards(folder, index);
  {
    std::vector<char> buffer(16 << 20);
    for (int k = 0; k < index.world_size; ++k)
      if (std::string problem = shards.verify(k, buffer.data(), static_cast<int64_t>(buffer.size())); !problem.empty())
        throw Error(problem).with_path(shards.path(k));
  }
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) {
    size_t i = 0;
    while (i < index.params.size() && index.params[i].name != item.key()) ++i;
    if (i == index.params.size()) throw Error("checkpoint has no weight '" + item.key() + "'").with_path(index_path);
    if (index.params[i].shape != item.value().sizes().vec())
      throw Error("checkpoint weight '" + item.key() + "' has shape " + c10::str(at::IntArrayRef(index.params[i].shape)) +
                  ", the model " + c10::str(item.value().sizes())).with_path(index_path);
    at::Tensor target = item.value();
    const bool direct = target.scalar_type() == at::kFloat && target.is_contiguous();
    at::Tensor weight = direct ? target : at::empty(target.sizes(), at::kFloat);
    shards.read_elements(i, "master", 0, weight.numel(), weight.data_ptr<float>());
    if (!direct) target.copy_(weight);
  }
}

}  // namespace ds
