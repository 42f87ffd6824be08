#include "placement.hpp"

#include <torch/cuda.h>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/rank_env.hpp"

namespace ds::app {

Placement placement_from(const nlohmann::json& block) {
  Placement placement;
  const nlohmann::json device = block.value("device", nlohmann::json("cpu"));
  if (device == "cuda") {
    const auto gpus = static_cast<int>(torch::cuda::device_count());
    if (gpus == 0)
      throw Error("dstrain.device is \"cuda\" but no GPU is visible (or LibTorch was built without CUDA)")
          .with_key("dstrain.device");
    placement.device = c10::Device(c10::kCUDA, static_cast<c10::DeviceIndex>(rank_env_from_environment().local_rank % gpus));
  } else if (device != "cpu") {
    throw Error("dstrain.device must be \"cpu\" or \"cuda\", got " + device.dump()).with_key("dstrain.device");
  }
  const nlohmann::json backend = block.value("backend", nlohmann::json(placement.device.is_cuda() ? "nccl" : "mpi"));
  if (backend != "mpi" && backend != "nccl")
    throw Error("dstrain.backend must be \"mpi\" or \"nccl\", got " + backend.dump()).with_key("dstrain.backend");
  placement.backend = backend.get<std::string>();
  return placement;
}

}  // namespace ds::app
