#include "dstrain/engine/checkpoint/hf_import.hpp"

#include <torch/torch.h>

#include <filesystem>
#include <fstream>
#include <map>

#include "dstrain/engine/checkpoint/hf_format.hpp"
#include "dstrain/io/safetensors.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds {
namespace {

at::ScalarType scalar_type(const io::SafetensorsTensor& tensor, const std::string& file) {
  static const std::map<std::string, at::ScalarType> types = {
      {"F32", at::kFloat}, {"F16", at::kHalf}, {"BF16", at::kBFloat16}, {"F64", at::kDouble}};
  const auto it = types.find(tensor.dtype);
  if (it == types.end())
    throw Error("tensor '" + tensor.name + "' has dtype " + tensor.dtype + "; weights load from F32, F16, BF16 or F64")
        .with_path(file);
  return it->second;
}

std::string shape_text(const std::vector<int64_t>& shape) { return c10::str(at::IntArrayRef(shape)); }

}  // namespace

nlohmann::json hf_model_block(const std::string& dir) {
  const std::string path = (std::filesystem::path(dir) / "config.json").string();
  std::ifstream in(path);
  if (!in) throw Error("cannot open the Hugging Face config").with_path(path).with_errno(errno);
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (config.is_discarded()) throw Error("config.json is not valid JSON").with_path(path);
  return ckpt::model_block_from_hf(config, path);
}

void load_hf_weights(const std::string& dir, torch::nn::Module& module, const std::string& type) {
  const io::SafetensorsFolder weights(dir);
  // The parameter each tensor holds; GPT-2's lm_head and mask buffers hold none.
  std::map<std::string, std::pair<std::string, bool>> source;  // parameter -> (tensor, transposed)
  for (const std::string& name : weights.names()) {
    ckpt::HfTensor target;
    try {
      target = ckpt::from_hf_tensor(type, name);
    } catch (Error& e) {
      throw e.with_path(weights.file_of(name));
    }
    if (target.name.empty()) continue;
    if (!source.emplace(target.name, std::make_pair(name, target.transposed)).second)
      throw Error("tensors '" + source[target.name].first + "' and '" + name + "' both hold '" + target.name + "'")
          .with_path(weights.file_of(name));
  }
  torch::NoGradGuard no_grad;
  std::vector<char> bytes;
  size_t used = 0;
  for (auto& item : module.named_parameters()) {
    const auto it = source.find(item.key());
    if (it == source.end())
      throw Error("the weights have no tensor for the model's '" + item.key() + "' (Hugging Face: '" +
                  ckpt::to_hf_tensor(type, item.key()).name + "')")
          .with_path(dir);
    const auto& [name, transposed] = it->second;
    const io::SafetensorsTensor& tensor = weights.tensor(name);
    std::vector<int64_t> shape = item.value().sizes().vec();
    if (transposed) std::reverse(shape.begin(), shape.end());
    if (tensor.shape != shape)
      throw Error("tensor '" + name + "' has shape " + shape_text(tensor.shape) + ", the model's '" + item.key() +
                  "' needs " + shape_text(shape))
          .with_path(weights.file_of(name));
    const at::ScalarType type = scalar_type(tensor, weights.file_of(name));
    bytes.resize(static_cast<size_t>(tensor.bytes()));
    weights.read(name, bytes.data());
    at::Tensor value = at::from_blob(bytes.data(), tensor.shape, at::TensorOptions().dtype(type));
    item.value().copy_(transposed ? value.t() : value);
    ++used;
  }
  if (used != source.size())
    for (const auto& [parameter, tensor] : source)
      // A tied head (the token embedding's weight) may be saved as lm_head.weight too.
      if (!module.named_parameters().contains(parameter) && parameter != "lm_head.weight")
        throw Error("tensor '" + tensor.first + "' has no place in the model (no parameter '" + parameter + "')")
            .with_path(weights.file_of(tensor.first));
}

}  // namespace ds
