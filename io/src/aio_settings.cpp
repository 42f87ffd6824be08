#include "dstrain/io/aio_settings.hpp"

#include <algorithm>
#include <string>

#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::io {

AioSettings aio_settings(const AioConfig& aio) {
  return {aio.block_size, aio.queue_depth, aio.single_submit, aio.overlap_events, aio.intra_op_parallelism};
}

AioSettings for_swap_reads(AioSettings aio) {
  // Not past 4096 entries: io_uring's rings hold at most 32768, and deeper buys nothing here.
  const int64_t deeper = std::min<int64_t>(int64_t{aio.queue_depth} * kSwapReadDepth, 4096);
  aio.queue_depth = static_cast<int>(std::max<int64_t>(aio.queue_depth, deeper));
  return aio;
}

void validate(const AioSettings& settings) {
  if (settings.block_size <= 0)
    throw Error("block_size must be positive, got " + std::to_string(settings.block_size))
        .with_key("aio.block_size");
  if (settings.block_size > kMaxBlockSize)
    throw Error("block_size must be at most " + std::to_string(kMaxBlockSize) + ", got " +
                std::to_string(settings.block_size))
        .with_key("aio.block_size");
  if (settings.queue_depth <= 0)
    throw Error("queue_depth must be positive, got " + std::to_string(settings.queue_depth))
        .with_key("aio.queue_depth");
  if (settings.intra_op_parallelism <= 0)
    throw Error("intra_op_parallelism must be positive, got " +
                std::to_string(settings.intra_op_parallelism))
        .with_key("aio.intra_op_parallelism");
}

}  // namespace ds::io
