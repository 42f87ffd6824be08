// ds::ModelWeights: the model's side of a step, refreshed from the master. Every placement of the
// master (optimizer_partition.hpp) hands it master ranges; it puts them in the model's weights,
// where they are held: stage 3's partitions (the ParameterCoordinator's, or its swap file) or, at
// stages 0-2, every parameter whole, each rank's piece all-gathered a window at a time.
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

#include "dstrain/comm/backend.hpp"
#include "dstrain/zero/param_coordinator.hpp"
#include "dstrain/zero/shard_layout.hpp"

namespace ds {

class HostOffload;

// Stages 1-2 refresh the weights from the master shard by all-gathering this many shard elements
// per partition at a time: allgather_bucket_size over the partitions, and at most 4M elements in
// all (16 MB of fp32): DeepSpeed's default (5e8) would put a second copy of the whole model in one
// temporary (400 MB at 100M parameters, most of stage 1-2's peak above the model state).
int64_t refresh_gather_width(int64_t allgather_bucket_size, int partitions);

class ModelWeights {
 public:
  // coordinator: stage 3's (null below); allgather_bucket_size sizes the stage 1-2 window.
  ModelWeights(std::vector<at::Tensor>& params, const zero::ShardLayout& layout, comm::Backend& group,
               zero::ParameterCoordinator* coordinator, int64_t allgather_bucket_size);

  // ZeRO-Offload: ranges come from the host, staged in its (pinned) buffers and copied on its side
  // stream; finish() then makes the device wait for those copies.
  void stage_through(HostOffload* host) { host_ = host; }

  // Takes the new master values of shard elements [shard_offset, + values.numel()) (fp32) into the
  // model: stage 3's partition, or (gathered across the partitions at stages 1-2) each parameter's
  // elements. Collective at stages 1-2 on several ranks.
  void refresh_range(const at::Tensor& values, int64_t shard_offset);
  // Once every range was taken: the copies to the device waited for, stage 3's persistent
  // parameters gathered again.
  void finish();

  // Bytes of the weights as held: stage 3's (coordinator) or every parameter's.
  int64_t bytes() const;
  zero::ParameterCoordinator* coordinator() const { return coordinator_; }
  int64_t gather_width() const { return width_; }

 private:
  std::vector<at::Tensor>& params_;
  const zero::ShardLayout& layout_;
  comm::Backend& group_;
  zero::ParameterCoordinator* coordinator_;
  int64_t width_;
  HostOffload* host_ = nullptr;
};

}  // namespace ds
