// The checkpoint `dstrain eval` and `dstrain generate` read a whole model from: a data-parallel
// run's folder, or a pipeline's save folder (stage0/, stage1/, ...), whose stages together hold the
// model and are read one stage at a time (load_checkpoint_weights over the folders).
#pragma once

#include <string>
#include <vector>

namespace ds::app {

// The folders of the checkpoint `tag` in `dir` (empty: the latest; for a pipeline the newest
// complete in every stage), in stage order, checked to be one whole model at one step: a ds::Error
// naming the folder when a stage's folder is missing (the checkpoint's config says how many stages
// it has), when `dir` is one stage's folder rather than the pipeline's, or when a stage stands at
// another step than stage 0.
std::vector<std::string> model_checkpoint_folders(const std::string& dir, const std::string& tag);

}  // namespace ds::app
