// compressed_allreduce against MPI_Allreduce on the same float32 buffer, and the 1-bit kernels
// against memcpy. Run under mpirun; rank 0 prints one markdown table row per measurement.
//
//   onebit_bench allreduce --elements N --reps R --transport NAME
//       | op | transport | ranks | elements | median ms | bytes sent per rank | ...
//   onebit_bench kernels --elements N --reps R      (one rank)
//       | kernel | elements | median ms | GB/s | GB/s of memcpy |
//
// Bytes sent per rank are read from /proc/self/io (wchar: bytes this process handed to write and
// send calls). Over TCP (--mca btl tcp,self) every byte between ranks goes through such calls; over
// shared memory none does, so the table gives the payload each algorithm must move instead.
#include <mpi.h>

#include <ATen/ATen.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/comm/onebit_kernels.hpp"

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

struct Measurement {
  double median_ms;
  int64_t bytes_sent_per_call;  // the most any rank sent, per call
};

// Times `call` on every rank; a repetition's time is the slowest rank's.
Measurement measure(MPI_Comm comm, int reps, const std::function<void()>& call) {
  call();  // warm-up: first-touch of buffers, connection setup
  std::vector<double> times;
  const int64_t bytes_before = bytes_written_by_this_process();
  for (int rep = 0; rep < reps; ++rep) {
    MPI_Barrier(comm);
    const auto start = Clock::now();
    call();
    double ms = std::chrono::duration<double, std::milli>(Clock::now() - start).count(), slowest = 0;
    MPI_Allreduce(&ms, &slowest, 1, MPI_DOUBLE, MPI_MAX, comm);
    times.push_back(slowest);
  }
  int64_t sent = (bytes_written_by_this_process() - bytes_before) / reps, most = 0;
  MPI_Allreduce(&sent, &most, 1, MPI_INT64_T, MPI_MAX, comm);
  return {median(times), most};
}

int run_allreduce(ds::comm::Backend* world, int64_t elements, int reps, const std::string& transport) {
  const int ranks = world->world_size();
  const auto layout = ds::comm::onebit::layout_for(elements, ranks);
  at::Tensor buffer = at::rand({elements}) - 0.5;
  at::Tensor worker_error = at::zeros({layout.padded}), server_error = at::zeros({layout.chunk});

  // The baseline is MPI itself on the world's ranks, without dstrain's argument check.
  const Measurement plain = measure(MPI_COMM_WORLD, reps, [&] {
    MPI_Allreduce(MPI_IN_PLACE, buffer.data_ptr<float>(), static_cast<int>(elements), MPI_FLOAT, MPI_SUM,
                  MPI_COMM_WORLD);
  });
  buffer.uniform_(-0.5, 0.5);
  const Measurement compressed = measure(MPI_COMM_WORLD, reps, [&] {
    world->compressed_allreduce(buffer, worker_error, server_error, 0);
  });

  if (world->rank() == 0) {
    // What each rank must send at least: MPI_Allreduce's ring moves 2(p-1)/p of the buffer; the
    // compressed exchange sends p-1 packed chunks and p-1 scales, twice.
    const int64_t plain_payload = 2 * (ranks - 1) * (elements * 4 / ranks);
    const int64_t compressed_payload = 2 * (ranks - 1) * (layout.chunk_bytes() + 4);
    const bool tcp = transport == "tcp";
    const int64_t plain_bytes = tcp ? plain.bytes_sent_per_call : plain_payload;
    const int64_t compressed_bytes = tcp ? compressed.bytes_sent_per_call : compressed_payload;
    std::printf("| %s | %d | %lld | %.1f | %.1f | %.2f | %.1f | %.1f | 1/%.1f |\n", transport.c_str(), ranks,
                static_cast<long long>(elements), plain.median_ms, compressed.median_ms,
                plain.median_ms / compressed.median_ms, plain_bytes / 1e6, compressed_bytes / 1e6,
                double(plain_bytes) / double(std::max<int64_t>(1, compressed_bytes)));
  }
  return 0;
}

// Effective bandwidth: bytes read plus bytes written per second, as memcpy's.
int run_kernels(int64_t n, int reps) {
  namespace onebit = ds::comm::onebit;
  std::vector<float> x(n), error(n), out(n), copy(n);
  std::vector<uint8_t> packed(onebit::packed_bytes(n)), served(onebit::packed_bytes(n / 4));
  for (int64_t i = 0; i < n; ++i) x[i] = float((i * 2654435761u) % 1000) / 500.0f - 1.0f;
  const std::vector<float> weights = {0.25f, 0.5f, 0.125f, 1.0f};

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
  const double f = 4.0 * n, b = n / 8.0;  // bytes of the floats, of the packed signs
  const double memcpy_ms = time([&] { std::memcpy(copy.data(), x.data(), n * sizeof(float)); });
  const double memcpy_gbs = 2 * f / memcpy_ms / 1e6;
  auto row = [&](const char* name, double ms, double bytes) {
    std::printf("| %s | %lld | %.1f | %.2f | %.2f |\n", name, static_cast<long long>(n), ms, bytes / ms / 1e6, memcpy_gbs);
  };
  row("memcpy", memcpy_ms, 2 * f);
  row("pack_signs", time([&] { onebit::pack_signs(x.data(), n, packed.data()); }), f + b);
  row("unpack_signs", time([&] { onebit::unpack_signs(packed.data(), n, 0.5f, out.data()); }), b + f);
  // Pass 1 reads x and error; pass 2 reads them again and writes error and the signs.
  row("compress_with_feedback", time([&] { onebit::compress_with_feedback(x.data(), error.data(), n, packed.data()); }),
      5 * f + b);
  // The server of 4 ranks: reads 4 chunks of n/4 signs and its error twice, writes error and signs.
  row("compress_sum_with_feedback (4 chunks)", time([&] {
        onebit::compress_sum_with_feedback(packed.data(), weights.data(), 4, error.data(), n / 4, served.data());
      }),
      2 * b + 3 * f / 4 + b / 4);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"1-bit compressed allreduce benchmark"};
  int64_t elements = 16 << 20;
  int reps = 5;
  std::string transport = "shm";
  app.add_option("--elements", elements, "float32 elements per buffer");
  app.add_option("--reps", reps, "timed repetitions (after one warm-up)");
  app.add_option("--transport", transport, "label of the transport mpirun was given: shm or tcp");
  app.require_subcommand(1);
  app.fallthrough();
  auto* allreduce = app.add_subcommand("allreduce", "compressed_allreduce vs MPI_Allreduce");
  auto* kernels = app.add_subcommand("kernels", "the 1-bit kernels vs memcpy, one process");
  CLI11_PARSE(app, argc, argv);

  return ds::comm::run_or_abort([&] {
    auto world = ds::comm::init_distributed("mpi");
    int code = 0;
    if (allreduce->parsed()) code = run_allreduce(world.get(), elements, reps, transport);
    if (kernels->parsed() && ds::comm::get_rank() == 0) code = run_kernels(elements, reps);
    ds::comm::finalize();
    return code;
  });
}
