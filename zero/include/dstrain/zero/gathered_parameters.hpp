// GatheredParameters: every ZeRO-3 parameter whole for the life of the guard, to read full weights
// outside forward (DeepSpeed's deepspeed.zero.GatheredParameters, read-only: writes to the whole
// tensors are not scattered back). Collective: every rank of the group constructs it together.
//   { ds::zero::GatheredParameters whole(engine->parameter_coordinator()); use(model->parameters()); }
// A null coordinator (ZeRO stages 0-2, where parameters are always whole) makes it a no-op.
#pragma once

namespace ds::zero {

class ParameterCoordinator;

class GatheredParameters {
 public:
  explicit GatheredParameters(ParameterCoordinator* coordinator);
  ~GatheredParameters();
  GatheredParameters(const GatheredParameters&) = delete;
  GatheredParameters& operator=(const GatheredParameters&) = delete;

 private:
  ParameterCoordinator* coordinator_;
};

}  // namespace ds::zero
