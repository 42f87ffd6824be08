// Where a rank sits when the world runs several copies (replicas) of one pipeline side by side:
// world = stages x replicas, laid out stage-major as DeepSpeed's PipeDataParallelTopology does,
//   rank = stage * replicas + replica,
// so the replicas of one stage, which all-reduce every gradient, hold consecutive ranks (one node,
// when ranks fill nodes in order), while a pipeline's neighbours, which exchange only activations,
// sit `replicas` ranks apart.
#pragma once

namespace ds::pipe {

class PipelineGrid {
 public:
  // Throws ds::Error (key pipeline.stages) unless stages >= 1 divides world_size.
  PipelineGrid(int world_size, int stages, int rank);

  int stages() const { return stages_; }
  int replicas() const { return replicas_; }
  int stage() const { return stage_; }
  int replica() const { return replica_; }
  bool is_first_stage() const { return stage_ == 0; }
  bool is_last_stage() const { return stage_ == stages_ - 1; }
  int rank_of(int stage, int replica) const { return stage * replicas_ + replica; }

 private:
  int stages_;
  int replicas_;
  int stage_;
  int replica_;
};

}  // namespace ds::pipe
