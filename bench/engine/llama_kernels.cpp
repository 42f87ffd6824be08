// The Llama's kernels against the plain LibTorch versions they replace, on the same tensors:
// ds::models::rms_norm vs rms_norm_ops (HF's LlamaRMSNorm in tensor ops) and apply_rotary_ (in
// place) vs apply_rotary_ops (HF's rotate_half), forward and forward + backward. Each repeat times
// ours then plain, alternated, so that both see the same machine state; medians of --repeats.
// The backward of RoPE starts from a fresh non-leaf copy of x for both (a projection's output in
// the model), counted in both.
//   llama_kernels [--rows N] [--hidden C] [--heads H] [--repeats R] [--threads T]
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <utility>
#include <vector>

#include "dstrain/engine/host_policy.hpp"
#include "dstrain/engine/models/rms_norm.hpp"
#include "dstrain/engine/models/rotary.hpp"

namespace {

double seconds_of(const std::function<void()>& fn) {
  const auto start = std::chrono::steady_clock::now();
  fn();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

double median(std::vector<double> times) {
  std::sort(times.begin(), times.end());
  return times[times.size() / 2];
}

// Median milliseconds of ours and of plain, timed alternately after one warm-up call each.
std::pair<double, double> alternated_ms(int repeats, const std::function<void()>& ours,
                                        const std::function<void()>& plain) {
  ours();
  plain();
  std::vector<double> a, b;
  for (int r = 0; r < repeats; ++r) {
    a.push_back(seconds_of(ours));
    b.push_back(seconds_of(plain));
  }
  return {1e3 * median(a), 1e3 * median(b)};
}

void row(const char* what, std::pair<double, double> ms) {
  std::printf("%-28s %10.3f %10.3f %8.2f\n", what, ms.first, ms.second, ms.second / ms.first);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"the Llama's fused RMSNorm and in-place RoPE vs plain LibTorch"};
  int64_t batch = 8, sequence = 128, hidden = 1024, heads = 16;
  int repeats = 31;
  int threads = 1;
  app.add_option("--batch", batch, "sequences (default 8)");
  app.add_option("--sequence", sequence, "positions per sequence (default 128)");
  app.add_option("--hidden", hidden, "hidden size (default 1024)");
  app.add_option("--heads", heads, "attention heads (default 16: head size 64)");
  app.add_option("--repeats", repeats, "timed calls per kernel");
  app.add_option("--threads", threads, "intra-op threads (default 1: one rank per core)");
  CLI11_PARSE(app, argc, argv);
  ds::apply_host_policy();
  at::set_num_threads(threads);

  torch::manual_seed(0);
  const at::Tensor x = torch::randn({batch, sequence, hidden});
  const at::Tensor dy = torch::randn({batch, sequence, hidden});
  const at::Tensor weight = torch::rand({hidden}) + 0.5;
  const auto rope = ds::models::rotary_tables(hidden / heads, 10000.0, sequence);

  const auto norm_grads = [&](bool fused) {
    const at::Tensor leaf = x.detach().requires_grad_(true), w = weight.detach().requires_grad_(true);
    const at::Tensor y = fused ? ds::models::rms_norm(leaf, w, 1e-6) : ds::models::rms_norm_ops(leaf, w, 1e-6);
    return torch::autograd::grad({y}, {leaf, w}, {dy});
  };
  const auto rope_grads = [&](bool fused) {
    const at::Tensor leaf = x.detach().requires_grad_(true);
    const at::Tensor projected = leaf.clone();
    const at::Tensor y = fused ? ds::models::apply_rotary_(projected, heads, rope)
                               : ds::models::apply_rotary_ops(projected, heads, rope);
    return torch::autograd::grad({y}, {leaf}, {dy});
  };
  at::Tensor rotated = x.clone();

  std::printf("x [%lld, %lld, %lld], %lld heads, %d thread(s), medians of %d alternated calls\n",
              static_cast<long long>(batch), static_cast<long long>(sequence), static_cast<long long>(hidden),
              static_cast<long long>(heads), threads, repeats);
  std::printf("%-28s %10s %10s %8s\n", "", "ours ms", "plain ms", "speed-up");
  row("RMSNorm forward", alternated_ms(repeats, [&] { ds::models::rms_norm(x, weight, 1e-6); },
                                       [&] { ds::models::rms_norm_ops(x, weight, 1e-6); }));
  row("RMSNorm forward + backward", alternated_ms(repeats, [&] { norm_grads(true); }, [&] { norm_grads(false); }));
  row("RoPE forward", alternated_ms(repeats, [&] { ds::models::apply_rotary_(rotated, heads, rope); },
                                    [&] { ds::models::apply_rotary_ops(x, heads, rope); }));
  row("RoPE forward + backward", alternated_ms(repeats, [&] { rope_grads(true); }, [&] { rope_grads(false); }));
  return 0;
}
