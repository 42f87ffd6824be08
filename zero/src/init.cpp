#include "dstrain/zero/init.hpp"

#include <ATen/ATen.h>
#include <algorithm>

#include "dstrain/comm/backend.hpp"
#include "dstrain/comm/distributed.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::zero {
namespace {
thread_local Init* t_active = nullptr;

at::ScalarType model_dtype(const Config& config) {
  if (config.bf16().enabled) return at::kBFloat16;
  if (config.fp16().enabled) return at::kHalf;
  return at::kFloat;
}
}  // namespace

Init::Init(const Config& config, std::shared_ptr<comm::Backend> group) {
  if (config.zero_optimization().stage != 3) return;
  group_ = group ? std::move(group) : comm::init_distributed("mpi");
  if (group_->world_size() == 1) return;
  enabled_ = true;
  dtype_ = model_dtype(config);
  persistence_threshold_ = config.zero_optimization().stage3_param_persistence_threshold;
  previous_ = t_active;
  t_active = this;
}

Init::~Init() {
  if (enabled_) t_active = previous_;
}

Init* Init::active() { return t_active; }

void Init::partition(torch::nn::Module& module) {
  if (!enabled_) return;
  at::NoGradGuard no_grad;
  const int ranks = group_->world_size();
  for (at::Tensor& param : module.parameters()) {
    if (!param.requires_grad() || is_partitioned(param)) continue;
    at::Tensor whole = param.detach().to(dtype_).contiguous();
    group_->broadcast(whole, 0);
    const int64_t numel = whole.numel();
    const int64_t chunk = (numel + ranks - 1) / ranks;
    if (numel <= persistence_threshold_ || chunk == numel) {
      param.set_data(whole);
      continue;
    }
    at::Tensor mine = at::zeros({chunk}, whole.options());
    const int64_t begin = std::min<int64_t>(group_->rank() * chunk, numel);
    const int64_t valid = std::min<int64_t>(chunk, numel - begin);
    if (valid > 0) mine.narrow(0, 0, valid).copy_(whole.view({-1}).narrow(0, begin, valid));
    whole = at::Tensor();  // freed before the next parameter is broadcast
    param.set_data(mine.as_strided(param.sizes(), std::vector<int64_t>(param.dim(), 0)));
  }
}

void partition_built(torch::nn::Module& module) {
  if (Init* init = Init::active()) init->partition(module);
}

bool is_partitioned(const at::Tensor& param) {
  if (param.numel() <= 1) return false;
  for (int64_t stride : param.strides())
    if (stride != 0) return false;
  return true;
}

at::Tensor partition_chunk(const at::Tensor& param) {
  if (!is_partitioned(param)) throw Error("partition_chunk: the parameter was not built partitioned");
  const int64_t chunk = static_cast<int64_t>(param.storage().nbytes()) / param.element_size();
  return at::empty({0}, param.options().requires_grad(false)).set_(param.storage(), 0, {chunk}, {1});
}

}  // namespace ds::zero
