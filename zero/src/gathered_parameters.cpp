#include "dstrain/zero/gathered_parameters.hpp"

#include "dstrain/zero/param_coordinator.hpp"

namespace ds::zero {

GatheredParameters::GatheredParameters(ParameterCoordinator* coordinator) : coordinator_(coordinator) {
  if (coordinator_) coordinator_->acquire_all();
}

GatheredParameters::~GatheredParameters() {
  if (coordinator_) coordinator_->release_acquired_all();
}

}  // namespace ds::zero
