// SliceGather: stages 1-2's parameter all-gather, run while the next forward computes
// (dstrain.gather_in_forward).
//
// At stages 1-2 every rank steps only its slice of each parameter, then needs the other ranks'
// slices before it reads the parameter again. Gathered inside the step, the link carries the
// all-gather half of the data-parallel traffic while every core waits for it, and it idles
// while the next forward computes. Instead, start() posts the gathers and returns; as the next
// forward reaches a module through ds::zero::call, pre_forward waits for the gathers of that
// module's parameters only, so the first layers compute while the last ones are still on the
// wire.
//
// Each parameter's storage is its ranks' slices back to back (the engine's ModelSlices buffer),
// so a parameter is gathered in place, by one all_gather_into on that storage. The small ones
// (under kSmallNumel elements, biases and norms) go first, together, through one staging buffer;
// then the rest in the order the first forward used them.
//
// The rule that makes it safe is stage 3's: a parameter is read only while the module that owns it
// runs, or later in the same forward. A module owns its parameters, those of its submodules down
// to (not into) ds::zero::Module children (zero::own_parameters), and its registered external
// parameters. A model that trains at stage 3 trains here. Code that reads
// parameters outside a forward calls finish() first (the engine does, in every entry point).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <unordered_map>
#include <vector>

#include "dstrain/runtime/config.hpp"
#include "dstrain/zero/module_call.hpp"

namespace ds::comm {
class Backend;
class Work;
}  // namespace ds::comm

namespace ds::zero {

// Whether the config asks for it: dstrain.gather_in_forward, off unless set (ds::Error naming the
// key when it is not a bool). Off by default because a model read outside engine forwards (an
// evaluation of your own through the model's handle) would see stale weights until the next
// forward or Engine::wait_for_parameters(); the dstrain trainer reads it only through the engine
// and turns it on.
bool gathers_in_forward(const Config& config);

class SliceGather : public ModuleHooks {
 public:
  // Parameters smaller than this (whole, padded) share one gather.
  static constexpr int64_t kSmallNumel = int64_t{1} << 16;

  // params: the model's parameters, in order; storage[i]: parameter i's storage, ranks x chunk
  // elements (this rank's slice at rank x chunk), which params[i] views.
  SliceGather(comm::Backend& group, std::vector<at::Tensor> params, std::vector<at::Tensor> storage);
  // Waits for the gathers still in flight (they write into the parameters); a failure is logged.
  ~SliceGather() override;
  SliceGather(const SliceGather&) = delete;
  SliceGather& operator=(const SliceGather&) = delete;

  // After the optimizer stepped this rank's slices: posts every parameter's gather.
  void start();
  // Waits for all of them (nothing to do when none is in flight).
  void finish();
  bool pending() const { return next_wait_ < works_.size(); }

  // Waits for the gathers of the module's own parameters and lets the others advance. While
  // nothing is pending it records the order modules run in.
  void pre_forward(torch::nn::Module& module) override;
  void post_forward(torch::nn::Module&, const std::vector<at::Tensor*>&) override {}

 private:
  const std::vector<size_t>& own_params(torch::nn::Module& module);
  // The gathers in the order start() posts them: the small parameters' shared one first, then one
  // in place per other parameter, in the order the recorded modules own them, then any left.
  void plan_gathers();
  void wait_through(size_t gather);

  comm::Backend& group_;
  std::vector<at::Tensor> params_;
  std::vector<at::Tensor> storage_;
  std::unordered_map<const void*, size_t> index_of_;  // TensorImpl -> parameter index
  std::unordered_map<const torch::nn::Module*, std::vector<size_t>> own_params_;
  std::vector<torch::nn::Module*> trace_;  // modules in the order the first forward called them

  bool planned_ = false;
  std::vector<size_t> small_;              // the parameters of the shared gather, works_[0]
  at::Tensor small_input_, small_output_;  // its staging: this rank's slices; every rank's
  std::vector<size_t> in_place_;           // the other parameters, one gather each, in posting order
  std::vector<size_t> gather_of_;          // parameter -> its gather's place in works_
  std::vector<std::unique_ptr<comm::Work>> works_;
  size_t next_wait_ = 0;  // works_[0, next_wait_) are done
};

}  // namespace ds::zero
