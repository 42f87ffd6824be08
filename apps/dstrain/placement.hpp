// Where the trainer runs: the device of the model and every piece of its state, and the backend that
// moves bytes between ranks. Read from the config's "dstrain" block:
//   "device":  "cpu" (default) or "cuda" (this rank's GPU: local rank modulo the GPUs it sees)
//   "backend": "mpi" or "nccl"; default nccl on CUDA, mpi on the CPU. Several ranks sharing one GPU
//              need "mpi" (NCCL refuses two ranks on one device); MPI then stages through host memory.
#pragma once

#include <c10/core/Device.h>
#include <nlohmann/json.hpp>

#include <string>

namespace ds::app {

struct Placement {
  c10::Device device{c10::kCPU};
  std::string backend;
};

Placement placement_from(const nlohmann::json& dstrain_block);

}  // namespace ds::app
