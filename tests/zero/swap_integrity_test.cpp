// The swappers against their own files changed behind their back, driven directly: every block read
// back is checked against the CRC-32C of its write, so a file overwritten with other bytes, cut short
// (a read past its end), or cut short and then written past (a hole that reads as zeros) is a
// ds::Error naming the file, the offset and the sub-group, page or parameter, each time, at every
// place it is done; untouched files train on without a false alarm. And the files are preallocated.
#include <catch2/catch.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/remove_tree.hpp"
#include "dstrain/zero/optimizer_swapper.hpp"
#include "dstrain/zero/param_swapper.hpp"
#include "caught_error.hpp"

namespace {

namespace fs = std::filesystem;
using Catch::Matchers::Contains;
using ds::zero::OptimizerSwapper;
using ds::zero::ParamSwapper;

struct Scratch {
  std::string path = (fs::temp_directory_path() / ("dstrain_swap_integrity_" + std::to_string(::getpid()))).string();
  Scratch() { fs::create_directories(path); }
  ~Scratch() { ds::remove_tree(path); }
};

ds::io::AioSettings aio() { return ds::io::AioSettings{8192, 4, false, true, 2}; }

// A shard file as another program writes it: the values at offset 0, with plain pwrite.
void write_floats(const std::string& path, const std::vector<float>& values) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT, 0600);
  REQUIRE(fd >= 0);
  const auto bytes = static_cast<ssize_t>(values.size() * sizeof(float));
  REQUIRE(::pwrite(fd, values.data(), static_cast<size_t>(bytes), 0) == bytes);
  ::close(fd);
}

void overwrite(const std::string& path, int64_t offset, int64_t bytes) {
  std::vector<char> garbage(static_cast<size_t>(bytes), 0x5a);
  const int fd = ::open(path.c_str(), O_WRONLY);
  REQUIRE(fd >= 0);
  REQUIRE(::pwrite(fd, garbage.data(), garbage.size(), offset) == bytes);
  ::close(fd);
}

int64_t allocated_bytes(const std::string& path) {
  struct stat info {};
  REQUIRE(::stat(path.c_str(), &info) == 0);
  return static_cast<int64_t>(info.st_blocks) * 512;
}

constexpr int64_t kShard = 5000;     // elements: sub-groups of 2048, 2048 and 904 (padded to 1024)
constexpr int64_t kSubGroup = 2048;

OptimizerSwapper::Options optimizer_options(const std::string& nvme, bool pipeline_read = true) {
  OptimizerSwapper::Options options;
  options.nvme_path = nvme;
  options.names = {"master", "exp_avg"};
  options.shard_numel = kShard;
  options.sub_group_size = kSubGroup;
  options.buffer_count = 6;
  options.pipeline_read = pipeline_read;
  options.gradients = true;
  options.sum_of_squares = [](const float* v, int64_t n) {
    double sum = 0;
    for (int64_t i = 0; i < n; ++i) sum += double(v[i]) * v[i];
    return sum;
  };
  options.aio = aio();
  return options;
}

// One step as the engine runs it: gradients of the backward, then every sub-group swapped in (in
// the swapper's step order), changed (master += gradient, exp_avg += 1) and swapped out. Returns
// what the master must now hold. `harm` runs before the backward (between steps) or between the
// backward and the optimizer's swap-ins.
enum class When { BetweenSteps, AfterBackward };
void step(OptimizerSwapper& swapper, std::vector<float>& master, std::vector<float>& exp_avg, float gradient,
          const std::function<void()>& harm = [] {}, When when = When::AfterBackward) {
  const std::vector<float> gradients(kShard, gradient);
  if (when == When::BetweenSteps) harm();
  swapper.write_gradients(gradients.data(), 0, kShard, true);
  swapper.finish_gradients();
  if (when == When::AfterBackward) harm();
  for (int64_t k = 0; k < swapper.sub_groups(); ++k) {
    const int64_t i = swapper.step_order(k);
    const OptimizerSwapper::SubGroup& g = swapper.swap_in(i);
    for (int64_t j = 0; j < g.numel; ++j) {
      REQUIRE(g.state[0][j] == master[g.offset + j]);
      REQUIRE(g.state[1][j] == exp_avg[g.offset + j]);
      REQUIRE(g.gradients[j] == gradient);
      g.state[0][j] += g.gradients[j];
      g.state[1][j] += 1;
      master[g.offset + j] = g.state[0][j];
      exp_avg[g.offset + j] = g.state[1][j];
    }
    swapper.swap_out(i);
  }
  swapper.finish_step();
}

}  // namespace

TEST_CASE("optimizer swap files are preallocated and every block read back is checked", "[zero][swap]") {
  Scratch scratch;
  // Every block the step reads from a file is checked: a change up to the swap-ins is caught. The
  // sub-groups a step starts with are not read (kept in memory from the step before: 1 slot
  // without pipeline_read, 2 with it; and their gradients never go to the file), so each change
  // is made to a sub-group the harmed step reads: the third step goes up the shard (keeping 0, or
  // 0 and 1), the fourth down (keeping 2, or 2 and 1). A change to a kept sub-group is rewritten
  // whole by the step's write-back (below). The gradient's file is read in the step only (and
  // rewritten by every backward).
  const bool pipeline_read = GENERATE(false, true);
  enum class Harm { Overwrite, Truncate, TruncateThenWritePast };
  struct Case {
    const char* name;
    size_t file;        // 0 master, 1 exp_avg, 2 gradients
    int64_t sub_group;  // whose bytes are harmed
    Harm harm;
    int clean_steps;    // before the harmed one
  };
  for (const Case& c : {Case{"master overwritten in sub-group 2", 0, 2, Harm::Overwrite, 2},
                        Case{"master overwritten in sub-group 0, on a step down the shard", 0, 0, Harm::Overwrite, 3},
                        Case{"exp_avg overwritten in sub-group 2 (the ragged one)", 1, 2, Harm::Overwrite, 2},
                        Case{"gradients overwritten in sub-group 2", 2, 2, Harm::Overwrite, 2},
                        Case{"exp_avg cut to 4 KiB", 1, 0, Harm::Truncate, 2},
                        Case{"master cut to 4 KiB and written past", 0, 2, Harm::TruncateThenWritePast, 2}}) {
    const When when = pipeline_read && c.file < 2 ? When::BetweenSteps : When::AfterBackward;
    DYNAMIC_SECTION(c.name << (pipeline_read ? ", pipeline_read" : "")
                           << (when == When::BetweenSteps ? ", between steps" : ", after the backward")) {
      OptimizerSwapper swapper(optimizer_options(scratch.path, pipeline_read));
      const int64_t file_bytes = ds::io::round_up(kShard, 1024) * 4;
      for (size_t k = 0; k < 2; ++k) CHECK(allocated_bytes(swapper.path_of(k)) >= file_bytes);
      CHECK(allocated_bytes(swapper.gradient_path()) >= file_bytes);

      std::vector<float> master(kShard), exp_avg(kShard, 0.0f);
      swapper.fill(0, [&](int64_t offset, int64_t count, float* dst) {
        for (int64_t j = 0; j < count; ++j) dst[j] = master[offset + j] = std::sin(float(offset + j));
      });
      for (int s = 0; s < c.clean_steps; ++s) step(swapper, master, exp_avg, 0.5f / float(s + 1));  // no false alarm

      const std::string victim = c.file < 2 ? swapper.path_of(c.file) : swapper.gradient_path();
      const int64_t offset = c.sub_group * kSubGroup * 4;
      auto harm = [&] {
        if (c.harm == Harm::Overwrite) overwrite(victim, offset + 100, 16);
        if (c.harm != Harm::Overwrite) REQUIRE(::truncate(victim.c_str(), 4096) == 0);
        if (c.harm == Harm::TruncateThenWritePast) {
          // The last page written again: the file is long again, with a hole from 4 KiB on.
          overwrite(victim, ds::io::round_up(kShard, 1024) * 4 - 4096, 4096);
          REQUIRE(fs::file_size(victim) > static_cast<uintmax_t>(2 * kSubGroup * 4));
        }
      };
      const ds::Error error = caught_error([&] {
        step(swapper, master, exp_avg, 0.125f, harm, when);
      });
      INFO(error.what());
      CHECK(error.path() == victim);
      REQUIRE(error.offset().has_value());
      if (c.harm != Harm::Overwrite) {
        CHECK_THAT(error.message(), Contains(c.harm == Harm::Truncate ? "read past end of file" : "CRC-32C"));
        // The first sub-group the step reads: the one after those kept in memory.
        CHECK_THAT(error.message(), Contains(pipeline_read ? "sub-group 2" : "sub-group 1"));
        CHECK(*error.offset() >= 4096);
      } else {
        CHECK_THAT(error.message(), Contains("CRC-32C"));
        CHECK_THAT(error.message(), Contains(c.file == 2 ? "gradient page" : "sub-group " + std::to_string(c.sub_group)));
        CHECK(*error.offset() <= offset);
        CHECK(*error.offset() + *error.length() > offset);
      }
    }
  }
}

TEST_CASE("a change to a sub-group kept in memory is rewritten whole by the step's write-back", "[zero][swap]") {
  Scratch scratch;
  OptimizerSwapper swapper(optimizer_options(scratch.path));
  std::vector<float> master(kShard), exp_avg(kShard, 0.0f);
  swapper.fill(0, [&](int64_t offset, int64_t count, float* dst) {
    for (int64_t j = 0; j < count; ++j) dst[j] = master[offset + j] = std::sin(float(offset + j));
  });
  step(swapper, master, exp_avg, 0.5f);
  step(swapper, master, exp_avg, 0.25f);  // down the shard: 1 and 0 stay in memory for the next
  REQUIRE(swapper.step_order(0) == 0);
  step(swapper, master, exp_avg, 0.125f, [&] { overwrite(swapper.path_of(0), 100, 16); }, When::BetweenSteps);
  std::vector<float> file(kShard);
  swapper.read(0, 0, file.data(), kShard);
  CHECK(file == master);
}

TEST_CASE("the parameter swap file is preallocated and every chunk read back is checked", "[zero][swap]") {
  Scratch scratch;
  const std::vector<ParamSwapper::Chunk> chunks = {{0, 3000}, {3000, 5000}, {8000, 100}};
  auto make = [&] {
    ParamSwapper::Options options;
    options.nvme_path = scratch.path;
    options.chunks = chunks;
    options.buffer_count = 2;
    options.buffer_size = 1 << 20;
    options.max_in_cpu = 0;
    options.aio = aio();
    return std::make_unique<ParamSwapper>(std::move(options));
  };
  std::vector<float> values(8100);
  for (size_t j = 0; j < values.size(); ++j) values[j] = std::cos(float(j));
  auto store_all = [&](ParamSwapper& swapper) {
    swapper.store_range(values.data(), 0, 4000);  // chunk 1 cut by the range's end
    swapper.store_range(values.data() + 4000, 4000, 4100);
    swapper.finish_writes();
  };
  auto gather = [&](ParamSwapper& swapper, size_t i) {
    const float* chunk = swapper.acquire(i);
    for (int64_t j = 0; j < chunks[i].numel; ++j) REQUIRE(chunk[j] == values[chunks[i].shard_offset + j]);
    swapper.release(i);
  };

  SECTION("preallocated at construction; a chunk never stored is an error, not zeros") {
    auto swapper = make();
    CHECK(allocated_bytes(swapper->path()) >= swapper->file_bytes());
    CHECK_THAT(caught_error([&] { swapper->acquire(1); }).message(), Contains("before it was ever stored"));
  }
  SECTION("untouched, every chunk reads back, read ahead or not") {
    auto swapper = make();
    store_all(*swapper);
    for (int round = 0; round < 2; ++round) {
      CHECK(swapper->read_ahead(2));
      for (size_t i = 0; i < chunks.size(); ++i) gather(*swapper, i);
    }
  }
  // Chunk 1 lives at file bytes [12288, 32768).
  SECTION("a chunk overwritten") {
    auto swapper = make();
    store_all(*swapper);
    overwrite(swapper->path(), 20000, 8);
    const ds::Error error = caught_error([&] { gather(*swapper, 1); });
    CHECK_THAT(error.message(), Contains("CRC-32C"));
    CHECK_THAT(error.message(), Contains("parameter 1"));
    CHECK(error.path() == swapper->path());
    CHECK(error.offset() == 12288);
  }
  SECTION("the file cut to 4 KiB: a read past its end") {
    auto swapper = make();
    store_all(*swapper);
    REQUIRE(::truncate(swapper->path().c_str(), 4096) == 0);
    const ds::Error error = caught_error([&] { gather(*swapper, 1); });
    CHECK_THAT(error.message(), Contains("read past end of file"));
    CHECK_THAT(error.message(), Contains("parameter 1"));
    CHECK(error.path() == swapper->path());
  }
  SECTION("the file cut to 4 KiB and written past: the hole reads as zeros") {
    auto swapper = make();
    store_all(*swapper);
    REQUIRE(::truncate(swapper->path().c_str(), 4096) == 0);
    swapper->store_range(values.data() + 8000, 8000, 100);  // chunk 2 only: the file is long again
    swapper->finish_writes();
    gather(*swapper, 2);
    const ds::Error error = caught_error([&] { gather(*swapper, 1); });
    CHECK_THAT(error.message(), Contains("CRC-32C"));
    CHECK_THAT(error.message(), Contains("parameter 1"));
    CHECK(error.offset() == 12288);
  }
}

// The master file as the parameter swapper sees its owner (zero/master_file.hpp): a plain file
// written here by pwrite, nothing held in memory, its newer values what after_read says.
struct PlainMasterFile final : ds::zero::MasterFile {
  std::string path;
  std::function<bool(int64_t, int64_t, float*)> after_read;
  std::string master_path() const override { return path; }
  const float* master_in_memory(int64_t, int64_t) const override { return nullptr; }
  void settle(int64_t, int64_t) override {}
  bool overlay_unwritten_master(int64_t offset, int64_t count, float* dst) const override {
    return after_read && after_read(offset, count, dst);
  }
};

// With a shard file (the optimizer's master file, in the engine) the swapper reads each chunk from
// it as the 4096-aligned window around the chunk and writes nothing; its checksum is taken from
// the values stored, so a change anywhere in the window, the neighbours' elements and the zeros
// past the shard's end included, is caught. The shard file is written here by plain pwrite.
TEST_CASE("parameters read from a shard file: each chunk's aligned window, checked", "[zero][swap]") {
  Scratch scratch;
  const std::string shard_file = scratch.path + "/shard.swp";
  // Chunk 0 ends mid-page, chunk 1 spans [2048, 8192) in its window, chunk 2's window ends in the
  // padding past the shard's 8100 elements.
  const std::vector<ParamSwapper::Chunk> chunks = {{0, 3000}, {3000, 5000}, {8000, 100}};
  constexpr int64_t kShardNumel = 8100, kPadded = 8192;
  std::vector<float> values(kShardNumel);
  auto write_shard = [&](float phase) {
    for (size_t j = 0; j < values.size(); ++j) values[j] = std::cos(float(j) + phase);
    std::vector<float> padded(values);
    padded.resize(kPadded, 0.0f);
    write_floats(shard_file, padded);
  };
  std::vector<std::unique_ptr<PlainMasterFile>> owners;
  auto make = [&](int64_t max_in_cpu, std::function<bool(int64_t, int64_t, float*)> after_read = {}) {
    owners.push_back(std::make_unique<PlainMasterFile>());
    owners.back()->path = shard_file;
    owners.back()->after_read = std::move(after_read);
    ParamSwapper::Options options;
    options.nvme_path = scratch.path;
    options.chunks = chunks;
    options.buffer_count = 2;
    options.buffer_size = 1 << 20;
    options.max_in_cpu = max_in_cpu;
    options.master_file = owners.back().get();
    options.aio = aio();
    return std::make_unique<ParamSwapper>(std::move(options));
  };
  // Ranges cut anywhere: mid-chunk and mid-page.
  auto store_all = [&](ParamSwapper& swapper) {
    swapper.store_range(values.data(), 0, 2500);
    swapper.store_range(values.data() + 2500, 2500, 5600);
    swapper.finish_writes();
  };
  auto gather = [&](ParamSwapper& swapper, size_t i) {
    const float* chunk = swapper.acquire(i);
    for (int64_t j = 0; j < chunks[i].numel; ++j) REQUIRE(chunk[j] == values[chunks[i].shard_offset + j]);
    swapper.release(i);
  };

  write_shard(0);
  for (int64_t max_in_cpu : {int64_t{0}, int64_t{3000}}) {
    DYNAMIC_SECTION("max_in_cpu " << max_in_cpu) {
      auto swapper = make(max_in_cpu);
      SECTION("each chunk reads back, its window's bytes and nothing written; new values after a new pass") {
        CHECK(swapper->path() == shard_file);
        CHECK(swapper->folder().empty());
        CHECK(swapper->file_bytes() == 0);
        CHECK(std::distance(fs::directory_iterator(scratch.path), fs::directory_iterator()) == 1);  // the shard file
        store_all(*swapper);
        swapper->take_stats();
        for (int step = 0; step < 2; ++step) {
          for (size_t i = 0; i < chunks.size(); ++i) gather(*swapper, i);
          write_shard(float(step + 1));  // the file's owner writes the step's values ...
          store_all(*swapper);           // ... and they pass by the swapper
        }
        const ds::io::SwapStats stats = swapper->take_stats();
        CHECK(stats.write_bytes == 0);
        // Windows: [0, 3072), [2048, 8192), [7168, 8192) elements.
        const int64_t windows = max_in_cpu > 0 ? (6144 + 1024) * 4 : (3072 + 6144 + 1024) * 4;
        CHECK(stats.read_bytes == 2 * windows);
      }
      SECTION("values stored that the file does not hold") {
        store_all(*swapper);
        values[5000] += 1.0f;
        store_all(*swapper);
        const ds::Error error = caught_error([&] { gather(*swapper, 1); });
        CHECK_THAT(error.message(), Contains("CRC-32C"));
        CHECK_THAT(error.message(), Contains("parameter 1"));
        CHECK(error.path() == shard_file);
        CHECK(error.offset() == 2048 * 4);
      }
      SECTION("a neighbour's element in the shared page changed") {
        store_all(*swapper);
        overwrite(shard_file, 2050 * 4, 4);  // chunk 0's element, in chunk 1's window
        CHECK_THAT(caught_error([&] { gather(*swapper, 1); }).message(), Contains("parameter 1"));
      }
      SECTION("a read ahead whose window gets new values before it is used is dropped, not checked") {
        // A step begun in backward: the owner holds new values for [3072, 8100) in memory, unwritten
        // (after_read copies them over what the file gave), and they pass by the swapper while a
        // read ahead of chunk 1, whose window they partly cover, is in flight.
        std::vector<float> owner(values);
        bool stepped = false;
        auto owned = make(max_in_cpu, [&](int64_t offset, int64_t count, float* dst) {
          if (!stepped) return false;
          for (int64_t j = std::max<int64_t>(offset, 3072); j < std::min<int64_t>(offset + count, kShardNumel); ++j)
            dst[j - offset] = owner[j];
          return true;
        });
        store_all(*owned);
        REQUIRE(owned->read_ahead(1));
        for (int64_t j = 3072; j < kShardNumel; ++j) owner[j] += 1.0f;
        stepped = true;
        owned->store_range(owner.data() + 3072, 3072, kShardNumel - 3072);
        if (max_in_cpu == 0) gather(*owned, 0);  // waits for every read before it: no false alarm
        CHECK_THAT(caught_error([&] { owned->acquire(1); }).message(), Contains("internal error"));
      }
      SECTION("the padding past the shard's end changed") {
        store_all(*swapper);
        overwrite(shard_file, 8150 * 4, 4);  // in chunk 1's window too, which ends at 8192
        gather(*swapper, 0);
        const ds::Error error = caught_error([&] { gather(*swapper, 2); });
        CHECK_THAT(error.message(), Contains("parameter 2"));
        CHECK(error.offset() == 7168 * 4);
      }
    }
  }
}

TEST_CASE("parameters read from a shard file with windows longer than one wave of the aio's pieces", "[zero][swap]") {
  // One worker, one 4 KiB piece in flight: the reader takes pieces of the largest window (24 KiB)
  // so that each window goes out whole; every value, every byte and the checksum of the whole
  // window still hold.
  Scratch scratch;
  const std::string shard_file = scratch.path + "/shard.swp";
  const std::vector<ParamSwapper::Chunk> chunks = {{0, 3000}, {3000, 5000}, {8000, 100}};
  constexpr int64_t kShardNumel = 8100, kPadded = 8192;
  std::vector<float> values(kPadded, 0.0f);
  for (int64_t j = 0; j < kShardNumel; ++j) values[j] = std::sin(float(j));
  write_floats(shard_file, values);

  ParamSwapper::Options options;
  options.nvme_path = scratch.path;
  options.chunks = chunks;
  options.buffer_count = 3;
  options.buffer_size = 1 << 20;
  PlainMasterFile master;
  master.path = shard_file;
  options.master_file = &master;
  options.aio = ds::io::AioSettings{4096, 1, false, true, 1};
  ParamSwapper swapper(std::move(options));
  swapper.store_range(values.data(), 0, kShardNumel);
  swapper.finish_writes();
  swapper.take_stats();
  for (size_t i = 0; i < chunks.size(); ++i) REQUIRE(swapper.read_ahead(i));
  for (size_t i = 0; i < chunks.size(); ++i) {
    const float* chunk = swapper.acquire(i);
    for (int64_t j = 0; j < chunks[i].numel; ++j) REQUIRE(chunk[j] == values[chunks[i].shard_offset + j]);
    swapper.release(i);
  }
  // Windows: [0, 3072), [2048, 8192), [7168, 8192) elements.
  CHECK(swapper.take_stats().read_bytes == (3072 + 6144 + 1024) * 4);

  overwrite(shard_file, 7000 * 4, 4);  // the window's fifth page, past the aio's first piece
  const ds::Error error = caught_error([&] {
    const float* chunk = swapper.acquire(1);
    (void)chunk;
  });
  CHECK_THAT(error.message(), Contains("parameter 1"));
  CHECK(error.offset() == 2048 * 4);
}
