#include "staged_tensor.hpp"

#include <ATen/ATen.h>

namespace ds::comm {

StagedTensor::StagedTensor(const at::Tensor& user, at::Device device) : user_(user) {
  work_ = user.to(device).contiguous();
}

StagedTensor::StagedTensor(const at::Tensor& user, bool device_ok)
    : StagedTensor(user, device_ok ? user.device() : at::Device(at::kCPU)) {}

void StagedTensor::copy_back() const {
  if (!work_.is_same(user_)) user_.copy_(work_);
}

}  // namespace ds::comm
