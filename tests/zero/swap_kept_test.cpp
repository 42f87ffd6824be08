// The optimizer swapper between steps, with a parameter swapper reading its master file as the
// engine wires them: the sub-groups a step visits last stay in memory for the next one and are not
// written back until it has stepped them again, so between steps the files hold older values for
// them. Whatever reads the files sees the step's values all the same: a checkpoint's read(), a
// write() (which writes them back first), the parameter swapper (from the kept sub-groups, or its
// window read from the file with their values copied over it). Checked against the master the
// steps computed (a plain vector beside the swappers) and the file's bytes read with pread, step
// after step, up and down the shard.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <vector>

#include "dstrain/io/swap_units.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/remove_tree.hpp"
#include "dstrain/zero/optimizer_swapper.hpp"
#include "dstrain/zero/param_swapper.hpp"

namespace {

namespace fs = std::filesystem;
using ds::zero::OptimizerSwapper;
using ds::zero::ParamSwapper;

constexpr int64_t kShard = 10000;  // sub-groups 0..4 of 2048 elements, the last one 1808
constexpr int64_t kSubGroup = 2048;
constexpr int64_t kChunk = 700;    // parameter chunks: some inside a sub-group, some across two

struct Scratch {
  std::string path = (fs::temp_directory_path() / ("dstrain_swap_kept_" + std::to_string(::getpid()))).string();
  Scratch() { fs::create_directories(path); }
  ~Scratch() { ds::remove_tree(path); }
};

OptimizerSwapper::Options optimizer_options(const std::string& nvme, bool pipeline_write) {
  OptimizerSwapper::Options options;
  options.nvme_path = nvme;
  options.names = {"master", "exp_avg"};
  options.shard_numel = kShard;
  options.sub_group_size = kSubGroup;
  options.buffer_count = 9;  // 3 files x 3 slots
  options.pipeline_read = true;
  options.pipeline_write = pipeline_write;
  options.gradients = true;
  options.sum_of_squares = [](const float*, int64_t) { return 0.0; };
  options.aio = ds::io::AioSettings{8192, 4, false, true, 2};
  return options;
}

std::vector<ParamSwapper::Chunk> chunks() {
  std::vector<ParamSwapper::Chunk> all;
  for (int64_t offset = 0; offset < kShard; offset += kChunk) all.push_back({offset, std::min(kChunk, kShard - offset)});
  return all;
}

// The optimizer's master file as the engine hands it to the parameter swapper (it is a
// zero::MasterFile), but for what this test varies: unless `in_memory`, no chunk is served from the
// kept sub-groups; and no settle (each step here waits for its writes before the reads).
struct OptimizerMaster final : ds::zero::MasterFile {
  OptimizerMaster(OptimizerSwapper& optimizer, bool in_memory) : optimizer(optimizer), in_memory(in_memory) {}
  std::string master_path() const override { return optimizer.master_path(); }
  const float* master_in_memory(int64_t offset, int64_t count) const override {
    return in_memory ? optimizer.master_in_memory(offset, count) : nullptr;
  }
  void settle(int64_t, int64_t) override {}
  bool overlay_unwritten_master(int64_t offset, int64_t count, float* dst) const override {
    return optimizer.overlay_unwritten_master(offset, count, dst);
  }
  OptimizerSwapper& optimizer;
  bool in_memory;
};

// The parameter swapper reading its chunks from `master`.
std::unique_ptr<ParamSwapper> param_swapper(OptimizerMaster& master) {
  ParamSwapper::Options options;
  options.nvme_path = fs::path(master.optimizer.folder()).parent_path().string();
  options.master_file = &master;
  options.chunks = chunks();
  options.buffer_count = 2;
  options.buffer_size = kChunk;
  options.aio = ds::io::AioSettings{8192, 4, false, true, 2};
  return std::make_unique<ParamSwapper>(std::move(options));
}

// A backward (gradient `delta` everywhere) and a step (master += gradient) in the swapper's step
// order, each sub-group's new master values handed to `params` as the engine's refresh does.
void step(OptimizerSwapper& optimizer, ParamSwapper* params, std::vector<float>& master, float delta) {
  const std::vector<float> gradients(kShard, delta);
  optimizer.write_gradients(gradients.data(), 0, kShard, true);
  optimizer.finish_gradients();
  for (int64_t k = 0; k < optimizer.sub_groups(); ++k) {
    const int64_t i = optimizer.step_order(k);
    const OptimizerSwapper::SubGroup& g = optimizer.swap_in(i);
    for (int64_t j = 0; j < g.numel; ++j) {
      REQUIRE(g.state[0][j] == master[g.offset + j]);
      g.state[0][j] = master[g.offset + j] = master[g.offset + j] + g.gradients[j];
    }
    optimizer.swap_out(i);
    if (params) params->store_range(g.state[0], g.offset, g.numel);
  }
  optimizer.finish_step();
  if (params) params->finish_writes();
}

// The master file's values as another program reads them.
std::vector<float> file_values(const std::string& path) {
  std::vector<float> values(kShard);
  const int fd = ::open(path.c_str(), O_RDONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pread(fd, values.data(), kShard * 4, 0) == kShard * 4);
  ::close(fd);
  return values;
}

// Whether elements [begin, end) of the two agree.
bool same(const std::vector<float>& a, const std::vector<float>& b, int64_t begin, int64_t end) {
  return std::equal(a.begin() + begin, a.begin() + end, b.begin() + begin);
}

int64_t window_bytes(const ParamSwapper::Chunk& c) {
  return (ds::io::round_up(c.shard_offset + c.numel, 1024) - c.shard_offset / 1024 * 1024) * 4;
}

}  // namespace

TEST_CASE("kept sub-groups are written back once the next step has stepped them; read() and write() see them",
          "[zero][swap]") {
  Scratch scratch;
  const bool pipeline_write = GENERATE(false, true);
  CAPTURE(pipeline_write);
  OptimizerSwapper optimizer(optimizer_options(scratch.path, pipeline_write));
  std::vector<float> master(kShard);
  optimizer.fill(0, [&](int64_t offset, int64_t count, float* dst) {
    for (int64_t j = 0; j < count; ++j) dst[j] = master[offset + j] = 0.5f * float(offset + j);
  });
  const int64_t kept = pipeline_write ? 3 : 2;  // one per slot
  const std::vector<float> before = master;
  step(optimizer, nullptr, master, 1.0f);  // up the shard: the last sub-groups kept, unwritten
  std::vector<float> file = file_values(optimizer.path_of(0));
  CHECK(same(file, master, 0, (5 - kept) * kSubGroup));
  CHECK(same(file, before, (5 - kept) * kSubGroup, kShard));
  // A checkpoint's read of the master: the step's values.
  std::vector<float> read(kShard);
  optimizer.read(0, 0, read.data(), kShard);
  CHECK(read == master);

  step(optimizer, nullptr, master, 2.0f);  // down the shard: the first sub-groups kept
  file = file_values(optimizer.path_of(0));
  CHECK(same(file, master, kept * kSubGroup, kShard));
  CHECK(!same(file, master, 0, kept * kSubGroup));
  // A checkpoint's load rewrites part of them: the kept values go to the file first.
  const std::vector<float> loaded(100, -1.0f);
  optimizer.write(0, 50, loaded.data(), 100);
  std::copy(loaded.begin(), loaded.end(), master.begin() + 50);
  CHECK(file_values(optimizer.path_of(0)) == master);
  step(optimizer, nullptr, master, 3.0f);  // every sub-group read again, the rewritten one checked anew
  optimizer.read(0, 0, read.data(), kShard);
  CHECK(read == master);
}

TEST_CASE("the parameter swapper reads the step's master values: from the kept sub-groups, or from the file with theirs over it",
          "[zero][swap]") {
  Scratch scratch;
  OptimizerSwapper optimizer(optimizer_options(scratch.path, true));
  std::vector<float> master(kShard);
  optimizer.fill(0, [&](int64_t offset, int64_t count, float* dst) {
    for (int64_t j = 0; j < count; ++j) dst[j] = master[offset + j] = 0.25f * float(offset + j);
  });
  const std::vector<ParamSwapper::Chunk> all = chunks();

  SECTION("every chunk read from the file, the kept sub-groups' values copied over it") {
    OptimizerMaster file(optimizer, false);
    auto params = param_swapper(file);
    params->store_range(master.data(), 0, kShard);
    for (int s = 0; s < 4; ++s) {
      CAPTURE(s);
      step(optimizer, params.get(), master, float(s + 1));
      REQUIRE(file_values(optimizer.path_of(0)) != master);  // the file alone is behind
      params->take_stats();
      int64_t read_bytes = 0;
      for (size_t n = 0; n < all.size(); ++n) {
        const float* values = params->acquire(n);
        for (int64_t j = 0; j < all[n].numel; ++j) REQUIRE(values[j] == master[all[n].shard_offset + j]);
        params->release(n);
        read_bytes += window_bytes(all[n]);
      }
      CHECK(params->take_stats().read_bytes == read_bytes);
    }
  }

  SECTION("a chunk inside a kept sub-group comes from memory") {
    OptimizerMaster file(optimizer, true);
    auto params = param_swapper(file);
    params->store_range(master.data(), 0, kShard);
    for (int s = 0; s < 4; ++s) {
      CAPTURE(s);
      step(optimizer, params.get(), master, float(s + 1));
      params->take_stats();
      // Kept: the last three sub-groups the step visited (2-4 up the shard, 0-2 down).
      const int64_t first_kept = s % 2 == 0 ? optimizer.sub_groups() - 3 : 0;
      int64_t read_bytes = 0;
      for (size_t n = 0; n < all.size(); ++n) {
        const ParamSwapper::Chunk& c = all[n];
        const int64_t group = c.shard_offset / kSubGroup;
        const bool kept = group >= first_kept && group < first_kept + 3 && (c.shard_offset + c.numel - 1) / kSubGroup == group;
        const float* values = params->acquire(n);
        CHECK((values == optimizer.master_in_memory(c.shard_offset, c.numel)) == kept);
        for (int64_t j = 0; j < c.numel; ++j) REQUIRE(values[j] == master[c.shard_offset + j]);
        params->release(n);
        if (!kept) read_bytes += window_bytes(c);
      }
      CHECK(params->take_stats().read_bytes == read_bytes);
    }
  }
}

TEST_CASE("a swap file that fails mid-step, with sub-groups kept unwritten, ends the step with an error naming it",
          "[zero][swap]") {
  Scratch scratch;
  const bool pipeline_write = GENERATE(false, true);
  CAPTURE(pipeline_write);
  std::vector<float> master(kShard);
  {
    OptimizerSwapper optimizer(optimizer_options(scratch.path, pipeline_write));
    optimizer.fill(0, [&](int64_t offset, int64_t count, float* dst) {
      for (int64_t j = 0; j < count; ++j) dst[j] = master[offset + j] = 0.5f * float(offset + j);
    });
    step(optimizer, nullptr, master, 1.0f);  // the last sub-groups kept in memory, unwritten
    // The moments' file now takes no byte: writes to /dev/full fail with ENOSPC, and its reads
    // (zeros) fail their checksums. The step down the shard writes the kept sub-groups back first.
    const std::string failing = optimizer.path_of(1);
    fs::rename(failing, failing + ".moved");
    fs::create_symlink("/dev/full", failing);
    try {
      step(optimizer, nullptr, master, 2.0f);
      FAIL("the step went through a file that takes no byte");
    } catch (const ds::Error& error) {
      INFO(error.what());
      CHECK(error.path() == failing);
    }
  }  // and the destructor returns: it waits for what is still in flight and removes the folder
  CHECK(fs::is_empty(scratch.path));
}
