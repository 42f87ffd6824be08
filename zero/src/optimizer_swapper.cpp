#include "dstrain/zero/optimizer_swapper.hpp"

#include <algorithm>
#include <cstring>

#include "dstrain/io/crc32c.hpp"
#include "dstrain/io/preallocate.hpp"
#include "dstrain/io/swap_check.hpp"
#include "dstrain/io/swap_preflight.hpp"
#include "dstrain/io/swap_units.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/remove_tree.hpp"
#include "dstrain/zero/buffer_sizes.hpp"

namespace ds::zero {
namespace {

constexpr const char* kKey = "zero_optimization.offload_optimizer";

}  // namespace

OptimizerSwapper::OptimizerSwapper(Options options) : options_(std::move(options)) {
  const int64_t numel = options_.shard_numel;
  group_numel_ = optimizer_sub_group_numel(numel, options_.sub_group_size);
  for (int64_t offset = 0; offset < numel; offset += group_numel_)
    groups_.push_back({offset, std::min(group_numel_, numel - offset), {}});
  gradient_in_file_.assign(groups_.size(), false);
  if (options_.step_in_backward && !(options_.gradients && options_.pipeline_read))
    throw Error("offload_optimizer: stepping in backward needs the gradient swapped and pipeline_read");
  descending_ = options_.step_in_backward;  // the order the reducer delivers the gradient in

  const int slots = optimizer_swap_slots(options_.pipeline_read, options_.pipeline_write);
  const int files = static_cast<int>(options_.names.size()) + (options_.gradients ? 1 : 0);
  const int needed = slots * files;
  if (options_.buffer_count < needed)
    throw Error("buffer_count is " + std::to_string(options_.buffer_count) + ", but swapping " +
                std::to_string(options_.names.size()) + " optimizer shards" + (options_.gradients ? " and the gradient" : "") +
                (slots > 1 ? " with pipeline_read/pipeline_write (" + std::to_string(slots) + " sub-groups in memory)" : "") +
                " needs " + std::to_string(needed) + ": set buffer_count to " + std::to_string(needed) + " or more")
        .with_key(std::string(kKey) + ".buffer_count");

  folder_ = io::make_swap_folder(options_.nvme_path, "dstrain-optimizer-rank" + std::to_string(options_.rank),
                                 std::string(kKey) + ".nvme_path", file_bytes());
  try {
    for (int s = 0; s < slots; ++s) {
      Slot slot;
      for (size_t k = 0; k < options_.names.size(); ++k)
        slot.buffers.push_back(static_cast<float*>(buffers_.allocate(group_numel_ * sizeof(float))));
      // The gradient's buffer last in each slot.
      if (options_.gradients) slot.buffers.push_back(static_cast<float*>(buffers_.allocate(group_numel_ * sizeof(float))));
      slot.read_crc.assign(options_.names.size(), 0);
      slots_.push_back(std::move(slot));
    }
    for (size_t i = 0; i < groups_.size(); ++i) {
      const std::vector<float*>& buffers = slots_[i % slots_.size()].buffers;
      groups_[i].state.assign(buffers.begin(), buffers.begin() + static_cast<int64_t>(options_.names.size()));
      if (options_.gradients) groups_[i].gradients = buffers.back();
    }
    if (options_.gradients) {
      // Pages never straddle sub-groups: a sub-group's gradient is read as whole pages, each
      // checked before the sub-group is handed out.
      page_numel_ = std::min(gradient_page_numel(numel), group_numel_);
      pages_per_group_ = (group_numel_ + page_numel_ - 1) / page_numel_;
      for (Slot& slot : slots_) slot.page_read_crc.assign(pages_per_group_, 0);
      for (int p = 0; p < kGradientPages; ++p)
        pages_.push_back({static_cast<float*>(buffers_.allocate(page_numel_ * sizeof(float)))});
    }
    reader_ = std::make_unique<io::RawAioHandle>(io::for_swap_reads(options_.aio));
    writer_ = std::make_unique<io::RawAioHandle>(options_.aio);
    // Every file's space is taken now, and the files hold the optimizer's initial zeros: reserved
    // blocks read as zeros; where the file system cannot reserve, the zeros are written.
    std::vector<std::string> paths;
    for (size_t k = 0; k < options_.names.size(); ++k) paths.push_back(path_of(k));
    if (options_.gradients) paths.push_back(gradient_path());
    bool reserved = true;
    for (const std::string& path : paths) reserved = io::preallocate(path, padded(numel) * sizeof(float)) && reserved;
    written_crc_.assign(paths.size(), std::vector<uint32_t>(groups_.size()));
    unchecked_.assign(paths.size(), std::vector<bool>(groups_.size(), false));
    float* zeros = slots_[0].buffers[0];
    std::fill(zeros, zeros + group_numel_, 0.0f);
    for (size_t f = 0; f < paths.size(); ++f)
      for (size_t i = 0; i < groups_.size(); ++i) {
        const int64_t bytes = padded(groups_[i].numel) * sizeof(float);
        if (reserved)
          written_crc_[f][i] = io::crc32c_of_zeros(bytes);
        else
          writer_->async_pwrite(zeros, bytes, paths[f], groups_[i].offset * sizeof(float), &written_crc_[f][i]);
      }
    writer_->wait();
    if (options_.gradients)
      for (int64_t page = 0; page < sub_groups() * pages_per_group_; ++page)
        page_crc_.push_back(io::crc32c_of_zeros(padded(page_valid(page)) * sizeof(float)));
  } catch (...) {
    writer_.reset();
    reader_.reset();
    remove_tree(folder_);
    throw;
  }
  log::info("offload_optimizer: ", options_.names.size(), " optimizer shards", options_.gradients ? " and the gradient" : "",
            " of ", numel, " fp32 elements on NVMe in ", folder_, ", ", groups_.size(), " sub-group(s) of ", group_numel_,
            ", ", slots, " in memory (", (buffer_bytes() + gradient_buffer_bytes()) / 1e6, " MB locked), pipeline_read ", options_.pipeline_read ? "on" : "off",
            ", pipeline_write ", options_.pipeline_write ? "on" : "off");
}

OptimizerSwapper::~OptimizerSwapper() {
  // The handles' destructors wait for queued I/O (and log its errors) before the files go.
  writer_.reset();
  reader_.reset();
  try {
    remove_tree(folder_);
  } catch (const Error& e) {
    log::warn_all("offload_optimizer: could not remove the swap folder: ", e.what());
  }
}

std::string OptimizerSwapper::path_of(size_t name) const { return folder_ + "/" + options_.names.at(name) + ".swp"; }

int64_t OptimizerSwapper::padded(int64_t numel) const { return io::round_up(numel, io::kAlignElements); }

int64_t OptimizerSwapper::buffer_bytes() const {
  return static_cast<int64_t>(slots_.size() * options_.names.size()) * group_numel_ * sizeof(float);
}

int64_t OptimizerSwapper::gradient_buffer_bytes() const {
  if (!options_.gradients) return 0;
  return (static_cast<int64_t>(slots_.size()) * group_numel_ + static_cast<int64_t>(pages_.size()) * page_numel_) *
         static_cast<int64_t>(sizeof(float));
}

int64_t OptimizerSwapper::file_bytes() const {
  const int64_t files = static_cast<int64_t>(options_.names.size()) + (options_.gradients ? 1 : 0);
  return files * padded(options_.shard_numel) * sizeof(float);
}

std::string OptimizerSwapper::block_name(size_t file, int64_t i) const {
  const SubGroup& g = groups_[i];
  return "sub-group " + std::to_string(i) + " (shard elements " + std::to_string(g.offset) + ".." +
         std::to_string(g.offset + g.numel) + ") of " + (file < options_.names.size() ? options_.names[file] : "gradients");
}

void OptimizerSwapper::free_slot(Slot& slot) {
  slot.group = -1;
  slot.state_read_at = slot.gradient_read_at = 0;
  slot.kept = slot.unwritten = slot.gradient_here = slot.stepped = false;
  slot.gradient_staged = 0;
}

void OptimizerSwapper::release_if_done(Slot& slot) {
  if (slot.group >= 0 && slot.stepped && !slot.unwritten && slot.write_done_at == 0 && slot.group != in_use_) free_slot(slot);
}

void OptimizerSwapper::queue_reads(int64_t first, int64_t last) {
  for (int64_t position = first; position <= std::min(last, sub_groups() - 1); ++position) {
    const int64_t j = step_order(position);
    Slot& slot = slot_of(j);
    if (slot.group != j) {
      release_if_done(slot);
      if (slot.group >= 0) return;  // still stepped or written: later sub-groups wait too
      queue_state_reads(j);
    }
    // Not while backward still stages it (a step begun in backward: it is read once complete).
    if (options_.gradients && in_step_ && !gradients_open_ && !slot.gradient_here) queue_gradient_reads(j);
  }
}

void OptimizerSwapper::queue_state_reads(int64_t i) {
  const SubGroup& g = groups_[i];
  Slot& slot = slot_of(i);
  free_slot(slot);
  slot.group = i;
  // Read for the coming step before or during its backward: that backward's gradient ranges are
  // staged here, unless some already went to the file (then all of them do).
  slot.gradient_here = options_.gradients && !gradient_in_file_[i] && (!in_step_ || gradients_open_);
  for (size_t k = 0; k < options_.names.size(); ++k)
    reader_->async_pread(g.state[k], padded(g.numel) * sizeof(float), path_of(k), g.offset * sizeof(float),
                         &slot.read_crc[k]);
  slot.state_read_at = reader_->queued_count();
  stats_.read_bytes += static_cast<int64_t>(options_.names.size()) * padded(g.numel) * sizeof(float);
}

void OptimizerSwapper::queue_gradient_reads(int64_t i) {
  const SubGroup& g = groups_[i];
  Slot& slot = slot_of(i);
  // Cut at the gradient's page boundaries, so that each piece is checked against its page.
  for (int64_t k = 0; k < pages_per_group_; ++k) {
    const int64_t page = i * pages_per_group_ + k;
    if (page_valid(page) > 0)
      reader_->async_pread(g.gradients + k * page_numel_, padded(page_valid(page)) * sizeof(float), gradient_path(),
                           page_begin(page) * sizeof(float), &slot.page_read_crc[k]);
  }
  slot.gradient_read_at = reader_->queued_count();
  slot.gradient_here = true;
  stats_.read_bytes += padded(g.numel) * sizeof(float);
}

void OptimizerSwapper::wait_reads(int64_t i) {
  Slot& slot = slot_of(i);
  if (slot.state_read_at == 0 && slot.gradient_read_at == 0) return;
  const SubGroup& g = groups_[i];
  try {
    stats_.read_seconds += io::wait_counted(*reader_, stats_, std::max(slot.state_read_at, slot.gradient_read_at));
  } catch (const Error& e) {
    throw io::naming_block(e, "sub-group " + std::to_string(i) + " (shard elements " + std::to_string(g.offset) + ".." +
                                  std::to_string(g.offset + g.numel) + ")")
        .with_rank(options_.rank);
  }
  if (slot.state_read_at > 0)
    for (size_t k = 0; k < options_.names.size(); ++k) {
      if (unchecked_[k][i]) {
        written_crc_[k][i] = slot.read_crc[k];
        unchecked_[k][i] = false;
        continue;
      }
      io::check_swap_block(written_crc_[k][i], slot.read_crc[k], path_of(k), g.offset * static_cast<int64_t>(sizeof(float)),
                           padded(g.numel) * static_cast<int64_t>(sizeof(float)), block_name(k, i), options_.rank);
    }
  if (slot.gradient_read_at > 0)
    for (int64_t k = 0; k < pages_per_group_; ++k) {
      const int64_t page = i * pages_per_group_ + k;
      if (page_valid(page) > 0)
        io::check_swap_block(page_crc_[page], slot.page_read_crc[k], gradient_path(), page_begin(page) * static_cast<int64_t>(sizeof(float)),
                             padded(page_valid(page)) * static_cast<int64_t>(sizeof(float)), page_name(page), options_.rank);
    }
  slot.state_read_at = slot.gradient_read_at = 0;
}

void OptimizerSwapper::drop_slots() {
  stats_.read_seconds += io::wait_counted(*reader_, stats_);
  for (Slot& slot : slots_)
    if (slot.unwritten) write_back(slot);
  wait_writes();
  for (Slot& slot : slots_) {
    if (slot.group >= 0 && slot.gradient_here) {
      // The gradient lives nowhere else: to the file, page by page, each with its checksum.
      const SubGroup& g = groups_[slot.group];
      float* gradients = slot.buffers.back();
      std::fill(gradients + g.numel, gradients + padded(g.numel), 0.0f);
      for (int64_t k = 0; k < pages_per_group_; ++k) {
        const int64_t page = slot.group * pages_per_group_ + k;
        if (page_valid(page) == 0) continue;
        writer_->sync_pwrite(gradients + k * page_numel_, padded(page_valid(page)) * sizeof(float), gradient_path(),
                             page_begin(page) * sizeof(float), &page_crc_[page]);
        stats_.write_bytes += padded(page_valid(page)) * sizeof(float);
      }
    }
    free_slot(slot);
  }
  prefetch_due_ = true;  // nothing is held for the next step now
}

int64_t OptimizerSwapper::page_of(int64_t offset) const {
  const int64_t group = offset / group_numel_;
  return group * pages_per_group_ + (offset - group * group_numel_) / page_numel_;
}

int64_t OptimizerSwapper::page_begin(int64_t page) const {
  return page / pages_per_group_ * group_numel_ + page % pages_per_group_ * page_numel_;
}

int64_t OptimizerSwapper::page_valid(int64_t page) const {
  const int64_t begin = page_begin(page);
  const int64_t group_end = (page / pages_per_group_ + 1) * group_numel_;
  return std::max<int64_t>(0, std::min({page_numel_, group_end - begin, options_.shard_numel - begin}));
}

std::string OptimizerSwapper::page_name(int64_t page) const {
  return "gradient page " + std::to_string(page) + " (shard elements " + std::to_string(page_begin(page)) + ".." +
         std::to_string(page_begin(page) + page_valid(page)) + ", sub-group " + std::to_string(page / pages_per_group_) + ")";
}

void OptimizerSwapper::wait_writes() {
  if (std::none_of(slots_.begin(), slots_.end(), [](const Slot& slot) { return slot.write_done_at > 0; })) return;
  stats_.write_seconds += io::wait_counted(*writer_, stats_);
  // The slots stay filled (the step may keep them) until a read needs them (queue_reads).
  for (Slot& slot : slots_) slot.write_done_at = 0;
}

void OptimizerSwapper::write_back(Slot& slot) {
  const SubGroup& g = groups_[slot.group];
  for (size_t k = 0; k < options_.names.size(); ++k)
    writer_->async_pwrite(g.state[k], padded(g.numel) * sizeof(float), path_of(k), g.offset * sizeof(float),
                          &written_crc_[k][slot.group]);
  slot.write_done_at = writer_->queued_count();
  slot.unwritten = false;
  stats_.write_bytes += static_cast<int64_t>(options_.names.size()) * padded(g.numel) * sizeof(float);
}

const OptimizerSwapper::SubGroup& OptimizerSwapper::swap_in(int64_t i) {
  in_step_ = true;
  prefetch_due_ = false;
  in_use_ = i;
  Slot& slot = slot_of(i);
  if (slot.group != i) {
    // Not read ahead nor kept (no pipeline_read, or the step's first sub-group with nothing
    // kept): the slot's last sub-group is written, and anything still read into it waited for,
    // before the slot is read into.
    if (slot.group >= 0 && slot.gradient_here && !slot.stepped)
      throw Error("offload_optimizer: internal error, sub-group " + std::to_string(slot.group) +
                  "'s gradient held in the slot that sub-group " + std::to_string(i) + " needs");
    if (slot.unwritten) write_back(slot);
    wait_writes();
    if (slot.group >= 0) stats_.read_seconds += io::wait_counted(*reader_, stats_);
    free_slot(slot);
  }
  // The reads ahead go behind i's on the handle, so they do not delay it.
  const int64_t position = position_of(i);
  queue_reads(position, options_.pipeline_read ? sub_groups() - 1 : position);
  wait_reads(i);
  slot.kept = false;
  return groups_[i];
}

void OptimizerSwapper::swap_out(int64_t i) {
  // The previous sub-group's writes are waited for where a read ahead will need its slot, which is
  // then never still being written for long.
  const int64_t position = position_of(i);
  const int64_t slots = static_cast<int64_t>(slots_.size());
  if (position - 1 + slots < sub_groups()) wait_writes();
  Slot& slot = slot_of(i);
  slot.stepped = true;
  if (position >= sub_groups() - slots) {
    slot.unwritten = true;  // the next step starts with it: written once it has stepped it again
  } else {
    write_back(slot);
    if (!options_.pipeline_write) wait_writes();
  }
  if (options_.pipeline_read) queue_reads(position + 1, sub_groups() - 1);
}

void OptimizerSwapper::finish_step() {
  stats_.read_seconds += io::wait_counted(*reader_, stats_);
  wait_writes();  // the files hold the step's result, but for the kept sub-groups
  // The slots of the sub-groups visited last hold their new values, unwritten: the next step, in
  // the other direction, starts with them. A step begun in backward always goes down the shard, so
  // its last sub-groups serve the next forward only, and release_kept() writes them back before
  // the next backward needs their slots (their gradients are not staged there).
  for (Slot& slot : slots_) {
    if (slot.group >= 0 && slot.stepped) {
      slot.stepped = false;
      slot.kept = true;
      slot.gradient_here = options_.gradients && !options_.step_in_backward;
      slot.gradient_staged = 0;
    } else {
      free_slot(slot);
    }
  }
  in_use_ = -1;
  in_step_ = false;
  prefetch_due_ = true;
  if (!options_.step_in_backward) descending_ = !descending_;
}

void OptimizerSwapper::release_kept() {
  for (Slot& slot : slots_) {
    if (!slot.kept) continue;
    if (slot.unwritten) write_back(slot);
    // No longer handed out (master_in_memory); the slot is free once the writes are done.
    slot.kept = false;
    slot.stepped = true;
  }
}

void OptimizerSwapper::settle(int64_t offset, int64_t count) {
  for (const Slot& slot : slots_) {
    if (slot.group < 0 || slot.write_done_at == 0) continue;
    const SubGroup& g = groups_[slot.group];
    if (offset < g.offset + g.numel && g.offset < offset + count) {
      wait_writes();
      return;
    }
  }
}

bool OptimizerSwapper::gradient_complete(int64_t i) const {
  const Slot& slot = slot_of(i);
  return slot.group == i && slot.gradient_here && slot.gradient_staged == groups_[i].numel;
}

const float* OptimizerSwapper::master_in_memory(int64_t offset, int64_t count) const {
  if (offset < 0 || count <= 0 || offset + count > options_.shard_numel) return nullptr;
  const int64_t i = offset / group_numel_;
  const SubGroup& g = groups_[i];
  const Slot& slot = slot_of(i);
  if (slot.group != i || !slot.kept || offset + count > g.offset + g.numel) return nullptr;
  return g.state[0] + (offset - g.offset);
}

bool OptimizerSwapper::overlay_unwritten(size_t name, int64_t offset, int64_t count, float* dst) const {
  bool any = false;
  for (const Slot& slot : slots_) {
    if (!slot.unwritten) continue;
    const SubGroup& g = groups_[slot.group];
    const int64_t lo = std::max(offset, g.offset), hi = std::min(offset + count, g.offset + g.numel);
    if (lo >= hi) continue;
    std::copy(g.state[name] + (lo - g.offset), g.state[name] + (hi - g.offset), dst + (lo - offset));
    any = true;
  }
  return any;
}

OptimizerSwapper::GradientPage& OptimizerSwapper::open_page(int64_t index, bool overwrite) {
  for (GradientPage& page : pages_)
    if (page.index == index) {
      if (page.write_done_at > 0) throw Error("offload_optimizer: gradient page " + std::to_string(index) + " staged twice in one backward");
      return page;
    }
  auto free_page = [&] { return std::find_if(pages_.begin(), pages_.end(), [](const GradientPage& p) { return p.index < 0; }); };
  auto page = free_page();
  if (page == pages_.end()) {
    // The oldest page written: the others' writes go on.
    int64_t oldest = 0;
    for (const GradientPage& p : pages_)
      if (p.write_done_at > 0 && (oldest == 0 || p.write_done_at < oldest)) oldest = p.write_done_at;
    if (oldest > 0) wait_gradient_writes(oldest);
    page = free_page();
  }
  if (page == pages_.end())
    throw Error("offload_optimizer: more than " + std::to_string(pages_.size()) +
                " gradient pages partly staged at once (the reducer's ranges are expected in shard order)");
  const int64_t begin = page_begin(index);
  const int64_t valid = page_valid(index);
  page->index = index;
  page->missing = valid;
  if (overwrite) {
    // Every shard element of the page is about to be staged; only the padding needs its zeros.
    std::fill(page->buffer + valid, page->buffer + padded(valid), 0.0f);
  } else {
    // Blocking: the time waited is the time the read was in flight.
    const double start = io::now();
    const std::string block = page_name(index);
    uint32_t crc = 0;
    try {
      reader_->sync_pread(page->buffer, padded(valid) * sizeof(float), gradient_path(), begin * sizeof(float), &crc);
    } catch (const Error& e) {
      throw io::naming_block(e, block).with_rank(options_.rank);
    }
    io::check_swap_block(page_crc_[index], crc, gradient_path(), begin * static_cast<int64_t>(sizeof(float)),
                         padded(valid) * static_cast<int64_t>(sizeof(float)), block, options_.rank);
    const double seconds = io::now() - start;
    stats_.read_bytes += padded(valid) * sizeof(float);
    stats_.read_seconds += seconds;
    stats_.wait_seconds += seconds;
  }
  return *page;
}

void OptimizerSwapper::write_gradients(const float* values, int64_t offset, int64_t count, bool overwrite) {
  gradients_open_ = true;
  if (prefetch_due_) {
    // A backward after a step with no slot kept: the state the next step reads first cannot
    // change before it. Stepping in backward, the slots are those release_kept() is writing back.
    prefetch_due_ = false;
    if (options_.step_in_backward) wait_writes();
    if (options_.pipeline_read) queue_reads(0, static_cast<int64_t>(slots_.size()) - 1);
  }
  while (count > 0) {
    const int64_t i = offset / group_numel_;
    const SubGroup& g = groups_[i];
    Slot& slot = slot_of(i);
    if (options_.step_in_backward) claim_slot(i);
    GradientPage* page = nullptr;
    float* dst = nullptr;
    int64_t n = 0;
    if (slot.group == i && slot.gradient_here) {
      // Held for the coming step: staged in the slot, never to the file and back.
      n = std::min(count, g.offset + g.numel - offset);
      dst = g.gradients + (offset - g.offset);
      slot.gradient_staged += n;
    } else {
      const int64_t index = page_of(offset);
      const int64_t at = offset - page_begin(index);
      n = std::min(count, page_valid(index) - at);
      page = &open_page(index, overwrite);
      gradient_in_file_[i] = true;
      dst = page->buffer + at;
    }
    if (overwrite) {
      std::copy(values, values + n, dst);
    } else {
      for (int64_t j = 0; j < n; ++j) dst[j] += values[j];  // as the in-memory shard's add_
    }
    gradient_sum_of_squares_ += options_.sum_of_squares(dst, n);
    if (page && (page->missing -= n) == 0) {
      const int64_t valid = page_valid(page->index);
      writer_->async_pwrite(page->buffer, padded(valid) * sizeof(float), gradient_path(),
                            page_begin(page->index) * sizeof(float), &page_crc_[page->index]);
      page->write_done_at = writer_->queued_count();
      stats_.write_bytes += padded(valid) * sizeof(float);
    }
    values += n;
    offset += n;
    count -= n;
  }
}

void OptimizerSwapper::claim_slot(int64_t i) {
  Slot& slot = slot_of(i);
  if (slot.group == i || gradient_in_file_[i]) return;
  // A range reaching past the sub-groups read ahead (a parameter larger than a sub-group): the
  // slot is i's once the sub-group stepped in it is written (the step body that swapped it out has
  // ended: this is the next range). One not stepped yet, or kept unwritten for the next forward,
  // keeps it, and i's gradient goes to the file.
  if (slot.group >= 0 && (!slot.stepped || slot.unwritten)) return;
  if (slot.write_done_at > 0) wait_writes();
  queue_state_reads(i);
}

void OptimizerSwapper::wait_gradient_writes(int64_t count) {
  if (count < 0) count = writer_->queued_count();
  if (std::none_of(pages_.begin(), pages_.end(), [&](const GradientPage& p) { return p.write_done_at > 0 && p.write_done_at <= count; }))
    return;
  stats_.write_seconds += io::wait_counted(*writer_, stats_, count);
  for (GradientPage& page : pages_)
    if (page.write_done_at > 0 && page.write_done_at <= count) page = {page.buffer};
}

double OptimizerSwapper::finish_gradients() {
  for (const GradientPage& page : pages_)
    if (page.index >= 0 && page.write_done_at == 0)
      throw Error("offload_optimizer: gradient page " + std::to_string(page.index) + " lacks " +
                  std::to_string(page.missing) + " elements at the end of backward");
  for (Slot& slot : slots_) {
    if (slot.group < 0 || !slot.gradient_here) continue;
    const int64_t numel = groups_[slot.group].numel;
    if (slot.gradient_staged != 0 && slot.gradient_staged != numel)
      throw Error("offload_optimizer: sub-group " + std::to_string(slot.group) + "'s gradient got " +
                  std::to_string(slot.gradient_staged) + " of its " + std::to_string(numel) + " elements in one backward");
    slot.gradient_staged = 0;
  }
  wait_gradient_writes();
  gradients_open_ = false;
  gradient_in_file_.assign(groups_.size(), false);
  const double sum = gradient_sum_of_squares_;
  gradient_sum_of_squares_ = 0;
  return sum;
}

void OptimizerSwapper::read_gradients(int64_t offset, float* dst, int64_t count) {
  while (count > 0) {
    const int64_t i = offset / group_numel_;
    const SubGroup& g = groups_[i];
    const Slot& slot = slot_of(i);
    const int64_t n = std::min(count, g.offset + g.numel - offset);
    if (slot.group == i && slot.gradient_here)
      std::copy(g.gradients + (offset - g.offset), g.gradients + (offset - g.offset) + n, dst);
    else
      reader_->sync_pread(dst, n * sizeof(float), gradient_path(), offset * sizeof(float));
    dst += n;
    offset += n;
    count -= n;
  }
}

void OptimizerSwapper::fill(size_t name, const std::function<void(int64_t, int64_t, float*)>& produce) {
  drop_slots();
  float* buffer = slots_[0].buffers[0];
  for (size_t i = 0; i < groups_.size(); ++i) {
    const SubGroup& g = groups_[i];
    // The padding past the shard's end stays zero, as the files started.
    std::fill(buffer, buffer + padded(g.numel), 0.0f);
    produce(g.offset, g.numel, buffer);
    writer_->sync_pwrite(buffer, padded(g.numel) * sizeof(float), path_of(name), g.offset * sizeof(float),
                         &written_crc_.at(name)[i]);
    unchecked_[name][i] = false;
  }
}

void OptimizerSwapper::read(size_t name, int64_t offset, float* dst, int64_t count) {
  if (count <= 0) return;
  reader_->sync_pread(dst, count * sizeof(float), path_of(name), offset * sizeof(float));
  overlay_unwritten(name, offset, count, dst);
}

void OptimizerSwapper::write(size_t name, int64_t offset, const float* src, int64_t count) {
  if (count <= 0) return;
  drop_slots();  // a sub-group read ahead or kept would miss the new values
  writer_->sync_pwrite(src, count * sizeof(float), path_of(name), offset * sizeof(float));
  // Part of a sub-group changed: its checksum is taken again when a step next reads it.
  for (int64_t i = offset / group_numel_; i <= (offset + count - 1) / group_numel_; ++i) unchecked_.at(name).at(i) = true;
}

io::SwapStats OptimizerSwapper::take_stats() {
  const io::SwapStats stats = stats_;
  stats_ = {};
  return stats;
}

}  // namespace ds::zero
