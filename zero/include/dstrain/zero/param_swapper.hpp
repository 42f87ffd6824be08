// ds::zero::ParamSwapper: ZeRO-Infinity's parameter partitions on NVMe (offload_param.device "nvme").
//
// Stage 3 keeps one chunk of every parameter on each rank (ShardLayout). With a swapper those
// chunks live in one file, <folder>/params.swp, instead of memory, except the first parameters'
// chunks up to max_in_cpu elements, which stay resident (DeepSpeed's meaning of the key). Each
// swapped chunk has its own 4096-aligned range of the file, so every transfer goes O_DIRECT from
// one of buffer_count locked buffers. The ParameterCoordinator drives it:
//
//   swapper.read_ahead(j);              // along the recorded module order, while buffers are free
//   const float* chunk = swapper.acquire(i);  // i's chunk in memory: the all-gather's input
//   ...all-gather from chunk, wait...
//   swapper.release(i);                 // the buffer is free; the file copy stays valid
//
// and after the optimizer step the new values come back a shard range at a time (store_range,
// in shard order, each element once), are gathered per chunk in a buffer and written out whole;
// finish_writes() waits for them before the next reads.
//
// Buffers are as large as the largest swapped chunk (rounded up to 1024 elements); buffer_size is
// DeepSpeed's upper bound on that. Torch-free: raw fp32 pointers, one thread.
//
// The file is preallocated at construction. Each chunk's write leaves its CRC-32C in memory (the
// handle's workers compute it) and each read is checked against it: other bytes (the file
// overwritten, or truncated and written past) or a read past the end of a truncated file are a
// ds::Error naming the file, the offset and the parameter; so is reading a chunk never stored.
//
// With Options::master_file the swapper has no file of its own: it reads its chunks from a file
// that already holds this rank's whole shard at the shard's own offsets (in fp32 at stage 3 with
// the optimizer on NVMe, the optimizer's master file holds exactly the partition), and writes
// nothing. A chunk there starts and ends mid-page, so its read is the 4096-aligned window around
// it, and the buffer hands out the chunk from inside the window. store_range then only takes the
// CRC-32C of each window from the values as they pass (the bytes the file's owner writes), which
// every read is checked against as before. The owner may hold parts of the shard in memory, newer
// than the file (OptimizerSwapper between steps): a chunk it holds whole is handed out from there
// (nothing read), and a window read from the file gets the owner's newer values copied over it
// before it is checked.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "dstrain/io/aio_settings.hpp"
#include "dstrain/io/locked_buffers.hpp"
#include "dstrain/io/raw_aio_handle.hpp"
#include "dstrain/io/swap_stats.hpp"
#include "dstrain/zero/master_file.hpp"

namespace ds::zero {

class ParamSwapper {
 public:
  struct Chunk {
    int64_t shard_offset = 0;  // where the chunk starts in this rank's shard (ShardLayout)
    int64_t numel = 0;
  };
  struct Options {
    std::string nvme_path;  // offload_param.nvme_path: the folder is created in it
    int rank = 0;           // names the folder
    std::vector<Chunk> chunks;  // one per parameter, in shard order
    int buffer_count = 0;       // offload_param.buffer_count
    int64_t buffer_size = 0;    // offload_param.buffer_size: the largest swapped chunk allowed
    int64_t max_in_cpu = 0;     // offload_param.max_in_cpu: elements kept resident
    // null: chunks go to <folder>/params.swp. Else the optimizer's master file, which holds the
    // shard and which its owner keeps current: chunks are read from it (not owned).
    MasterFile* master_file = nullptr;
    io::AioSettings aio;
  };

  // Checks buffer_count and buffer_size (an error naming the key and a value that works) and
  // nvme_path (make_swap_folder's preflight), and creates the folder and its file (none with a
  // master file). The file's contents are undefined until store_range() has covered every chunk.
  explicit ParamSwapper(Options options);
  // Waits for transfers still queued and removes the folder.
  ~ParamSwapper();
  ParamSwapper(const ParamSwapper&) = delete;
  ParamSwapper& operator=(const ParamSwapper&) = delete;

  bool swapped(size_t i) const { return file_offset_[i] >= 0; }
  const std::string& folder() const { return folder_; }  // "" with a master file
  std::string path() const;  // the file the chunks are read from
  int64_t resident_numel() const { return resident_numel_; }
  int64_t swapped_numel() const;
  // Bytes of memory held (buffers and resident chunks), and bytes of its own swap file.
  int64_t memory_bytes() const;
  int64_t file_bytes() const { return file_bytes_; }

  // Queues the read of chunk i into a free buffer; false when none is free (nothing queued).
  // True at once for a resident chunk or one already in a buffer.
  bool read_ahead(size_t i);
  // Whether acquire(i) finds a buffer: i is resident or buffered, or a buffer is free or holds a
  // read-ahead chunk (which acquire then gives up). False when every buffer is acquired.
  bool can_acquire(size_t i) const;
  // Chunk i in memory (numel valid elements), until release(i). Waits for its read.
  const float* acquire(size_t i);
  void release(size_t i);
  // Frees the buffers of chunks read ahead and not acquired (e.g. the model took another path).
  void drop_read_ahead();

  // Shard elements [shard_offset, shard_offset + count) hold new values: each swapped chunk is
  // written once all of its elements have come (ranges come in any order, each element once per
  // pass over the shard; with a master file, only its checksum is taken, and the master file must
  // hold these values by the next read).
  void store_range(const float* values, int64_t shard_offset, int64_t count);
  // Waits for the writes: then the file holds every stored value.
  void finish_writes();

  // The I/O since the last call, then starts counting again.
  io::SwapStats take_stats();

 private:
  enum class State { Free, Reading, Acquired, Staging, Writing };
  struct Buffer {
    float* data = nullptr;
    State state = State::Free;
    size_t param = 0;
    int64_t staged = 0;  // Staging: elements of the chunk stored so far
    int64_t order = 0;   // Reading: when it was queued (the latest is given up first)
    int64_t read_done_at = 0;  // Reading: the reader's queued_count() once its read is queued
    uint32_t read_crc = 0;  // Reading: the checksum of the bytes read, once waited for
    bool checked = false;   // Reading: read_crc was checked
    // Reading: new values were stored for the window before its read finished (a step begun in
    // backward stepped a parameter whose backward was done, and a read ahead asked for its chunk):
    // the bytes are never handed out, so they are not checked either.
    bool stale = false;
  };

  int64_t padded(size_t i) const;
  bool reads_master_file() const { return options_.master_file != nullptr; }
  // With a master file: the CRC-32C of each chunk's read window, from the values stored.
  void checksum_windows(const float* values, int64_t shard_offset, int64_t count);
  // Chunk i in its shard file's owner's memory, or nullptr.
  const float* in_owner_memory(size_t i) const;
  // A buffer for chunk i: a free one, else one whose writes have finished, else the latest
  // read-ahead; -1 when all are acquired or staging.
  int take_buffer(bool may_wait_writes);
  // Waits for the reads queued up to and including buffer b's (all of them for b < 0), not the
  // ones queued after it, and checks each read waited for against its chunk's checksum.
  void wait_reads(int b = -1);
  std::string chunk_name(size_t i) const;
  void wait_writes();

  Options options_;
  std::string folder_;
  std::vector<int64_t> file_offset_;          // per chunk: byte offset of its read, -1 if resident
  std::vector<int64_t> read_numel_;           // per chunk: elements read (its own file: the padded chunk)
  std::vector<int64_t> lead_;                 // per chunk: elements read before its first (master file)
  // Per chunk (master file): the pieces of its window's checksum taken in this pass over the shard,
  // by element offset, and how many elements they cover.
  struct CrcPiece {
    int64_t offset;
    int64_t numel;
    uint32_t crc;
  };
  std::vector<std::vector<CrcPiece>> window_pieces_;
  std::vector<int64_t> window_taken_;
  int64_t shard_numel_ = 0;
  std::vector<std::vector<float>> resident_;  // per chunk: its values when resident
  std::vector<int> buffer_of_;                // per chunk: the buffer reading, holding or staging it
  std::vector<uint32_t> written_crc_;         // per chunk: the CRC-32C of its last write
  std::vector<bool> stored_;                  // per chunk: written at least once
  int64_t resident_numel_ = 0;
  int64_t buffer_numel_ = 0;
  int64_t file_bytes_ = 0;
  io::LockedBuffers memory_;  // before the handles: their destructors wait for I/O into these
  std::vector<Buffer> buffers_;
  std::unique_ptr<io::RawAioHandle> reader_;
  std::unique_ptr<io::RawAioHandle> writer_;
  bool writes_queued_ = false;
  int64_t next_order_ = 0;
  io::SwapStats stats_;
};

}  // namespace ds::zero
