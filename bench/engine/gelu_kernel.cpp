// The GPT's tanh GELU (ds::models::gelu_tanh) against torch::gelu(x, "tanh") on the same tensor,
// forward and backward, with memcpy of the same bytes for scale. Medians of --repeats timed calls
// after one warm-up call each, under the engine's host policy (its allocator reuses the outputs' pages).
//   gelu_kernel [--numel N] [--repeats R] [--threads T]
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <functional>

#include "dstrain/engine/host_policy.hpp"
#include "dstrain/engine/models/gelu.hpp"

#include "median_time.hpp"

int main(int argc, char** argv) {
  CLI::App app{"the GPT's tanh GELU kernel vs torch::gelu"};
  int64_t numel = 1 << 20;  // one 3.3M-GPT layer's MLP activations: micro 8 x ctx 128 x 1024
  int repeats = 21;
  int threads = 1;
  app.add_option("--numel", numel, "elements (default 1M)");
  app.add_option("--repeats", repeats, "timed calls per kernel");
  app.add_option("--threads", threads, "intra-op threads (default 1: one rank per core)");
  CLI11_PARSE(app, argc, argv);
  ds::apply_host_policy();
  at::set_num_threads(threads);

  torch::manual_seed(0);
  const at::Tensor x = torch::randn({numel});
  const at::Tensor dy = torch::randn({numel});
  at::Tensor out = torch::empty({numel});
  const auto grad_of = [&](const std::function<at::Tensor(const at::Tensor&)>& gelu) {
    const at::Tensor leaf = x.detach().requires_grad_(true);
    return torch::autograd::grad({gelu(leaf)}, {leaf}, {dy})[0];
  };
  const auto ours = [](const at::Tensor& t) { return ds::models::gelu_tanh(t); };
  const auto torchs = [](const at::Tensor& t) { return torch::gelu(t, "tanh"); };

  const double copy = median_ms(repeats, [&] { std::memcpy(out.data_ptr<float>(), x.data_ptr<float>(), numel * 4); });
  const double fwd_ours = median_ms(repeats, [&] { ours(x); });
  const double fwd_torch = median_ms(repeats, [&] { torchs(x); });
  const double both_ours = median_ms(repeats, [&] { grad_of(ours); });
  const double both_torch = median_ms(repeats, [&] { grad_of(torchs); });
  std::printf("%lld elements, %d thread(s), medians of %d calls; memcpy of the same bytes %.3f ms\n",
              static_cast<long long>(numel), threads, repeats, copy);
  std::printf("%-20s %10s %10s %8s\n", "", "ours ms", "torch ms", "speed-up");
  std::printf("%-20s %10.3f %10.3f %8.2f\n", "forward", fwd_ours, fwd_torch, fwd_torch / fwd_ours);
  std::printf("%-20s %10.3f %10.3f %8.2f\n", "forward + backward", both_ours, both_torch, both_torch / both_ours);
  return 0;
}
