#include "staged_tensor.hpp"

#include <ATen/ATen.h>

namespace ds::comm {

StagedTensor::StagedTensor(const at::Tensor& user, bool device_ok) : user_(user) {
  if (!device_ok)
    work_ = user.to(at::kCPU).contiguous();
  else
    work_ = user.contiguous();
}

void StagedTensor::copy_back() const {
  if (!work_.is_same(user_)) user_.copy_(work_);
}

}  // namespace ds::comm
