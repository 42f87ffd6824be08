#include "dstrain/engine/export.hpp"

#include <torch/torch.h>

#include <cerrno>
#include <filesystem>
#include <fstream>

#include "dstrain/runtime/error.hpp"

namespace ds {

std::string checkpoint_path(const std::string& dir, const std::string& tag) {
  std::string name = tag;
  if (name.empty()) {
    const std::string latest = (std::filesystem::path(dir) / "latest").string();
    std::ifstream in(latest);
    if (!(in >> name)) throw Error("no checkpoint: cannot read").with_path(latest).with_errno(errno ? errno : ENOENT);
  }
  const std::string path = (std::filesystem::path(dir) / (name + ".pt")).string();
  if (!std::filesystem::exists(path)) throw Error("checkpoint not found").with_path(path).with_errno(ENOENT);
  return path;
}

nlohmann::json checkpoint_config(const std::string& path) {
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  c10::IValue config;
  if (!archive.try_read("meta/config", config) || !config.isString())
    throw Error("not a dstrain checkpoint (no meta/config)").with_path(path);
  return nlohmann::json::parse(config.toStringRef());
}

void load_checkpoint_weights(const std::string& path, torch::nn::Module& module) {
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  torch::NoGradGuard no_grad;
  for (auto& item : module.named_parameters()) {
    at::Tensor weight;
    if (!archive.try_read("master/" + item.key(), weight))
      throw Error("checkpoint has no weight '" + item.key() + "'").with_path(path);
    if (weight.sizes() != item.value().sizes())
      throw Error("checkpoint weight '" + item.key() + "' has shape " + c10::str(weight.sizes()) + ", the model " +
                  c10::str(item.value().sizes())).with_path(path);
    item.value().copy_(weight);
  }
}

}  // namespace ds
