// The GPT's causal attention kernel (ds::models::causal_attention) against the same attention in
// LibTorch tensor ops (causal_attention_ops: per-head matmul, masked softmax), forward and
// forward + backward, on one layer's q|k|v. Medians of --repeats timed calls after one warm-up
// call each, under the engine's host policy. The default shape is the 3.3M GPT's layer.
//   attention_kernel [--batch B] [--ctx T] [--heads H] [--head-size D] [--repeats R] [--threads N]
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <functional>

#include "dstrain/engine/host_policy.hpp"
#include "dstrain/engine/models/causal_attention.hpp"

#include "median_time.hpp"

int main(int argc, char** argv) {
  CLI::App app{"the GPT's causal attention kernel vs LibTorch tensor ops"};
  int64_t batch = 8, ctx = 128, heads = 4, head_size = 64;
  int repeats = 21;
  int threads = 1;
  app.add_option("--batch", batch, "micro-batch (default 8)");
  app.add_option("--ctx", ctx, "sequence length (default 128)");
  app.add_option("--heads", heads, "heads (default 4)");
  app.add_option("--head-size", head_size, "features per head (default 64)");
  app.add_option("--repeats", repeats, "timed calls per version");
  app.add_option("--threads", threads, "intra-op threads (default 1: one rank per core)");
  CLI11_PARSE(app, argc, argv);
  ds::apply_host_policy();
  at::set_num_threads(threads);

  torch::manual_seed(0);
  const int64_t C = heads * head_size;
  const at::Tensor qkv = torch::randn({batch, ctx, 3 * C});
  const at::Tensor dy = torch::randn({batch, ctx, C});
  using Attention = std::function<at::Tensor(const at::Tensor&)>;
  const Attention ours = [&](const at::Tensor& t) { return ds::models::causal_attention(t, heads, 0.0, true); };
  const Attention ops = [&](const at::Tensor& t) { return ds::models::causal_attention_ops(t, heads, 0.0, true); };
  const auto grad_of = [&](const Attention& attention) {
    const at::Tensor leaf = qkv.detach().requires_grad_(true);
    return torch::autograd::grad({attention(leaf)}, {leaf}, {dy})[0];
  };

  // Multiply-adds of the four products that tensor ops compute in full (q k^T and P v, twice each
  // in backward): the figure a GEMM rate is quoted against. The kernel skips the upper triangle.
  const double gflop = 2.0 * 2 * batch * heads * ctx * ctx * head_size / 1e9;
  const double fwd_ours = median_ms(repeats, [&] { ours(qkv); });
  const double fwd_ops = median_ms(repeats, [&] { ops(qkv); });
  const double both_ours = median_ms(repeats, [&] { grad_of(ours); });
  const double both_ops = median_ms(repeats, [&] { grad_of(ops); });
  std::printf("B %lld, T %lld, %lld heads of %lld, %d thread(s), medians of %d calls\n", static_cast<long long>(batch),
              static_cast<long long>(ctx), static_cast<long long>(heads), static_cast<long long>(head_size), threads,
              repeats);
  std::printf("%-20s %10s %10s %8s %14s\n", "", "ours ms", "ops ms", "speed-up", "ops GFLOP/s");
  std::printf("%-20s %10.3f %10.3f %8.2f %14.1f\n", "forward", fwd_ours, fwd_ops, fwd_ops / fwd_ours,
              gflop / fwd_ops * 1e3);
  std::printf("%-20s %10.3f %10.3f %8.2f %14.1f\n", "forward + backward", both_ours, both_ops, both_ops / both_ours,
              3 * gflop / both_ops * 1e3);
  return 0;
}
