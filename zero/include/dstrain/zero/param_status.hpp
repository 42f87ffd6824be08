// ZeRO-3 parameter status, as DeepSpeed's ZeroParamStatus, and where to read it.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstddef>

namespace torch::nn {
class Module;
}

namespace ds::zero {

enum class ParamStatus { NotAvailable, Inflight, Available };
const char* to_string(ParamStatus status);

// Inside an engine's forward under ZeRO-3: the status of `param`; elsewhere (or for a parameter
// ZeRO-3 does not manage) Available, since a plain parameter always is.
ParamStatus param_status(const at::Tensor& param);
// Inside an engine's forward under ZeRO-3: how many external parameters `module` has.
size_t external_parameter_count(const torch::nn::Module& module);

}  // namespace ds::zero
