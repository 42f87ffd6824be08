// Random transfers (sizes, offsets, alignments, settings, sync or async) against a model of the
// file kept in memory and against plain pread.
#include <catch2/catch.hpp>

#include <cstring>
#include <random>

#include "dstrain/io/locked_buffers.hpp"
#include "dstrain/io/raw_aio_handle.hpp"
#include "io_test_support.hpp"

namespace {

using ds::io::AioSettings;
using ds::io::LockedBuffers;
using ds::io::RawAioHandle;
using namespace ds::io::testing;

constexpr int64_t kPage = ds::io::kDirectIoAlignment;
constexpr int64_t kMaxLength = 300 * 1024;

template <class T>
T pick(std::mt19937_64& rng, std::initializer_list<T> choices) {
  return *(choices.begin() + rng() % choices.size());
}

// Lengths and offsets that hit the interesting boundaries: zero, tiny, page multiples and their
// neighbours, and anything at all.
int64_t pick_size(std::mt19937_64& rng, int64_t limit) {
  int64_t pages = static_cast<int64_t>(rng() % (limit / kPage + 1));
  int64_t size = pick<int64_t>(rng, {0, static_cast<int64_t>(rng() % 100), pages * kPage, pages * kPage + 1,
                                     std::max<int64_t>(0, pages * kPage - 1),
                                     static_cast<int64_t>(rng() % (limit + 1))});
  return std::min(size, limit);
}

AioSettings pick_settings(std::mt19937_64& rng) {
  return AioSettings{pick<int64_t>(rng, {1024, kPage, 5000, 64 * 1024, 1 << 20}), pick(rng, {1, 2, 4, 32}),
                     rng() % 2 == 0, rng() % 2 == 0, pick(rng, {1, 2, 3, 4})};
}

}  // namespace

TEST_CASE("random transfers agree with plain pread and a model of the file", "[io][random]") {
  const uint64_t seed = 20240605;
  CAPTURE(seed);
  std::mt19937_64 rng(seed);
  TempDir dir;
  const std::string path = dir.file("model.bin");
  Bytes model = random_bytes(static_cast<size_t>(pick_size(rng, kMaxLength)), rng());
  plain_write(path, model);

  LockedBuffers locked;
  char* arena = static_cast<char*>(locked.allocate(kMaxLength + kPage));

  for (int iteration = 0; iteration < 120; ++iteration) {
    const AioSettings settings = pick_settings(rng);
    const bool async = rng() % 2 == 0;
    RawAioHandle handle(settings);

    // A write somewhere in, across or past the end of the file.
    const int64_t length = pick_size(rng, kMaxLength);
    const int64_t offset = pick_size(rng, std::min<int64_t>(static_cast<int64_t>(model.size()), 1 << 20) + 2 * kPage);
    char* source = arena + (rng() % 2 == 0 ? 0 : rng() % kPage);
    const Bytes payload = random_bytes(static_cast<size_t>(length), rng());
    if (length > 0) std::memcpy(source, payload.data(), payload.size());
    CAPTURE(iteration, settings.block_size, settings.queue_depth, settings.single_submit,
            settings.overlap_events, settings.intra_op_parallelism, async, length, offset);
    if (async) {
      REQUIRE(handle.async_pwrite(source, length, path, offset) == 0);
      REQUIRE(handle.wait() == 1);
    } else {
      REQUIRE(handle.sync_pwrite(source, length, path, offset) == 1);
    }
    if (offset + length > static_cast<int64_t>(model.size())) model.resize(static_cast<size_t>(offset + length), 0);
    std::copy(payload.begin(), payload.end(), model.begin() + offset);
    REQUIRE(plain_read_all(path) == model);

    // A read of a range inside the file.
    const int64_t read_offset = pick_size(rng, static_cast<int64_t>(model.size()));
    const int64_t read_length =
        pick_size(rng, std::min<int64_t>(kMaxLength, static_cast<int64_t>(model.size()) - read_offset));
    char* sink = arena + (rng() % 2 == 0 ? 0 : rng() % kPage);
    std::memset(sink, 0x5a, static_cast<size_t>(read_length));
    CAPTURE(read_offset, read_length);
    if (async) {
      REQUIRE(handle.async_pread(sink, read_length, path, read_offset) == 0);
      REQUIRE(handle.wait() == 1);
    } else {
      REQUIRE(handle.sync_pread(sink, read_length, path, read_offset) == 1);
    }
    const Bytes read(sink, sink + read_length);
    REQUIRE(read == plain_read(path, read_offset, read_length));
    REQUIRE(read == Bytes(model.begin() + read_offset, model.begin() + read_offset + read_length));
  }
}
