#include "dstrain/engine/checkpoint/export.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <regex>
#include <set>

#include "dstrain/engine/checkpoint/folder.hpp"
#include "dstrain/engine/checkpoint/index.hpp"
#include "dstrain/io/safetensors.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds {
namespace {

namespace fs = std::filesystem;

constexpr int64_t kVerifyBufferBytes = 4 << 20;
constexpr size_t kTransposeBlockElements = 1 << 16;
const char* const kIndexFile = "model.safetensors.index.json";

// Bytes done of the total, told to the caller's progress after each piece.
class Tally {
 public:
  Tally(const CheckpointProgress& report, int64_t total) : report_(report), total_(total) {}
  void add(int64_t bytes) {
    done_ += bytes;
    if (report_) report_(done_, total_);
  }

 private:
  const CheckpointProgress& report_;
  int64_t total_;
  int64_t done_ = 0;
};

int64_t shard_bytes(const ckpt::CheckpointIndex& index) {
  int64_t total = 0;
  for (const ckpt::ShardEntry& shard : index.shards) total += shard.bytes;
  return total;
}

void verify_shards(ckpt::ShardSet& shards, const ckpt::CheckpointIndex& index, std::vector<char>& buffer, Tally& tally) {
  for (int k = 0; k < index.world_size; ++k) {
    if (std::string problem = shards.verify(k, buffer.data(), static_cast<int64_t>(buffer.size())); !problem.empty())
      throw Error(problem).with_path(shards.path(k));
    tally.add(index.shards[static_cast<size_t>(k)].bytes);
  }
}

std::vector<ckpt::CheckpointIndex> read_indexes(const std::vector<std::string>& folders) {
  std::vector<ckpt::CheckpointIndex> indexes;
  for (const std::string& folder : folders) indexes.push_back(ckpt::CheckpointIndex::read(folder));
  return indexes;
}

// One parameter of a checkpoint: which folder's index holds it, and where in that index.
struct Located {
  size_t folder = 0;
  size_t param = 0;
};

// One parameter of the export: where it is, and the tensor it becomes.
struct ExportedTensor {
  Located at;
  ckpt::HfTensor hf;
  int64_t bytes = 0;
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

// The weights files in `out_dir` that an export, ours or transformers', writes and `written` does not
// hold: a stale model.safetensors would shadow a new index (transformers looks for it first), a stale
// index a new single file (ours reads the index first).
void remove_stale_weights(const std::string& out_dir, const std::vector<std::string>& written) {
  static const std::regex kShardName(R"(model-[0-9]{5}-of-[0-9]{5}\.safetensors)");
  const bool sharded = written.size() > 1;
  for (const auto& entry : fs::directory_iterator(out_dir)) {
    const std::string name = entry.path().filename().string();
    const bool ours = std::find(written.begin(), written.end(), name) != written.end();
    const bool weights = name == "model.safetensors" || std::regex_match(name, kShardName) || (name == kIndexFile && !sharded);
    if (weights && !ours && std::remove(entry.path().c_str()) != 0)
      throw Error("cannot remove the weights of an earlier export").with_path(entry.path().string()).with_errno(errno);
  }
}

}  // namespace

nlohmann::json checkpoint_config(const std::string& folder) { return ckpt::CheckpointIndex::read(folder).config; }

void load_checkpoint_weights(const std::string& folder, torch::nn::Module& module) {
  load_checkpoint_weights(std::vector<std::string>{folder}, module);
}

void load_checkpoint_weights(const std::vector<std::string>& folders, torch::nn::Module& module,
                             const CheckpointProgress& progress) {
  const std::vector<ckpt::CheckpointIndex> indexes = read_indexes(folders);
  const std::string index_path = (fs::path(folders[0]) / "index.json").string();
  const auto parameters = module.named_parameters();
  std::vector<Located> sources;
  int64_t total = 0;
  for (const auto& item : parameters) {
    Located source{indexes.size(), 0};
    for (size_t f = 0; f < indexes.size() && source.folder == indexes.size(); ++f)
      for (size_t i = 0; i < indexes[f].params.size(); ++i)
        if (indexes[f].params[i].name == item.key()) source = {f, i};
    if (source.folder == indexes.size())
      throw Error("checkpoint has no weight '" + item.key() + "'" +
                  (folders.size() > 1 ? " in any of its " + std::to_string(folders.size()) + " stage folders" : ""))
          .with_path(index_path);
    const ckpt::ParamEntry& entry = indexes[source.folder].params[source.param];
    if (entry.shape != item.value().sizes().vec())
      throw Error("checkpoint weight '" + item.key() + "' has shape " + c10::str(at::IntArrayRef(entry.shape)) +
                  ", the model " + c10::str(item.value().sizes()))
          .with_path((fs::path(folders[source.folder]) / "index.json").string());
    sources.push_back(source);
    total += entry.numel * static_cast<int64_t>(sizeof(float));
  }
  for (const ckpt::CheckpointIndex& index : indexes) total += shard_bytes(index);
  Tally tally(progress, total);
  std::vector<char> buffer(kVerifyBufferBytes);
  torch::NoGradGuard no_grad;
  for (size_t f = 0; f < folders.size(); ++f) {
    ckpt::ShardSet shards(folders[f], indexes[f]);
    verify_shards(shards, indexes[f], buffer, tally);
    for (size_t j = 0; j < parameters.size(); ++j) {
      if (sources[j].folder != f) continue;
      at::Tensor target = parameters[j].value();
      const bool direct = target.scalar_type() == at::kFloat && target.is_contiguous();
      at::Tensor weight = direct ? target : at::empty(target.sizes(), at::kFloat);
      shards.read_elements(sources[j].param, "master", 0, weight.numel(), weight.data_ptr<float>());
      if (!direct) target.copy_(weight);
      tally.add(weight.numel() * static_cast<int64_t>(sizeof(float)));
    }
  }
}

std::vector<std::string> checkpoint_folders(const std::string& dir, const std::string& tag) {
  if (!fs::is_directory(fs::path(dir) / "stage0")) return {ckpt::checkpoint_folder(dir, tag)};
  std::vector<std::string> stages;
  for (int s = 0; fs::is_directory(fs::path(dir) / ("stage" + std::to_string(s))); ++s)
    stages.push_back((fs::path(dir) / ("stage" + std::to_string(s))).string());
  const std::string chosen = tag.empty() ? ckpt::newest_common_tag(stages) : tag;
  std::vector<std::string> folders;
  for (const std::string& stage : stages) folders.push_back(ckpt::checkpoint_folder(stage, chosen));
  return folders;
}

HfExport export_hf(const std::vector<std::string>& folders, const std::string& out_dir, int64_t max_shard_bytes,
                   const CheckpointProgress& progress) {
  const std::vector<ckpt::CheckpointIndex> indexes = read_indexes(folders);
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
      exported.push_back({{f, i}, hf, param.numel * static_cast<int64_t>(sizeof(float))});
    }
  if (exported.size() != ckpt::parameter_count(model))
    throw Error("the checkpoint holds " + std::to_string(exported.size()) + " of the model's " +
                std::to_string(ckpt::parameter_count(model)) + " parameters (one stage of a pipeline? export its save folder)")
        .with_path(folders[0]);
  const std::string config_text = ckpt::hf_config(model).dump(2) + "\n";

  std::vector<int64_t> sizes;
  HfExport result;
  for (const ExportedTensor& tensor : exported) {
    sizes.push_back(tensor.bytes);
    result.bytes += tensor.bytes;
  }
  std::vector<size_t> starts = ckpt::shard_starts(sizes, max_shard_bytes);
  starts.push_back(exported.size());
  const size_t files = starts.size() - 1;
  nlohmann::json weight_map = nlohmann::json::object();
  for (size_t s = 0; s < files; ++s) {
    result.files.push_back(ckpt::weights_file_name(s, files));
    for (size_t t = starts[s]; t < starts[s + 1]; ++t) weight_map[exported[t].hf.name] = result.files.back();
  }

  std::error_code ec;
  fs::create_directories(out_dir, ec);
  if (ec) throw Error("cannot create the export folder").with_path(out_dir).with_errno(ec.value());
  int64_t total = result.bytes;
  for (const ckpt::CheckpointIndex& index : indexes) total += shard_bytes(index);
  Tally tally(progress, total);
  std::vector<char> verify_buffer(kVerifyBufferBytes);
  // Sized once, for the largest parameter: growing them would hold two copies at a time.
  std::vector<float> weight;
  weight.reserve(static_cast<size_t>(*std::max_element(sizes.begin(), sizes.end()) / static_cast<int64_t>(sizeof(float))));
  std::vector<float> block;
  block.reserve(kTransposeBlockElements);
  // Files finished so far, removed again when a later one fails: a folder with some shards and no
  // index is no export.
  std::vector<std::string> finished;
  try {
    std::unique_ptr<io::SafetensorsWriter> out;
    size_t file = 0, next = 0;
    for (size_t f = 0; f < folders.size(); ++f) {
      ckpt::ShardSet shards(folders[f], indexes[f]);
      verify_shards(shards, indexes[f], verify_buffer, tally);
      for (; next < exported.size() && exported[next].at.folder == f; ++next) {
        if (next == starts[file]) {
          const std::string path = (fs::path(out_dir) / result.files[file]).string();
          out = std::make_unique<io::SafetensorsWriter>(
              path, std::vector<io::SafetensorsTensor>(layout.begin() + static_cast<std::ptrdiff_t>(starts[file]),
                                                       layout.begin() + static_cast<std::ptrdiff_t>(starts[file + 1])));
          ++file;
        }
        const ckpt::ParamEntry& param = indexes[f].params[exported[next].at.param];
        weight.resize(static_cast<size_t>(param.numel));
        shards.read_elements(exported[next].at.param, "master", 0, param.numel, weight.data());
        if (exported[next].hf.transposed)
          append_transposed(*out, weight, param.shape[0], param.shape[1], block);
        else
          out->append(weight.data(), exported[next].bytes);
        tally.add(exported[next].bytes);
        if (next + 1 == starts[file]) {
          out->finish();
          finished.push_back((fs::path(out_dir) / result.files[file - 1]).string());
        }
      }
    }
  } catch (...) {
    for (const std::string& path : finished) std::remove(path.c_str());
    throw;
  }
  if (files > 1)
    write_file_atomically((fs::path(out_dir) / kIndexFile).string(),
                          nlohmann::json{{"metadata", {{"total_size", result.bytes}}}, {"weight_map", weight_map}}.dump(2) + "\n");
  write_file_atomically((fs::path(out_dir) / "config.json").string(), config_text);
  remove_stale_weights(out_dir, result.files);
  result.tensors = static_cast<int64_t>(exported.size());
  return result;
}

}  // namespace ds
