// How a pipeline's ordered layers are cut into stages: contiguous ranges, every stage at least one
// layer. These are DeepSpeed's PipelineModule partition methods "uniform" (equal layer counts),
// "parameters" (balanced parameter counts) and "type:<regex>" (balanced counts of the layers whose
// type name matches).
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

// The config's pipeline.partition over layers described by their parameter counts and type names
// (one entry per layer in each):
//   "uniform"              partition_uniform;
//   "parameters"           partition_balanced over layer_parameters; "best", the default of
//                          DeepSpeed's config block, means "parameters", PipelineModule's default;
//   "type:<regex>"         partition_balanced over weights 1 for the layers whose type name the
//                          regex matches anywhere, ignoring case (DeepSpeed's _find_layer_type:
//                          re.search with re.IGNORECASE), 0 for the others.
// A stage count above the layer count, another method, a regex that does not parse or matches no
// layer, is a ds::Error naming the key.
StageBounds partition_layers(const std::string& method, const std::vector<int64_t>& layer_parameters,
                             const std::vector<std::string>& layer_types, int stages);

}  // namespace ds::pipe
