#include "dstrain/engine/models/kv_cache.hpp"

#include <torch/torch.h>

#include <cmath>
#include <limits>

namespace ds::models {

at::Tensor attend_cached(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v, at::Tensor& keys,
                         at::Tensor& values) {
  const int64_t B = q.size(0), H = q.size(1), t = q.size(2), D = q.size(3), KV = k.size(1);
  keys = keys.defined() ? torch::cat({keys, k}, 2) : k.contiguous();
  values = values.defined() ? torch::cat({values, v}, 2) : v.contiguous();
  const int64_t length = keys.size(2), first = length - t;
  const at::Tensor all_keys = KV == H ? keys : keys.repeat_interleave(H / KV, 1);
  const at::Tensor all_values = KV == H ? values : values.repeat_interleave(H / KV, 1);
  const at::Tensor future = torch::ones({t, length}, q.options().dtype(torch::kBool)).triu(first + 1);
  at::Tensor att = q.matmul(all_keys.transpose(-2, -1)) * (1.0 / std::sqrt(static_cast<double>(D)));
  att = att.masked_fill(future, -std::numeric_limits<double>::infinity()).softmax(-1);
  return att.matmul(all_values).transpose(1, 2).contiguous().view({B, t, H * D});
}

}  // namespace ds::models
