#include "model_checkpoint.hpp"

#include <cerrno>
#include <filesystem>

#include "dstrain/engine/checkpoint/export.hpp"
#include "dstrain/engine/checkpoint/index.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::app {
namespace {

namespace fs = std::filesystem;

// The pipeline stages the checkpoint's run trained with; 1 outside a pipeline.
int64_t trained_stages(const ckpt::CheckpointIndex& index) {
  const nlohmann::json pipeline = index.config.value("pipeline", nlohmann::json::object());
  const auto stages = pipeline.find("stages");
  return stages != pipeline.end() && stages->is_number_integer() ? stages->get<int64_t>() : 1;
}

}  // namespace

std::vector<std::string> model_checkpoint_folders(const std::string& dir, const std::string& tag) {
  const std::vector<std::string> folders = checkpoint_folders(dir, tag);
  const ckpt::CheckpointIndex first = ckpt::CheckpointIndex::read(folders[0]);
  const int64_t stages = trained_stages(first);
  const bool pipeline_dir = fs::is_directory(fs::path(dir) / "stage0");
  if (stages > 1 && !pipeline_dir)
    throw Error("this is one stage of a " + std::to_string(stages) +
                "-stage pipeline's checkpoint: pass the pipeline's save folder, the one holding stage0/ ... stage" +
                std::to_string(stages - 1) + "/")
        .with_path(folders[0]);
  if (static_cast<int64_t>(folders.size()) < stages)
    throw Error("the pipeline's checkpoint has " + std::to_string(folders.size()) + " of its " + std::to_string(stages) +
                " stage folders: stage " + std::to_string(folders.size()) + " is missing")
        .with_path((fs::path(dir) / ("stage" + std::to_string(folders.size()))).string())
        .with_errno(ENOENT);
  if (static_cast<int64_t>(folders.size()) > stages)
    throw Error("the pipeline's save folder holds " + std::to_string(folders.size()) + " stage folders, its checkpoint's config " +
                std::to_string(stages) + " stages: stage folders of another run?")
        .with_path((fs::path(dir) / ("stage" + std::to_string(stages))).string());
  for (size_t s = 1; s < folders.size(); ++s)
    if (const int64_t step = ckpt::CheckpointIndex::read(folders[s]).global_steps(); step != first.global_steps())
      throw Error("stage " + std::to_string(s) + " was saved at step " + std::to_string(step) + ", stage 0 (" + folders[0] +
                  ") at step " + std::to_string(first.global_steps()) + ": the stages are not one model")
          .with_path(folders[s]);
  return folders;
}

}  // namespace ds::app
