// HostOffload (ZeRO-Offload's host side) on CPU tensors, where every copy is a plain copy_: the
// reducer's results replace or add to their ranges of the host gradient shard, as a plain sum of
// the micro-steps' gradients does; staged additions count in bytes() until gradients() applies them.
#include <torch/torch.h>

#include <catch2/catch.hpp>

#include "dstrain/engine/partition/host_offload.hpp"

namespace {

// The reducer's order: ranges of one backward in descending shard order, covering the shard.
void deliver(ds::HostOffload& offload, const at::Tensor& gradient, bool overwrite) {
  offload.take_gradients(gradient.narrow(0, 6, 4).clone(), 6, overwrite);
  offload.take_gradients(gradient.narrow(0, 2, 4).clone(), 2, overwrite);
  offload.take_gradients(gradient.narrow(0, 0, 2).clone(), 0, overwrite);
}

}  // namespace

TEST_CASE("HostOffload: overwritten ranges, then added ranges, give the micro-steps' sum", "[host_offload]") {
  torch::manual_seed(3);
  ds::HostOffload offload(10, at::Device(at::kCPU), /*pin_memory=*/true);
  const at::Tensor first = torch::randn({10}), second = torch::randn({10}), third = torch::randn({10});

  deliver(offload, first, /*overwrite=*/true);
  CHECK(offload.bytes() == 10 * 4);  // overwrites land in the shard itself
  deliver(offload, second, /*overwrite=*/false);
  CHECK(offload.bytes() == 2 * 10 * 4);  // additions wait in staging copies
  CHECK(torch::equal(offload.gradients(), first + second));
  CHECK(offload.bytes() == 10 * 4);

  // The next step's first backward overwrites whatever the shard held.
  deliver(offload, third, /*overwrite=*/true);
  CHECK(torch::equal(offload.gradients(), third));
}

TEST_CASE("HostOffload: host buffers, and copies to the model's device", "[host_offload]") {
  ds::HostOffload offload(4, at::Device(at::kCPU), /*pin_memory=*/true);
  const at::Tensor staging = offload.host_empty(6, at::kBFloat16);
  CHECK(staging.numel() == 6);
  CHECK(staging.scalar_type() == at::kBFloat16);
  CHECK_FALSE(staging.is_pinned());  // nothing to pin for a model on the CPU

  const at::Tensor source = torch::arange(6, at::kFloat).to(at::kBFloat16);
  at::Tensor model = torch::zeros({8}, at::kBFloat16);
  offload.copy_to_device(model.narrow(0, 1, 6), source);
  offload.finish_copies_to_device();
  CHECK(torch::equal(model.narrow(0, 1, 6), source));
  CHECK(model[0].item<float>() == 0);
  CHECK(model[7].item<float>() == 0);
}
