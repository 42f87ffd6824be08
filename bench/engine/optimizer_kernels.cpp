// The fused optimizer kernels against memcpy on the same buffers (bytes touched per second) and
// against torch::optim's tensor-op step on the same flat shard (the engine's optimizer before the
// kernels: the same op sequence). Medians of --repeats timed calls after one warm-up call each.
//   optimizer_kernels [--numel N] [--repeats R] [--threads T]
#include <CLI/CLI.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <cstring>
#include <functional>

#include "dstrain/engine/kernels/fused_optimizer.hpp"

#include "median_time.hpp"

int main(int argc, char** argv) {
  CLI::App app{"fused optimizer kernels vs memcpy and vs torch::optim tensor ops"};
  int64_t numel = 25'000'000;
  int repeats = 7;
  int threads = 0;
  app.add_option("--numel", numel, "elements of the flat shard (default 25M)");
  app.add_option("--repeats", repeats, "timed calls per kernel");
  app.add_option("--threads", threads, "intra-op threads (default: LibTorch's)");
  CLI11_PARSE(app, argc, argv);
  if (threads > 0) at::set_num_threads(threads);

  torch::manual_seed(1);
  at::Tensor p = torch::randn({numel}) * 0.02, g = torch::randn({numel}) * 1e-3;
  at::Tensor m = torch::zeros({numel}), v = torch::zeros({numel});
  float *pp = p.data_ptr<float>(), *gp = g.data_ptr<float>(), *mp = m.data_ptr<float>(), *vp = v.data_ptr<float>();
  const double bytes = 4.0 * static_cast<double>(numel);

  // memcpy of m into v, split over the same threads as the kernels: read + write of one buffer.
  const double copy_s = median_seconds(repeats, [&] {
    at::parallel_for(0, numel, 1 << 16, [&](int64_t b, int64_t e) { std::memcpy(vp + b, mp + b, 4 * (e - b)); });
  });
  const double copy_bw = 2 * bytes / copy_s;

  ds::fused::AdamStep adam;
  adam.weight_decay = 0.01;
  adam.bias_correction1 = 0.1;
  adam.bias_correction2 = 0.001;
  // Adam reads p, g, m, v and writes p, m, v.
  const double adam_s = median_seconds(repeats, [&] { ds::fused::adam(pp, gp, mp, vp, numel, adam); });
  ds::fused::SgdStep sgd;
  sgd.momentum = 0.9;
  sgd.weight_decay = 0.01;
  // SGD with momentum reads p, g, buf and writes p, buf.
  const double sgd_s = median_seconds(repeats, [&] { ds::fused::sgd(pp, gp, mp, numel, sgd); });
  // The norm reads g.
  const double norm_s = median_seconds(repeats, [&] { (void)ds::fused::sum_of_squares(gp, numel); });

  at::Tensor param = p.clone().set_requires_grad(true);
  param.mutable_grad() = g.clone();
  torch::optim::AdamW tensor_adam({param}, torch::optim::AdamWOptions(1e-3).weight_decay(0.01));
  const double tensor_adam_s = median_seconds(repeats, [&] { tensor_adam.step(); });
  at::Tensor sgd_param = p.clone().set_requires_grad(true);
  sgd_param.mutable_grad() = g.clone();
  torch::optim::SGD tensor_sgd({sgd_param}, torch::optim::SGDOptions(1e-3).momentum(0.9).weight_decay(0.01));
  const double tensor_sgd_s = median_seconds(repeats, [&] { tensor_sgd.step(); });
  const double tensor_norm_s =
      median_seconds(repeats, [&] { (void)g.pow(2).sum().to(torch::kDouble).item<double>(); });

  std::printf("flat shard of %lld fp32 elements, %d threads, medians of %d calls\n", static_cast<long long>(numel),
              at::get_num_threads(), repeats);
  std::printf("%-22s %10s %12s %12s %14s %10s\n", "kernel", "ms", "GB/s", "of memcpy", "tensor-op ms", "speed-up");
  auto row = [&](const char* name, double s, double touched, double tensor_s) {
    const double bw = touched / s;
    if (tensor_s > 0)
      std::printf("%-22s %10.2f %12.2f %11.0f%% %14.2f %9.2fx\n", name, 1e3 * s, bw / 1e9, 100 * bw / copy_bw,
                  1e3 * tensor_s, tensor_s / s);
    else
      std::printf("%-22s %10.2f %12.2f %11.0f%% %14s %10s\n", name, 1e3 * s, bw / 1e9, 100 * bw / copy_bw, "", "");
  };
  row("memcpy", copy_s, 2 * bytes, 0);
  row("adamw (fused)", adam_s, 7 * bytes, tensor_adam_s);
  row("sgd momentum (fused)", sgd_s, 5 * bytes, tensor_sgd_s);
  row("sum of squares (fused)", norm_s, bytes, tensor_norm_s);
  return 0;
}
