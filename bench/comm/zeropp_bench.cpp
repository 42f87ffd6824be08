// ZeRO++'s quantized collectives against the plain fp32 ones on the same buffers: quantized_all_gather
// vs all_gather_into (qwZ) and quantized_reduce_scatter vs reduce_scatter_into (qgZ). Run under
// mpirun; rank 0 prints one markdown table row per measurement:
//
//   zeropp_bench --op all_gather|reduce_scatter --elements N --bits 8|4 --reps R --transport NAME
//       | op | transport | ranks | nodes | elements | bits | plain ms | quantized ms | plain GB/s |
//       | quantized GB/s | speed-up | plain MB sent/rank | quantized MB sent/rank |
//
// elements: the whole fp32 buffer (gathered, or reduced before the scatter); GB/s is its payload,
// 4·elements bytes, over the median time. The two versions run alternately, one warm-up each, and a
// repetition's time is the slowest rank's. Nodes are consecutive ranks, --per-node of them (default:
// OMPI_COMM_WORLD_LOCAL_SIZE, the hosts mpirun placed ranks on). Bytes sent per rank: over TCP what
// the process handed to write/send calls (/proc/self/io wchar, the most any rank sent), otherwise the
// payload the algorithm must move (ring: (n−1)/n of the buffer; quantized: n−1 records).
//
//   zeropp_bench --op kernels --elements N --bits 8|4 --reps R       (rank 0, one thread)
//       | kernel | bits | elements | median ms | GB/s of fp32 |
#include <mpi.h>

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/comm/quantized_collectives.hpp"

namespace {

using Clock = std::chrono::steady_clock;

int64_t bytes_written_by_this_process() {
  std::ifstream io("/proc/self/io");
  std::string key;
  int64_t value = 0;
  while (io >> key >> value)
    if (key == "wchar:") return value;
  return 0;
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : (values[mid - 1] + values[mid]) / 2;
}

struct Version {
  std::function<void()> call;
  std::vector<double> ms;  // the slowest rank's, per repetition
  int64_t bytes = 0;       // this rank's wchar over the timed calls
};

void time_once(Version& version) {
  MPI_Barrier(MPI_COMM_WORLD);
  const int64_t before = bytes_written_by_this_process();
  const auto start = Clock::now();
  version.call();
  double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count(), slowest = 0;
  version.bytes += bytes_written_by_this_process() - before;
  MPI_Allreduce(&ms, &slowest, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
  version.ms.push_back(slowest);
}

int64_t most_sent_per_call(const Version& version, int reps) {
  int64_t sent = version.bytes / reps, most = 0;
  MPI_Allreduce(&sent, &most, 1, MPI_INT64_T, MPI_MAX, MPI_COMM_WORLD);
  return most;
}

// The kernels on one thread, as GB/s of fp32 values handled (4 bytes per value), against memcpy's.
void run_kernels(int64_t n, int bits, int reps) {
  namespace quant = ds::comm::quant;
  const quant::Layout layout = quant::layout_for(n, bits);
  std::vector<float> x(n), out(n, 0.0f), copy(n);
  std::vector<uint8_t> record(layout.bytes());
  for (int64_t i = 0; i < n; ++i) x[i] = float((i * 2654435761u) % 1000) / 500.0f - 1.0f;
  auto time = [&](const std::function<void()>& body) {
    body();
    std::vector<double> ms;
    for (int rep = 0; rep < reps; ++rep) {
      const auto start = Clock::now();
      body();
      ms.push_back(std::chrono::duration<double, std::milli>(Clock::now() - start).count());
    }
    return median(ms);
  };
  auto row = [&](const char* name, double ms) {
    std::printf("| %s | int%d | %lld | %.2f | %.2f |\n", name, bits, static_cast<long long>(n), ms, 4.0 * n / ms / 1e6);
  };
  row("memcpy", time([&] { std::memcpy(copy.data(), x.data(), n * sizeof(float)); }));
  row("quantize", time([&] { quant::quantize(x.data(), layout, record.data()); }));
  row("dequantize", time([&] { quant::dequantize(record.data(), layout, out.data()); }));
  row("dequantize_add", time([&] { quant::dequantize_add(record.data(), layout, out.data()); }));
}

int ranks_per_node() {
  const char* local_size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  return local_size ? std::max(1, std::atoi(local_size)) : 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"ZeRO++ quantized all-gather and reduce-scatter benchmark"};
  std::string op = "all_gather";
  int64_t elements = 16 << 20;
  int bits = 8;
  int reps = 5;
  std::string transport = "shm";
  app.add_option("--op", op, "all_gather, reduce_scatter, or kernels (one rank, one thread)")
      ->check(CLI::IsMember({"all_gather", "reduce_scatter", "kernels"}));
  app.add_option("--elements", elements, "float32 elements of the whole buffer (a multiple of the ranks)");
  app.add_option("--bits", bits, "8 or 4")->check(CLI::IsMember({8, 4}));
  app.add_option("--reps", reps, "timed repetitions of each version (after one warm-up each)");
  app.add_option("--transport", transport, "label of the transport mpirun was given: shm or tcp");
  int per_node = ranks_per_node();
  app.add_option("--per-node", per_node, "ranks per node of the reduce-scatter (default: mpirun's ranks per host)");
  CLI11_PARSE(app, argc, argv);

  return ds::comm::run_or_abort([&] {
    auto world = ds::comm::init_distributed("mpi");
    if (op == "kernels") {
      if (world->rank() == 0) run_kernels(elements, bits, reps);
      ds::comm::finalize();
      return 0;
    }
    const int ranks = world->world_size();
    std::shared_ptr<ds::comm::Backend> node = world->split(world->rank() / per_node, world->rank());
    const int64_t m = elements / ranks;
    at::Tensor whole = at::rand({m * ranks}) - 0.5, shard = whole.narrow(0, world->rank() * m, m).clone();
    at::Tensor plain_out = at::empty_like(op == "all_gather" ? whole : shard),
               quantized_out = at::empty_like(plain_out);

    Version plain, quantized;
    if (op == "all_gather") {
      plain.call = [&] { world->all_gather_into(plain_out, shard); };
      quantized.call = [&] { ds::comm::quantized_all_gather(*world, quantized_out, shard, bits); };
    } else {
      plain.call = [&] { world->reduce_scatter_into(plain_out, whole); };
      quantized.call = [&] { ds::comm::quantized_reduce_scatter(*world, *node, quantized_out, whole, bits); };
    }
    plain.call();
    quantized.call();
    for (int rep = 0; rep < reps; ++rep) {
      Version& first = rep % 2 ? quantized : plain;
      Version& second = rep % 2 ? plain : quantized;
      time_once(first);
      time_once(second);
    }
    const int64_t plain_sent = most_sent_per_call(plain, reps), quantized_sent = most_sent_per_call(quantized, reps);

    if (world->rank() == 0) {
      const bool tcp = transport == "tcp";
      const int64_t record = ds::comm::quant::layout_for(m, bits).bytes();
      const int64_t plain_bytes = tcp ? plain_sent : (ranks - 1) * m * 4;
      const int64_t quantized_bytes = tcp ? quantized_sent : (ranks - 1) * record;
      const double plain_ms = median(plain.ms), quantized_ms = median(quantized.ms);
      const double payload = 4.0 * m * ranks;
      std::printf("| %s | %s | %d | %d | %lld | int%d | %.2f | %.2f | %.2f | %.2f | %.2f | %.1f | %.1f |\n", op.c_str(),
                  transport.c_str(), ranks, ranks / per_node, static_cast<long long>(m * ranks), bits, plain_ms,
                  quantized_ms, payload / plain_ms / 1e6, payload / quantized_ms / 1e6, plain_ms / quantized_ms,
                  plain_bytes / 1e6, quantized_bytes / 1e6);
    }
    ds::comm::finalize();
    return 0;
  });
}
