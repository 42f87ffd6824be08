// OptimizerSwapper's pipelined reads against a plain in-memory reference: with every
// pipeline_read x pipeline_write choice, sub-groups read ahead (during the step, and the first
// ones' state during the first backward) or kept in memory from the step before (with their
// gradients staged in place) hand the kernel exactly the bytes the reference holds, step after
// step, up and down the shard, with gradient accumulation and with a file rewritten after the
// reads ahead were queued; each step's bytes are the closed form of what is not kept; and the
// files read back (with the kept sub-groups' unwritten values) are the reference's.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <random>
#include <vector>

#include "dstrain/runtime/remove_tree.hpp"
#include "dstrain/zero/buffer_sizes.hpp"
#include "dstrain/zero/optimizer_swapper.hpp"

namespace {

namespace fs = std::filesystem;
using ds::zero::OptimizerSwapper;

constexpr int64_t kShard = 10000;   // 10 sub-groups of 1024 elements, the last one 784
constexpr int64_t kSubGroup = 1024;

struct Scratch {
  std::string path = (fs::temp_directory_path() / ("dstrain_swap_pipeline_" + std::to_string(::getpid()))).string();
  Scratch() { fs::create_directories(path); }
  ~Scratch() { ds::remove_tree(path); }
};

struct Reference {
  std::vector<std::vector<float>> state{3, std::vector<float>(kShard, 0.0f)};  // master, exp_avg, exp_avg_sq
  std::vector<float> gradient = std::vector<float>(kShard, 0.0f);
};

// A backward's gradient ranges as the reducer hands them over: descending shard order, sizes that
// cut across pages and sub-groups.
void backward(OptimizerSwapper& swapper, Reference& ref, std::mt19937& rng, bool overwrite) {
  std::uniform_real_distribution<float> value(-1.0f, 1.0f);
  std::uniform_int_distribution<int64_t> size(1, 1500);
  for (int64_t end = kShard; end > 0;) {
    const int64_t count = std::min(end, size(rng));
    std::vector<float> values(static_cast<size_t>(count));
    for (float& v : values) v = value(rng);
    swapper.write_gradients(values.data(), end - count, count, overwrite);
    for (int64_t j = 0; j < count; ++j) {
      float& g = ref.gradient[static_cast<size_t>(end - count + j)];
      g = overwrite ? values[static_cast<size_t>(j)] : g + values[static_cast<size_t>(j)];
    }
    end -= count;
  }
}

}  // namespace

TEST_CASE("sub-groups read ahead hold the bytes of the files, with every pipelining choice", "[zero][swap]") {
  Scratch scratch;
  const bool pipeline_read = GENERATE(false, true);
  const bool pipeline_write = GENERATE(false, true);
  CAPTURE(pipeline_read, pipeline_write);
  OptimizerSwapper::Options options;
  options.nvme_path = scratch.path;
  options.names = {"master", "exp_avg", "exp_avg_sq"};
  options.shard_numel = kShard;
  options.sub_group_size = kSubGroup;
  options.pipeline_read = pipeline_read;
  options.pipeline_write = pipeline_write;
  const int slots = ds::zero::optimizer_swap_slots(pipeline_read, pipeline_write);
  options.buffer_count = 4 * slots;
  options.gradients = true;
  options.sum_of_squares = [](const float* v, int64_t n) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += double(v[i]) * v[i];
    return sum;
  };
  options.aio = ds::io::AioSettings{8192, 4, false, true, 2};
  OptimizerSwapper swapper(options);
  REQUIRE(swapper.sub_groups() == 10);

  Reference ref;
  swapper.fill(0, [&](int64_t offset, int64_t count, float* dst) {
    for (int64_t j = 0; j < count; ++j) dst[j] = ref.state[0][static_cast<size_t>(offset + j)] = 0.001f * float(offset + j);
  });
  std::mt19937 rng(42);
  constexpr int64_t kBlock = kSubGroup * 4;  // every sub-group's bytes in a file (the last one padded)
  const int64_t n = swapper.sub_groups();
  swapper.take_stats();
  for (int step = 0; step < 6; ++step) {
    CAPTURE(step);
    // Up the shard on even steps, down on odd ones; each starts with the sub-groups the step
    // before kept, or (the first step, pipeline_read) those read during its backward.
    REQUIRE(swapper.step_order(0) == (step % 2 == 0 ? 0 : n - 1));
    int64_t held = step > 0 || pipeline_read ? std::min<int64_t>(slots, n) : 0;
    int64_t reads = step == 0 ? held * 3 * kBlock : 0, writes = 0;
    backward(swapper, ref, rng, true);
    ds::io::SwapStats stats = swapper.take_stats();
    CHECK(stats.read_bytes == reads);  // nothing but the first backward's reads ahead
    writes += (n - held) * kBlock;  // the gradients not held go to the file
    if (step % 2 == 1) {  // a second micro-step, added to the first (each backward ends with its sum)
      swapper.finish_gradients();
      backward(swapper, ref, rng, false);
      reads += (n - held) * kBlock;  // read back before being added to
      writes += (n - held) * kBlock;
    }
    double squares = 0;
    for (float g : ref.gradient) squares += double(g) * g;
    CHECK(swapper.finish_gradients() == Approx(squares).epsilon(1e-12));
    if (step == 3) {
      // A checkpoint load rewrites part of sub-groups 0 and 1 after the slots were filled: they
      // are emptied (the gradients they held go to the file) and read again.
      std::vector<float> loaded(1500);
      for (size_t j = 0; j < loaded.size(); ++j) loaded[j] = ref.state[1][500 + j] = -float(j);
      swapper.write(1, 500, loaded.data(), static_cast<int64_t>(loaded.size()));
      writes += held * 4 * kBlock;  // their state, never written since the step before, and gradients
      held = 0;
    }
    reads += (n - held) * 4 * kBlock;  // the state and the gradient of each sub-group not held
    writes += (n - std::min<int64_t>(slots, n)) * 3 * kBlock;  // the last ones are kept unwritten
    for (int64_t k = 0; k < n; ++k) {
      const int64_t i = swapper.step_order(k);
      const OptimizerSwapper::SubGroup& g = swapper.swap_in(i);
      for (int64_t j = 0; j < g.numel; ++j) {
        const size_t at = static_cast<size_t>(g.offset + j);
        for (size_t k = 0; k < 3; ++k) REQUIRE(g.state[k][j] == ref.state[k][at]);
        REQUIRE(g.gradients[j] == ref.gradient[at]);
        // A stand-in for the kernel: every state changes, each element from its own index only.
        g.state[1][j] = ref.state[1][at] = 0.9f * g.state[1][j] + g.gradients[j];
        g.state[2][j] = ref.state[2][at] = g.state[2][j] + g.gradients[j] * g.gradients[j];
        g.state[0][j] = ref.state[0][at] = g.state[0][j] - 0.01f * g.state[1][j];
      }
      swapper.swap_out(i);
    }
    swapper.finish_step();
    stats += swapper.take_stats();
    CHECK(stats.read_bytes == reads);
    CHECK(stats.write_bytes == writes);
  }
  // The files hold the reference's last values.
  std::vector<float> values(kShard);
  for (size_t k = 0; k < 3; ++k) {
    swapper.read(k, 0, values.data(), kShard);
    CHECK(values == ref.state[k]);
  }
}
