// The knobs of an asynchronous I/O handle, as DeepSpeed's "aio" config block names them.
#pragma once

#include <cstdint>

namespace ds {
struct AioConfig;
}

namespace ds::io {

// O_DIRECT needs the buffer address, the file offset and the length to be multiples of this.
inline constexpr int64_t kDirectIoAlignment = 4096;
// One SQE carries a 32-bit length; larger blocks buy nothing.
inline constexpr int64_t kMaxBlockSize = int64_t{1} << 30;

struct AioSettings {
  int64_t block_size = 1 << 20;  // a request is cut into pieces of this many bytes
  int queue_depth = 8;           // pieces in flight per ring at most
  bool single_submit = false;    // one SQE per submit call instead of a batch
  bool overlap_events = true;    // refill the queue on each completion instead of in waves
  int intra_op_parallelism = 1;  // worker threads (each with its own ring) sharing one request
};

// The settings a config's "aio" block gives (its use_gds concerns GPUs, not this handle).
AioSettings aio_settings(const AioConfig& aio);

// A swapper's reader: kSwapReadDepth times the queue depth. A swapping process reads and writes the
// disk at once, and the device serves the pieces in flight alike; but a step waits for its reads,
// seldom for its writes, so most pieces in flight should be reads (docs/offload.md, "Reads ahead
// of writes").
inline constexpr int kSwapReadDepth = 4;
AioSettings for_swap_reads(AioSettings aio);

// Throws ds::Error naming the offending setting when a value is out of range.
void validate(const AioSettings& settings);

}  // namespace ds::io
