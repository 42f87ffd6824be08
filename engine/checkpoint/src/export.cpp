#include "dstrain/engine/checkpoint/export.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <filesystem>
#include <set>

#include "dstrain/engine/checkpoint/folder.hpp"
#include "dstrain/engine/checkpoint/hf_format.hpp"
#include "dstrain/engine/checkpoint/index.hpp"
#include "dstrain/io/safetensors.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds {
namespace {

constexpr int64_t kVerifyBufferBytes = 4 << 20;
constexpr size_t kTransposeBlockElements = 1 << 16;

void verify_shards(ckpt::ShardSet& shards, const ckpt::CheckpointIndex& index, std::vector<char>& buffer) {
  for (int k = 0; k < index.world_size; ++k)
    if (std::string problem = shards.verify(k, buffer.data(), static_cast<int64_t>(buffer.size())); !problem.empty())
      throw Error(problem).with_path(shards.path(k));
}

// One parameter of the export: where it is in which stage's checkpoint, and where it goes.
struct ExportedTensor {
  size_t folder = 0;
  size_t param = 0;
  ckpt::HfTensor hf;
};

// Appends `weight` ([rows, cols], row-major) to `out` as its transpose, a block at a time.
void append_transposed(io::SafetensorsWriter& out, const std::vector<float>& weight, int64_t rows, int64_t cols,
                       std::vector<float>& block) {
  block.clear();
  for (int64_t c = 0; c < cols; ++c)
    for (int64_t r = 0; r < rows; ++r) {
      block.push_back(weight[static_cast<size_t>(r * cols + c)]);
      if (block.size() == kTransposeBlockElements) {
        out.append(block.data(), static_cast<int64_t>(block.size() * sizeof(float)));
        block.clear();
      }
    }
  out.append(block.data(), static_cast<int64_t>(block.size() * sizeof(float)));
}

}  // namespace

nlohmann::json checkpoint_config(const std::string& folder) { return ckpt::CheckpointIndex::read(folder).config; }

void load_checkpoint_weights(const std::string& folder, torch::nn::Module& module) {
  const ckpt::CheckpointIndex index = ckpt::CheckpointIndex::read(folder);
  const std::string index_path = (std::filesystem::path(folder) / "index.json").string();
  ckpt::ShardSet shards(folder, index);
  {
    std::vector<char> buffer(kVerifyBufferBytes);
    verify_shards(shards, index, buffer);
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

std::vector<std::string> checkpoint_folders(const std::string& dir, const std::string& tag) {
  namespace fs = std::filesystem;
  if (!fs::is_directory(fs::path(dir) / "stage0")) return {ckpt::checkpoint_folder(dir, tag)};
  std::vector<std::string> stages;
  for (int s = 0; fs::is_directory(fs::path(dir) / ("stage" + std::to_string(s))); ++s)
    stages.push_back((fs::path(dir) / ("stage" + std::to_string(s))).string());
  const std::string chosen = tag.empty() ? ckpt::newest_common_tag(stages) : tag;
  std::vector<std::string> folders;
  for (const std::string& stage : stages) folders.push_back(ckpt::checkpoint_folder(stage, chosen));
  return folders;
}

HfExport export_hf(const std::vector<std::string>& folders, const std::string& out_dir) {
  namespace fs = std::filesystem;
  std::vector<ckpt::CheckpointIndex> indexes;
  for (const std::string& folder : folders) indexes.push_back(ckpt::CheckpointIndex::read(folder));
  const nlohmann::json model = indexes[0].config.value("dstrain", nlohmann::json::object()).value("model", nlohmann::json::object());
  const std::string type = ckpt::model_type(model);
  // A pipeline's stages that hold the embedding and the head both keep the tied wte.weight, equal:
  // the first is written.
  std::vector<ExportedTensor> exported;
  std::vector<io::SafetensorsTensor> layout;
  std::set<std::string> seen;
  for (size_t f = 0; f < indexes.size(); ++f)
    for (size_t i = 0; i < indexes[f].params.size(); ++i) {
      const ckpt::ParamEntry& param = indexes[f].params[i];
      if (!seen.insert(param.name).second) continue;
      ckpt::HfTensor hf;
      try {
        hf = ckpt::to_hf_tensor(type, param.name);
      } catch (Error& e) {
        throw e.with_path(folders[f]);
      }
      std::vector<int64_t> shape = param.shape;
      if (hf.transposed) std::reverse(shape.begin(), shape.end());
      layout.push_back({hf.name, "F32", shape});
      exported.push_back({f, i, hf});
    }
  if (exported.size() != ckpt::parameter_count(model))
    throw Error("the checkpoint holds " + std::to_string(exported.size()) + " of the model's " +
                std::to_string(ckpt::parameter_count(model)) + " parameters (one stage of a pipeline? export its save folder)")
        .with_path(folders[0]);
  const std::string config_text = ckpt::hf_config(model).dump(2) + "\n";

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw Error("cannot create the export folder").with_path(out_dir).with_errno(ec.value());
  io::SafetensorsWriter out((fs::path(out_dir) / "model.safetensors").string(), layout);
  std::vector<char> verify_buffer(kVerifyBufferBytes);
  // Sized once, for the largest parameter: growing them would hold two copies at a time.
  int64_t largest = 0;
  for (const ExportedTensor& tensor : exported) largest = std::max(largest, indexes[tensor.folder].params[tensor.param].numel);
  std::vector<float> weight;
  weight.reserve(static_cast<size_t>(largest));
  std::vector<float> block;
  block.reserve(kTransposeBlockElements);
  size_t next = 0;
  for (size_t f = 0; f < folders.size(); ++f) {
    ckpt::ShardSet shards(folders[f], indexes[f]);
    verify_shards(shards, indexes[f], verify_buffer);
    for (; next < exported.size() && exported[next].folder == f; ++next) {
      const ckpt::ParamEntry& param = indexes[f].params[exported[next].param];
      weight.resize(static_cast<size_t>(param.numel));
      shards.read_elements(exported[next].param, "master", 0, param.numel, weight.data());
      if (exported[next].hf.transposed)
        append_transposed(out, weight, param.shape[0], param.shape[1], block);
      else
        out.append(weight.data(), param.numel * static_cast<int64_t>(sizeof(float)));
    }
  }
  out.finish();
  write_file_atomically((fs::path(out_dir) / "config.json").string(), config_text);
  HfExport result;
  result.tensors = static_cast<int64_t>(exported.size());
  result.bytes = static_cast<int64_t>(fs::file_size(fs::path(out_dir) / "model.safetensors"));
  return result;
}

}  // namespace ds
