// The all-reduce the gradient reducer runs, alone and beside compute, under whichever transport
// DSTRAIN_ALLREDUCE chooses (comm/src/mpi_tcp_ring.hpp): dstrain's TCP ring or Open MPI's
// MPI_Iallreduce. Run under mpirun (bench/comm/run_allreduce_bench.sh puts it on simulated nodes and
// alternates the two); rank 0 prints one markdown table row.
//
//   allreduce_bench --mb 20 --buckets 5 --reps 5 --compute-ms 0
//       | transport | ranks | buckets x MB | compute ms | median s | GB/s per link | wait after compute ms |
//
// With --compute-ms C, each bucket is launched and then C ms of matrix products run (polling every
// bucket in flight with test() between products, as the reducer's gradient hooks do), as backward
// computes while its buckets reduce; the wait after compute is what the step would wait at its end.
// GB/s per link: 2(N-1)/N x the bytes reduced over the median time, the ring's share of each link.
#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "dstrain/comm/distributed.hpp"

namespace {

using Clock = std::chrono::steady_clock;

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

double seconds_since(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"all-reduce of the reducer's buckets, alone or beside compute"};
  double mb = 20;
  int buckets = 5, reps = 5;
  double compute_ms = 0;
  app.add_option("--mb", mb, "megabytes per bucket (float32)");
  app.add_option("--buckets", buckets, "buckets per repetition");
  app.add_option("--reps", reps, "repetitions (after one warm-up)");
  app.add_option("--compute-ms", compute_ms, "compute after launching each bucket");
  CLI11_PARSE(app, argc, argv);

  ds::comm::Backend& world = *ds::comm::init_distributed("mpi");
  const int64_t numel = static_cast<int64_t>(mb * 1e6 / 4);
  std::vector<at::Tensor> tensors;
  for (int b = 0; b < buckets; ++b) tensors.push_back(at::ones({numel}));
  const at::Tensor a = at::rand({256, 256}), c = at::rand({256, 256});

  std::vector<double> totals, waits;
  for (int rep = 0; rep <= reps; ++rep) {
    world.barrier();
    const auto start = Clock::now();
    std::vector<std::unique_ptr<ds::comm::Work>> works;
    for (int b = 0; b < buckets; ++b) {
      works.push_back(world.all_reduce_async(tensors[static_cast<size_t>(b)]));
      const auto computed = Clock::now();
      while (seconds_since(computed) * 1e3 < compute_ms) {
        at::mm(a, c);
        for (auto& w : works) w->test();
      }
    }
    const auto waiting = Clock::now();
    for (auto& w : works) w->wait();
    if (rep == 0) continue;  // warm-up
    waits.push_back(seconds_since(waiting));
    totals.push_back(seconds_since(start));
  }
  if (world.rank() == 0) {
    const char* choice = std::getenv("DSTRAIN_ALLREDUCE");
    const int n = world.world_size();
    const double t = median(totals);
    const double link_gb = 2.0 * (n - 1) / n * buckets * numel * 4 / 1e9;
    std::printf("| %s | %d | %d x %.0f | %.0f | %.3f | %.3f | %.0f |\n", choice ? choice : "auto", n, buckets, mb,
                compute_ms, t, link_gb / t, median(waits) * 1e3);
  }
  ds::comm::finalize();
}
