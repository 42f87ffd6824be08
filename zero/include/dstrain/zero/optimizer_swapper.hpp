// ds::zero::OptimizerSwapper: ZeRO-Infinity's optimizer state on NVMe (offload_optimizer.device "nvme").
//
// This rank's fp32 master shard and each optimizer state shard (Adam's exp_avg and exp_avg_sq,
// SGD's momentum_buffer) live in one file each, <folder>/<name>.swp, under a fresh folder in
// nvme_path. The shard is cut into sub-groups of sub_group_size elements (rounded up to 1024, so
// that every transfer is 4096-aligned and goes O_DIRECT); sub-group i is the same byte range of
// every file. The optimizer step visits them in step_order(), ascending and descending on
// alternate steps:
//
//   for (int64_t k = 0; k < swapper.sub_groups(); ++k) {
//     const int64_t i = swapper.step_order(k);
//     const OptimizerSwapper::SubGroup& g = swapper.swap_in(i);  // g.state[k]: names[k]'s values
//     ...fused kernel on g.state, g.numel elements at shard offset g.offset...
//     swapper.swap_out(i);
//   }
//   swapper.finish_step();
//
// pipeline_read reads the next sub-groups (in step order) while one is stepped, as far as free
// buffers go: the next, and with pipeline_write also the one after once the previous one's writes
// are done; pipeline_write writes the previous sub-group back while the next is stepped. Buffers:
// one locked buffer per file per sub-group in memory at once (a slot), that is one sub-group
// without pipelining, two with one of them, three with both; buffer_count must cover it. Reads
// and writes go through two io_uring handles (the aio block's settings) so a wait for the next
// reads never waits for the previous writes, and a wait for sub-group i's reads never waits for
// the reads queued after them.
//
// The slots are not emptied between steps: the sub-groups a step visits last stay in them, and
// the next step, visiting in the other direction, starts with them and reads nothing of their
// state. They are not written back either until the next step has stepped them again and needs
// their slots: between steps their buffers hold values newer than the files, which read()
// overlays on what it reads (overlay_unwritten() for other readers of the files). Their gradients
// are staged straight into the slots during backward (never to the file and back), and their
// master values serve the parameter swapper from memory (master_in_memory). Where no slot is kept
// (the first step, after fill() or write()), pipeline_read reads the first sub-groups' master and
// state during backward instead (the first gradient range queues them), which the backward cannot
// change; their gradients are staged into those slots too. Those bytes are checked against their
// checksums as any read; a file changed after they were read is caught by the next step's read of
// it, or rewritten whole by the step's write-back.
//
// With Options::step_in_backward (and the gradients here, pipeline_read, one micro-step a step)
// the step itself starts inside the boundary backward: every step goes down the shard, the order
// in which the reducer delivers the ranges, so the engine can swap a sub-group in, step it and swap
// it out as soon as gradient_complete() says its whole gradient is staged in its slot; its gradient
// never goes to the file and back, and its reads and writes overlap the rest of backward. The last
// sub-groups stay in their slots, unwritten, through the next forward (served to the parameter
// swapper from memory); release_kept() before the next backward queues their writes, and the first
// gradient range waits for them before reading that step's first sub-groups into those slots. A
// sub-group whose gradient partly went to the file (no slot was free when its first range came)
// and every one after it are stepped in step() as usual.
//
// With Options::gradients the fp32 gradient shard is a file too, <folder>/gradients.swp: the
// reducer's results arrive during backward as ranges of any size and alignment
// (write_gradients), are staged in a few locked pages and go out O_DIRECT a page at a time once a
// page is complete (or, for a sub-group in a slot, into its slot); swap_in reads the sub-group's
// gradient with its state (SubGroup::gradients) and swap_out never writes it back.
//
// Every block written (a sub-group of each file, a page of the gradient's) leaves its CRC-32C in
// memory (computed by the handle's workers, io/raw_aio_handle.hpp), and every read of it in the
// step is checked against it: bytes that differ (the file overwritten, or truncated and written
// past) or a read past the end of a truncated file are a ds::Error naming the file, the offset and
// the sub-group or page. The files are scratch, made new each run: nothing is kept on disk.
// Synchronous read()/read_gradients() of arbitrary ranges (checkpoints, the master's export) are
// not checked; a sub-group that write() changed is checked again once a step has read it back.
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

class OptimizerSwapper final : public MasterFile {
 public:
  struct Options {
    std::string nvme_path;           // the folder is created in it (offload_optimizer.nvme_path)
    int rank = 0;                    // names the folder
    std::vector<std::string> names;  // the swapped shards, e.g. {"master", "exp_avg", "exp_avg_sq"}
    int64_t shard_numel = 0;
    int64_t sub_group_size = 0;      // elements; 0 or more than the shard: one sub-group
    int buffer_count = 0;            // offload_optimizer.buffer_count
    bool pipeline_read = false;
    bool pipeline_write = false;
    bool gradients = false;          // the fp32 gradient shard in gradients.swp too
    bool step_in_backward = false;   // with gradients and pipeline_read: see above
    // With `gradients`: the kernel that sums the squares of each staged range (the engine's fused
    // one; zero/ sits below the engine's kernels, so it is handed in).
    double (*sum_of_squares)(const float* values, int64_t n) = nullptr;
    io::AioSettings aio;
  };

  struct SubGroup {
    int64_t offset = 0;  // first shard element
    int64_t numel = 0;
    std::vector<float*> state;  // one buffer per name, numel valid elements each
    float* gradients = nullptr;  // the gradient's numel elements (Options::gradients), read, never written
  };

  // Checks nvme_path (exists, writable, O_DIRECT, room for every file), buffer_count (an error
  // naming the count that would work) and creates the files' fresh folder. Every file starts as
  // zeros; fill() sets other initial values.
  explicit OptimizerSwapper(Options options);
  // Waits for transfers still queued and removes the folder.
  ~OptimizerSwapper();
  OptimizerSwapper(const OptimizerSwapper&) = delete;
  OptimizerSwapper& operator=(const OptimizerSwapper&) = delete;

  int64_t sub_groups() const { return static_cast<int64_t>(groups_.size()); }
  int64_t sub_group_numel() const { return group_numel_; }  // the largest
  const SubGroup& sub_group(int64_t i) const { return groups_.at(i); }
  const std::vector<std::string>& names() const { return options_.names; }
  const std::string& folder() const { return folder_; }
  std::string path_of(size_t name) const;
  bool swaps_gradients() const { return options_.gradients; }
  std::string gradient_path() const { return folder_ + "/gradients.swp"; }
  // Bytes of locked buffers held for the optimizer's files and for the gradient's (its sub-group
  // buffers and staging pages), and bytes of swap files on disk.
  int64_t buffer_bytes() const;
  int64_t gradient_buffer_bytes() const;
  int64_t file_bytes() const;

  // The k-th sub-group the coming step visits: 0, 1, ... on one step, ..., 1, 0 on the next, so
  // that each step starts with the sub-groups the last one left in memory (step_in_backward:
  // always ..., 1, 0).
  int64_t step_order(int64_t k) const { return descending_ ? sub_groups() - 1 - k : k; }
  // step_in_backward, during backward: sub-group i's whole gradient is staged in its slot, so the
  // step may take it now.
  bool gradient_complete(int64_t i) const;
  // Sub-group i's state in memory: queues the reads of the next sub-groups whose slots are free
  // (pipeline_read), then waits for i's (queued ahead under pipeline_read). Sub-groups go in
  // step_order(); i's buffers stay valid until the step's swap_in of a sub-group sharing its slot.
  const SubGroup& swap_in(int64_t i);
  // Queues sub-group i's writes, after waiting for the previous sub-group's where a read ahead
  // will need its slot; without pipeline_write, waits for them. The step's last sub-groups (one
  // per slot) are kept unwritten for the next step instead. Under pipeline_read, slots so freed
  // take the next reads.
  void swap_out(int64_t i);
  // Ends the step. The sub-groups visited last stay in their slots, unwritten, for the next step;
  // the files hold the step's result elsewhere.
  void finish_step();

  // step_in_backward, before the boundary backward: queues the kept sub-groups' writes; they are
  // no longer handed out, and their slots go to the step's sub-groups once written.
  void release_kept();
  // The master file as the parameter swapper reads it (master_file.hpp): master.swp; settle waits
  // for writes still in flight to master elements [offset, offset + count); master_in_memory gives
  // them between steps where one kept sub-group holds them all (valid until the next swap_in, fill()
  // or write()); overlay_unwritten_master is overlay_unwritten() of the master.
  std::string master_path() const override { return path_of(0); }
  void settle(int64_t offset, int64_t count) override;
  const float* master_in_memory(int64_t offset, int64_t count) const override;
  bool overlay_unwritten_master(int64_t offset, int64_t count, float* dst) const override {
    return overlay_unwritten(0, offset, count, dst);
  }
  // Copies over dst, which holds elements [offset, offset + count) of file `name` as read from it
  // outside a step, the values that kept sub-groups hold and the file does not yet (the parameter
  // swapper reading master.swp). Whether there were any.
  bool overlay_unwritten(size_t name, int64_t offset, int64_t count, float* dst) const;

  // Gradient ranges from the reducer during backward: shard elements [offset, offset + count) are
  // set to `values` (overwrite) or have them added (the file's values read back first). Ranges of
  // one backward must not overlap; a few pages may be open at once (any order within that). A
  // sub-group held in a slot for the coming step takes its ranges in the slot.
  void write_gradients(const float* values, int64_t offset, int64_t count, bool overwrite);
  // At the end of a backward whose ranges covered the whole shard: waits for the last pages'
  // writes, so the file holds the result. Returns the sum of squares (in double) of the values the
  // file now holds, taken as they were staged.
  double finish_gradients();
  // Synchronous read of gradient elements [offset, offset + count), outside a backward (from the
  // slots where they are held).
  void read_gradients(int64_t offset, float* dst, int64_t count);

  // Sets every value of one file, a sub-group at a time: `produce(offset, count, dst)` writes shard
  // elements [offset, offset + count) into dst (a swap buffer), which then goes out O_DIRECT.
  void fill(size_t name, const std::function<void(int64_t offset, int64_t count, float* dst)>& produce);
  // Synchronous access to elements [offset, offset + count) of one file, outside a step
  // (checkpoints): read() with the kept sub-groups' values over the file's. Any buffer; unaligned
  // pieces go through the page cache. write() (and fill()) write the kept sub-groups back and
  // empty the slots: what they held is read again.
  void read(size_t name, int64_t offset, float* dst, int64_t count);
  void write(size_t name, int64_t offset, const float* src, int64_t count);

  // The I/O since the last call, then starts counting again.
  io::SwapStats take_stats();

 private:
  // A page of the gradient file being staged: page `index` covers shard elements
  // [page_begin(index), + page_valid(index)): sub-group by sub-group, page_numel_ elements at a
  // time (a sub-group's last page fewer).
  struct GradientPage {
    float* buffer = nullptr;
    int64_t index = -1;    // -1: free
    int64_t missing = 0;   // shard elements of the page not yet staged in this backward
    int64_t write_done_at = 0;  // queued to the file: writer_->queued_count() then; free once waited for
  };

  // The buffers of one sub-group in memory, and where that sub-group is in its swap.
  struct Slot {
    std::vector<float*> buffers;  // one per name, then the gradient's
    int64_t group = -1;           // the sub-group read, stepped, written or kept in it; -1: free
    // reader_->queued_count() once its state (gradient) reads were queued; 0: none left to wait
    // for and check.
    int64_t state_read_at = 0;
    int64_t gradient_read_at = 0;
    bool kept = false;           // holds the last step's values of its sub-group: nothing to read
    bool unwritten = false;      // holds values its files do not: written when the slot is needed
    bool gradient_here = false;  // the sub-group's gradient is staged here, or queued to be read here
    int64_t gradient_staged = 0;  // elements staged here in this backward
    bool stepped = false;          // swap_out queued its writes in this step
    int64_t write_done_at = 0;     // writer_->queued_count() once its writes were queued; 0: none pending
    std::vector<uint32_t> read_crc;       // per name, of the bytes read
    std::vector<uint32_t> page_read_crc;  // per gradient page of the sub-group
  };

  int64_t padded(int64_t numel) const;
  Slot& slot_of(int64_t i) { return slots_[static_cast<size_t>(i) % slots_.size()]; }
  const Slot& slot_of(int64_t i) const { return slots_[static_cast<size_t>(i) % slots_.size()]; }
  int64_t position_of(int64_t i) const { return descending_ ? sub_groups() - 1 - i : i; }
  void free_slot(Slot& slot);
  // Queues the writes of the slot's sub-group, from its buffers, to every file of its state.
  void write_back(Slot& slot);
  // The slot is free again once its sub-group was written and the caller has moved past it.
  void release_if_done(Slot& slot);
  // Queues the reads of the sub-groups at step positions first..last that their slots let in, in
  // order: the state where it is not read or kept, the gradient (in a step only) where it is not
  // held or queued yet.
  void queue_reads(int64_t first, int64_t last);
  void queue_state_reads(int64_t i);
  // step_in_backward: a gradient range of sub-group i came before i was read ahead; i's state is
  // read into its slot now where the sub-group there has been stepped.
  void claim_slot(int64_t i);
  void queue_gradient_reads(int64_t i);
  // Waits for sub-group i's reads (and those queued before them) and checks every block read
  // against its checksum.
  void wait_reads(int64_t i);
  // Writes the kept sub-groups back, waits for every transfer and empties the slots (before a
  // file is written outside a step); gradients held in slots go to the gradient's file.
  void drop_slots();
  std::string block_name(size_t file, int64_t i) const;
  int64_t page_of(int64_t offset) const;  // the page holding shard element `offset`
  int64_t page_begin(int64_t page) const;
  int64_t page_valid(int64_t page) const;  // shard elements in the page (0 past the shard's end)
  std::string page_name(int64_t page) const;
  void wait_writes();
  GradientPage& open_page(int64_t index, bool overwrite);
  // Waits for the page writes queued before writer_'s request number `count` (all by default) and
  // frees their pages.
  void wait_gradient_writes(int64_t count = -1);

  Options options_;
  std::string folder_;
  int64_t group_numel_ = 0;
  std::vector<SubGroup> groups_;  // offsets and sizes, each with its slot's buffers
  io::LockedBuffers buffers_;     // before the handles: their destructors wait for I/O into these
  std::vector<Slot> slots_;       // sub-group i uses slot i % slots_.size()
  std::unique_ptr<io::RawAioHandle> reader_;
  std::unique_ptr<io::RawAioHandle> writer_;
  // Per file (names, then the gradient), per sub-group: the CRC-32C of its last write. Sub-groups
  // that write() changed are unchecked until a step's read has taken their new checksum.
  std::vector<std::vector<uint32_t>> written_crc_;
  std::vector<std::vector<bool>> unchecked_;
  // The gradient file: per page, the CRC-32C of its last write; a sub-group's gradient is read a
  // page at a time, each checked against its page's.
  std::vector<uint32_t> page_crc_;
  int64_t pages_per_group_ = 0;
  int64_t in_use_ = -1;        // the sub-group swap_in handed out last in this step, -1 outside a step
  bool in_step_ = false;       // from the first swap_in to finish_step: gradient reads may be queued
  bool prefetch_due_ = true;   // the next write_gradients begins a backward: read ahead for the step
  bool gradients_open_ = false;  // from a backward's first write_gradients to finish_gradients
  // Per sub-group: a range of this backward went to the gradient's file (no slot held it).
  std::vector<bool> gradient_in_file_;
  bool descending_ = false;    // the coming step's direction (step_order)
  std::vector<GradientPage> pages_;
  int64_t page_numel_ = 0;
  double gradient_sum_of_squares_ = 0;  // of the values staged since the last finish_gradients()
  io::SwapStats stats_;
};

}  // namespace ds::zero
