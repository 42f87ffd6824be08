#include "dstrain/zero/slice_gather.hpp"

#include <ATen/ATen.h>

#include <algorithm>
#include <exception>

#include "dstrain/comm/backend.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/zero/module.hpp"

namespace ds::zero {

bool gathers_in_forward(const Config& config) { return config.dstrain_flag("gather_in_forward", false); }

SliceGather::SliceGather(comm::Backend& group, std::vector<at::Tensor> params, std::vector<at::Tensor> storage)
    : group_(group), params_(std::move(params)), storage_(std::move(storage)), gather_of_(params_.size(), 0) {
  if (storage_.size() != params_.size()) throw Error("SliceGather: one storage tensor per parameter");
  for (size_t i = 0; i < params_.size(); ++i) index_of_[params_[i].unsafeGetTensorImpl()] = i;
}

SliceGather::~SliceGather() {
  try {
    finish();
  } catch (const std::exception& e) {
    log::warn_all("dstrain.gather_in_forward: a parameter gather still in flight failed: ", e.what());
  }
}

const std::vector<size_t>& SliceGather::own_params(torch::nn::Module& module) {
  auto it = own_params_.find(&module);
  if (it != own_params_.end()) return it->second;
  std::vector<size_t> own;
  auto add = [&](const at::Tensor& param) {
    if (auto found = index_of_.find(param.unsafeGetTensorImpl()); found != index_of_.end()) own.push_back(found->second);
  };
  for (const at::Tensor& param : own_parameters(module)) add(param);
  if (auto* zero_module = dynamic_cast<Module*>(&module))
    for (const at::Tensor& param : zero_module->external_parameters()) add(param);
  return own_params_.emplace(&module, std::move(own)).first->second;
}

void SliceGather::plan_gathers() {
  const int64_t ranks = group_.world_size();
  std::vector<bool> planned(params_.size(), false);
  int64_t small_numel = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    if (storage_[i].numel() >= kSmallNumel) continue;
    small_.push_back(i);
    small_numel += storage_[i].numel() / ranks;
    planned[i] = true;
  }
  if (!small_.empty()) {
    small_input_ = at::empty({small_numel}, storage_.front().options());
    small_output_ = at::empty({ranks * small_numel}, storage_.front().options());
  }
  auto plan = [&](size_t i) {
    if (planned[i]) return;
    planned[i] = true;
    in_place_.push_back(i);
  };
  for (torch::nn::Module* module : trace_)
    for (size_t i : own_params(*module)) plan(i);
  for (size_t i = 0; i < params_.size(); ++i) plan(i);
  const size_t first = small_.empty() ? 0 : 1;  // the small parameters' gather_of_ stays 0
  for (size_t k = 0; k < in_place_.size(); ++k) gather_of_[in_place_[k]] = first + k;
  trace_.clear();
  planned_ = true;
}

void SliceGather::start() {
  finish();
  if (!planned_) plan_gathers();
  const int64_t ranks = group_.world_size(), rank = group_.rank();
  auto own_slice = [&](size_t i) {
    const int64_t chunk = storage_[i].numel() / ranks;
    return storage_[i].narrow(0, rank * chunk, chunk);
  };
  works_.clear();
  next_wait_ = 0;
  if (!small_.empty()) {
    int64_t at = 0;
    for (size_t i : small_) {
      const at::Tensor mine = own_slice(i);
      small_input_.narrow(0, at, mine.numel()).copy_(mine);
      at += mine.numel();
    }
    works_.push_back(group_.all_gather_into_async(small_output_, small_input_));
  }
  for (size_t i : in_place_) works_.push_back(group_.all_gather_into_async(storage_[i], own_slice(i)));
}

void SliceGather::wait_through(size_t gather) {
  const int64_t ranks = group_.world_size(), rank = group_.rank();
  for (; next_wait_ <= gather && next_wait_ < works_.size(); ++next_wait_) {
    works_[next_wait_]->wait();
    if (next_wait_ != 0 || small_.empty()) continue;
    // The shared gather holds every rank's slices of the small parameters back to back.
    const int64_t total = small_input_.numel();
    int64_t at = 0;
    for (size_t i : small_) {
      const int64_t chunk = storage_[i].numel() / ranks;
      for (int64_t r = 0; r < ranks; ++r)
        if (r != rank) storage_[i].narrow(0, r * chunk, chunk).copy_(small_output_.narrow(0, r * total + at, chunk));
      at += chunk;
    }
  }
}

void SliceGather::finish() {
  if (pending()) wait_through(works_.size() - 1);
}

void SliceGather::pre_forward(torch::nn::Module& module) {
  if (!planned_) {
    if (std::find(trace_.begin(), trace_.end(), &module) == trace_.end()) trace_.push_back(&module);
    return;
  }
  if (!pending()) return;
  const std::vector<size_t>& own = own_params(module);
  if (!own.empty()) {
    size_t last = 0;
    for (size_t i : own) last = std::max(last, gather_of_[i]);
    wait_through(last);
  }
  // Transports that move data only inside their own calls (MPI) advance the rest meanwhile.
  for (size_t g = next_wait_; g < works_.size(); ++g) works_[g]->test();
}

}  // namespace ds::zero
