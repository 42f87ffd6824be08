// ds::zero::Init: DeepSpeed's zero.Init. While one is alive, ZeRO stage 3 models are built
// partitioned: each module's parameters are cut to this rank's chunk as soon as that module is
// built, so no rank ever holds the whole model, not even while constructing it.
//
//   ds::zero::Init init(config);        // stage 3: active on this thread until it goes out of scope
//   MyModel model(...);                 // constructors call ds::zero::partition_built(*child)
//   init.partition(*model);             // whatever the constructors left whole
//   auto engine = ds::initialize(model, config);
// or in one line: auto model = ds::zero::build(config, [&] { return MyModel(...); });
//
// Each parameter is cast to the config's dtype, broadcast from rank 0 (one parameter at a time,
// never the whole model in one buffer), and rank r keeps its ShardLayout chunk: elements
// [r * chunk, (r + 1) * chunk) of the flat parameter, chunk = ceil(numel / ranks), zero-padded.
// Values are those the constructor drew on rank 0, so a model built under Init equals one built
// without it after the same seed. Parameters of at most stage3_param_persistence_threshold
// elements stay whole (stage 3 keeps them whole anyway).
//
// A partitioned parameter keeps its whole shape (sizes(), numel() are the model's) over a storage
// that holds only the chunk: all its strides are 0. Its values must not be read until the engine
// has taken it over; the engine's stage 3 reads the chunk back with partition_chunk().
//
// With zero_optimization.offload_param.device "nvme", memory does not hold the chunks either: each
// goes to a file in a fresh folder under offload_param.nvme_path as soon as its module is
// partitioned (checked first as the swap folders are: errors name offload_param.nvme_path), and
// the parameter's storage keeps one element; partition_chunk() reads the chunk back. The folder
// is removed once no parameter refers to it: when the engine has taken every chunk over into its
// parameter swap file, or when the model is dropped.
//
// Below stage 3, or on one rank, Init is inactive and models are built whole as usual.
#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/ScalarType.h>
#include <torch/nn/module.h>

#include <memory>

#include "dstrain/runtime/config.hpp"

namespace ds::comm {
class Backend;
}

namespace ds::zero {

class PartitionFile;

class Init {
 public:
  // group: the data-parallel group the engine will use (null: the world, initialized if need be).
  explicit Init(const Config& config, std::shared_ptr<comm::Backend> group = nullptr);
  ~Init();
  Init(const Init&) = delete;
  Init& operator=(const Init&) = delete;

  // The Init active on this thread (the innermost one alive, at stage 3), or null.
  static Init* active();
  bool enabled() const { return enabled_; }
  // Partitions every trainable parameter of module's subtree not partitioned yet. Collective:
  // every rank of the group calls it for the same modules in the same order.
  void partition(torch::nn::Module& module);

 private:
  bool enabled_ = false;
  std::shared_ptr<comm::Backend> group_;
  at::ScalarType dtype_ = at::kFloat;
  int64_t persistence_threshold_ = 0;
  Init* previous_ = nullptr;
  std::shared_ptr<PartitionFile> file_;  // offload_param on NVMe: where the chunks go; else null
};

// For model constructors: partitions module now if an Init is active on this thread, else nothing.
void partition_built(torch::nn::Module& module);

// Builds a model (a module holder returned by make) under an Init and partitions what its
// constructor left whole.
template <class Make>
auto build(const Config& config, Make&& make, std::shared_ptr<comm::Backend> group = nullptr) {
  Init init(config, std::move(group));
  auto model = make();
  init.partition(*model);
  return model;
}

// Whether param was built partitioned (and not yet taken over by an engine).
bool is_partitioned(const at::Tensor& param);
// A partitioned parameter's chunk, flat, chunk elements: a view of its storage, or, built onto
// NVMe, a copy read from the file.
at::Tensor partition_chunk(const at::Tensor& param);

}  // namespace ds::zero
