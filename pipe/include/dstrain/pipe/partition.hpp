// How a pipeline's ordered layers are cut into stages: contiguous ranges, every stage at least one
// layer. These are DeepSpeed's PipelineModule partition methods "uniform" (equal layer counts) and
// "parameters" (balanced parameter counts).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds::pipe {

// Stage s holds layers [bounds[s], bounds[s + 1]): stages + 1 entries rising from 0 to the number
// of layers, every stage non-empty.
using StageBounds = std::vector<int>;

// Layer counts as equal as can be; the first (layers mod stages) stages get one more, as DeepSpeed's
// partition_uniform.
StageBounds partition_uniform(int num_layers, int stages);

// The cut whose heaviest stage (the sum of its layers' weights) is as light as any cut into
// `stages` non-empty ranges can make it. Where several cuts reach that, earlier stages take as
// many layers as fit. Weights must be non-negative.
StageBounds partition_balanced(const std::vector<int64_t>& layer_weights, int stages);

// The config's pipeline.partition: "uniform", or "parameters" (balanced over `layer_parameters`).
// "best", the default of DeepSpeed's config block, means "parameters", PipelineModule's default.
// A stage count above the layer count, or another method, is a ds::Error naming the key.
StageBounds partition_layers(const std::string& method, const std::vector<int64_t>& layer_parameters, int stages);

}  // namespace ds::pipe
