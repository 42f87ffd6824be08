// dstrain.gpu_memory_limit: a cap on what LibTorch's CUDA allocator hands out on this rank's GPU,
// bytes or a size string ("8GB", "2GiB"; parse_memory_size), e.g. to show on a large card that a
// model trains with ZeRO-Offload which does not fit that much memory without it. Applied at trainer
// start as the allocator's memory fraction (limit / the device's total); past it an allocation fails
// with CUDA's out-of-memory error. Ignored, with a log line, when the model runs on the CPU.
#pragma once

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>

namespace ds::app {

void apply_gpu_memory_limit(const nlohmann::json& dstrain_block, c10::Device device);

// The CUDA allocator's most bytes allocated at once on `device` since the process started, which
// the limit caps; none for the CPU.
std::optional<int64_t> gpu_max_allocated(c10::Device device);

}  // namespace ds::app
