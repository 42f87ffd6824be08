// EngineCore's checkpoints: sharded, one file per rank, described by one index (see
// docs/checkpoints.md and dstrain/engine/checkpoint/index.hpp).
//
// Save: every rank streams its own shard-shaped state (fp32 master, optimizer state) and its
// per-rank state (an optimizer's local_state, the CPU generator; rank 0 also the optimizer's
// replicated_state) into <dir>/.<tag>.partial.<host>.<pid>/rank<r>.bin (rank 0's host and pid), a
// bucket at a time straight from the tensors, computing the CRC-32C as it goes; rank 0 gathers the
// sizes and checksums, writes index.json, renames the folder to <dir>/<tag> and only then updates
// <dir>/latest. With checkpoint.use_node_local_storage, <dir> is each node's own: the first rank of
// each host does rank 0's part there (the same index, every node's), and each rank's shard goes to
// its own node's folder. A crash at any point leaves the previous checkpoint and `latest` intact; a later
// save on the same host removes the orphaned .partial folder once its creator is gone. No rank
// gathers anything whole.
//
// Load: every rank reads, for each of its chunks, exactly the byte ranges that hold it from the
// saving ranks' files, straight into its own shard: any stage and world size loads any checkpoint
// (DeepSpeed's universal checkpoint, without the conversion). The shards' checksums are verified
// first (each rank checks a share, a bucket at a time). Per-rank state is restored when the world
// size is unchanged and reset to zero, with a warning, otherwise (DeepSpeed always resets
// OneBitAdam's errors on load); replicated state is read from rank 0's shard at any world size.
// With node-local storage a rank reads only its node's folder: what it needs and that folder lacks
// (another layout) is an error naming the host and the file, and the state only rank 0's node holds
// (ZeRO 0's whole copy, replicated state) rank 0 reads and broadcasts.
#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <stdio.h>
#include <torch/torch.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <functional>
#include <optional>
#include <set>

#include "dstrain/engine/checkpoint/index.hpp"
#include "dstrain/engine/checkpoint/folder.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/memory_plan.hpp"
#include "dstrain/io/shard_file.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/remove_tree.hpp"

namespace ds {
namespace {

namespace fs = std::filesystem;
using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

std::string dtype_name(at::ScalarType type) {
  switch (type) {
    case at::kFloat: return "float32";
    case at::kDouble: return "float64";
    case at::kHalf: return "float16";
    case at::kBFloat16: return "bfloat16";
    case at::kByte: return "uint8";
    case at::kInt: return "int32";
    case at::kLong: return "int64";
    default: return c10::toString(type);
  }
}

// Runs `body` on every rank; a failure on any rank becomes an error on every rank (the failing
// rank's own; the others' naming that rank), so that no rank waits forever in a later collective.
void collectively(comm::Backend& group, const std::function<void()>& body) {
  std::optional<Error> failure;
  try {
    body();
  } catch (const Error& e) {
    failure = e;
  } catch (const std::exception& e) {
    failure = Error(e.what());
  }
  at::Tensor failed = at::zeros({group.world_size()}, at::kFloat);
  if (failure) failed[group.rank()] = 1.0f;
  group.all_reduce(failed, comm::ReduceOp::Max);
  if (failure) throw *failure;
  for (int r = 0; r < group.world_size(); ++r)
    if (failed[r].item<float>() > 0) throw Error("checkpoint: rank " + std::to_string(r) + " failed (see its error)").with_rank(r);
}

// Every rank's `text`, in rank order.
std::vector<std::string> all_gather_strings(comm::Backend& group, const std::string& text) {
  at::Tensor length = at::full({1}, static_cast<int64_t>(text.size()), at::kLong);
  group.all_reduce(length, comm::ReduceOp::Max);
  at::Tensor mine = at::zeros({length.item<int64_t>() + 1}, at::kByte);
  std::copy(text.begin(), text.end(), mine.data_ptr<uint8_t>());
  std::vector<at::Tensor> all;
  for (int r = 0; r < group.world_size(); ++r) all.push_back(at::empty_like(mine));
  group.all_gather(all, mine);
  std::vector<std::string> texts;
  for (const at::Tensor& t : all) texts.emplace_back(reinterpret_cast<const char*>(t.data_ptr<uint8_t>()));
  return texts;
}

std::string host_of(const std::string& owner) { return owner.substr(0, owner.rfind('.')); }

// The rank of `group` that prepares the save folder, names the partial folder and writes the index
// and `latest`: rank 0, or with node-local storage the first rank on each host (`owners`: every
// rank's owner_id()), in that node's own folder.
int index_writer(const std::vector<std::string>& owners, int rank, bool node_local) {
  if (!node_local) return 0;
  int first = 0;
  while (host_of(owners[first]) != host_of(owners[rank])) ++first;
  return first;
}

// Appends `tensor` (CPU, contiguous) to `out` as one section, a bucket at a time; `check` (optional)
// sees each piece before it is written.
void append_section(io::ShardWriter& out, ckpt::ShardEntry& entry, const std::string& name, const at::Tensor& tensor,
                    int64_t bucket_bytes, const std::function<void(const at::Tensor&)>& check = {}) {
  const at::Tensor flat = tensor.contiguous().view({-1});
  entry.sections.push_back({name, dtype_name(flat.scalar_type()), out.bytes(), static_cast<int64_t>(flat.nbytes())});
  const int64_t per_piece = std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(flat.element_size()));
  for (int64_t at = 0; at < flat.numel(); at += per_piece) {
    const at::Tensor piece = flat.narrow(0, at, std::min(per_piece, flat.numel() - at));
    if (check) check(piece);
    out.append(piece.data_ptr(), static_cast<int64_t>(piece.nbytes()));
  }
}

// Appends `numel` fp32 values as one section, a bucket at a time: `piece(begin, count)` gives
// elements [begin, begin + count) as a contiguous CPU tensor (read from a swap file, or assembled
// from a master that lies in the model's slices).
void append_streamed_section(io::ShardWriter& out, ckpt::ShardEntry& entry, const std::string& section,
                             int64_t numel, int64_t bucket_bytes,
                             const std::function<at::Tensor(int64_t, int64_t)>& piece,
                             const std::function<void(const at::Tensor&)>& check = {}) {
  entry.sections.push_back({section, "float32", out.bytes(), numel * static_cast<int64_t>(sizeof(float))});
  const int64_t per_piece = std::max<int64_t>(1, bucket_bytes / static_cast<int64_t>(sizeof(float)));
  for (int64_t at = 0; at < numel; at += per_piece) {
    const at::Tensor values = piece(at, std::min(per_piece, numel - at));
    if (check) check(values);
    out.append(values.data_ptr(), static_cast<int64_t>(values.nbytes()));
  }
}

// A changed model or optimizer is an error naming what changed, before any state is read.
void check_compatible(const ckpt::CheckpointIndex& index, const std::string& path, const Config& config,
                      const std::vector<std::string>& names, const std::vector<std::vector<int64_t>>& shapes,
                      const NamedTensors& state) {
  const std::string optimizer = to_string(config.optimizer().type);
  if (index.optimizer != optimizer)
    throw Error("checkpoint was trained with optimizer " + index.optimizer + ", this run configures " + optimizer +
                ": its state cannot carry over").with_key("optimizer.type").with_path(path);
  std::vector<std::string> state_names;
  for (const auto& [name, tensor] : state) state_names.push_back(name);
  if (state_names != index.optimizer_state)
    throw Error("checkpoint's optimizer state (" + nlohmann::json(index.optimizer_state).dump() + ") differs from this optimizer's (" +
                nlohmann::json(state_names).dump() + ")").with_key("optimizer").with_path(path);

  const nlohmann::json saved = index.config.value("dstrain", nlohmann::json::object()).value("model", nlohmann::json::object());
  const nlohmann::json now = config.dstrain_block().value("model", nlohmann::json::object());
  std::string changed;
  for (const auto* side : {&saved, &now})
    for (const auto& item : side->items()) {
      const std::string& key = item.key();
      if (side == &now && saved.contains(key)) continue;
      const std::string before = saved.contains(key) ? saved[key].dump() : "(unset)";
      const std::string after = now.contains(key) ? now[key].dump() : "(unset)";
      if (before != after) changed += (changed.empty() ? "" : ", ") + key + " " + before + " -> " + after;
    }
  if (!changed.empty())
    throw Error("the model differs from the checkpoint's: " + changed).with_key("dstrain.model").with_path(path);

  for (size_t i = 0; i < std::max(names.size(), index.params.size()); ++i) {
    if (i >= names.size() || i >= index.params.size() || names[i] != index.params[i].name)
      throw Error("checkpoint parameter #" + std::to_string(i) + " is '" +
                  (i < index.params.size() ? index.params[i].name : "(none)") + "', the model's '" +
                  (i < names.size() ? names[i] : "(none)") + "' (" + std::to_string(index.params.size()) +
                  " tensors saved, " + std::to_string(names.size()) + " in the model)").with_path(path);
    if (shapes[i] != index.params[i].shape)
      throw Error("checkpoint parameter '" + names[i] + "' has shape " + nlohmann::json(index.params[i].shape).dump() +
                  ", the model " + nlohmann::json(shapes[i]).dump()).with_path(path);
  }
}

}  // namespace

int64_t EngineCore::checkpoint_bucket_bytes() const {
  return ds::checkpoint_bucket_bytes(plan_.zero.reduce_bucket_size);
}

at::Tensor EngineCore::gather_full(size_t i, const at::Tensor& shard) {
  const zero::ParamSlot& slot = layout_->slot(i);
  at::Tensor chunk = layout_->chunk_view(i, shard);
  at::Tensor full = chunk;
  if (layout_->partitions() > 1) {
    full = at::empty({slot.chunk * layout_->partitions()}, chunk.options());
    group_->all_gather_into(full, chunk.contiguous());
  }
  return full.narrow(0, 0, slot.numel).view(shapes_[i]);
}

std::map<std::string, at::Tensor> EngineCore::consolidated_weights() {
  wait_for_parameters();
  std::map<std::string, at::Tensor> weights;
  const at::Tensor master = partition_->read(0, 0, layout_->shard_numel());
  for (size_t i = 0; i < params_.size(); ++i) weights[names_[i]] = gather_full(i, master).clone();
  return weights;
}

void EngineCore::save_checkpoint(const std::string& dir, std::string tag) {
  wait_for_parameters();
  if (tag.empty()) tag = "global_step" + std::to_string(global_steps_);
  at::NoGradGuard no_grad;
  const int rank = group_->rank();
  const fs::path folder = fs::path(dir) / tag;
  const std::vector<std::string> owners = all_gather_strings(*group_, owner_id());
  const int writer = index_writer(owners, rank, config_.checkpoint().use_node_local_storage);
  const bool writes_index = rank == writer;
  // Named by its creator (host and pid), so that no other job takes it for its own debris.
  const fs::path partial = fs::path(dir) / ("." + tag + ".partial." + owners[writer]);
  const int64_t bucket = checkpoint_bucket_bytes();
  collectively(*group_, [&] {
    if (!writes_index) return;
    prepare_save_dir(dir);
    remove_tree(partial.string());  // this process's own, left by a save of the same tag that failed
    std::error_code ec;
    if (!fs::create_directory(partial, ec)) throw Error("cannot create checkpoint folder").with_path(partial.string()).with_errno(ec.value());
  });

  ckpt::ShardEntry mine{"rank" + std::to_string(rank) + ".bin", 0, 0, {}};
  try {
    collectively(*group_, [&] {
      io::ShardWriter out((partial / mine.file).string());
      // Only the partitions' owners write the shard-shaped state: under ZeRO 0 every rank holds the
      // same whole copy, and rank 0 writes it.
      const auto finite = [&](const at::Tensor& piece) {
        if (!piece.isfinite().all().item<bool>())
          throw Error("refusing to save checkpoint '" + tag + "' at step " + std::to_string(global_steps_) +
                      ": the fp32 master weights are not finite (the training diverged)").with_path(dir);
      };
      ShardOptimizer& optimizer = partition_->optimizer();
      if (rank < layout_->partitions()) {
        // The master and the optimizer's state, wherever the partition keeps them, a bucket at a
        // time: views where they lie in memory, copies joined from the model's slices or read from
        // the swap files.
        const std::vector<std::string> sections = partition_->sections();
        for (size_t k = 0; k < sections.size(); ++k)
          append_streamed_section(
              out, mine, sections[k], layout_->shard_numel(), bucket,
              [&](int64_t begin, int64_t count) { return partition_->read(k, begin, count).cpu().contiguous(); },
              k == 0 ? std::function<void(const at::Tensor&)>(finite) : nullptr);
      }
      if (rank == 0)
        for (auto& [name, tensor] : optimizer.replicated_state())
          append_section(out, mine, "replicated/" + name, tensor, bucket);
      for (auto& [name, tensor] : optimizer.local_state()) append_section(out, mine, "local/" + name, tensor, bucket);
      append_section(out, mine, "rng", at::detail::getDefaultCPUGenerator().get_state(), bucket);
      out.finish();
      mine.bytes = out.bytes();
      mine.crc32c = out.crc32c();
    });

    ckpt::CheckpointIndex index;
    index.tag = tag;
    index.world_size = group_->world_size();
    index.zero_stage = zero_stage();
    index.partitions = layout_->partitions();
    index.shard_numel = layout_->shard_numel();
    for (size_t i = 0; i < params_.size(); ++i) {
      const zero::ParamSlot& slot = layout_->slot(i);
      index.params.push_back({names_[i], shapes_[i], slot.numel, slot.chunk, slot.shard_offset});
    }
    index.optimizer = to_string(config_.optimizer().type);
    for (auto& [name, tensor] : partition_->optimizer().state()) index.optimizer_state.push_back(name);
    const LossScalerState& s = scaler_.state();
    index.counters = {{"global_steps", global_steps_},
                      {"optimizer_steps", optimizer_steps_},
                      {"skipped_steps", skipped_steps_},
                      {"micro_steps", micro_steps_},
                      {"loss_scaler",
                       {{"scale", s.scale},
                        {"iteration", s.iteration},
                        {"last_overflow_iteration", s.last_overflow_iteration},
                        {"hysteresis_left", s.hysteresis_left}}}};
    index.config = apply_memory_plan(config_, plan_).to_json();  // as it ran: the planner's knobs set
    nlohmann::json entry = {{"file", mine.file}, {"bytes", mine.bytes}, {"crc32c", mine.crc32c}, {"sections", nlohmann::json::array()}};
    for (const ckpt::ShardSection& section : mine.sections)
      entry["sections"].push_back({{"name", section.name}, {"dtype", section.dtype}, {"offset", section.offset}, {"bytes", section.bytes}});
    const std::vector<std::string> entries = all_gather_strings(*group_, entry.dump());

    collectively(*group_, [&] {
      if (!writes_index) return;
      for (const std::string& text : entries) {
        const nlohmann::json e = nlohmann::json::parse(text);
        ckpt::ShardEntry shard{e.at("file").get<std::string>(), e.at("bytes").get<int64_t>(),
                               e.at("crc32c").get<uint32_t>(), {}};
        for (const auto& section : e.at("sections"))
          shard.sections.push_back({section.at("name").get<std::string>(), section.at("dtype").get<std::string>(),
                                    section.at("offset").get<int64_t>(), section.at("bytes").get<int64_t>()});
        index.shards.push_back(std::move(shard));
      }
      const std::string index_path = (partial / "index.json").string();
      io::ShardWriter out(index_path);
      const std::string text = index.to_json().dump(1);
      out.append(text.data(), static_cast<int64_t>(text.size()));
      out.finish();
      fsync_path(partial.string());
      if (fs::exists(folder)) {
        // Saving a tag again: swap the folders in one step, then drop the old one.
        if (::renameat2(AT_FDCWD, partial.c_str(), AT_FDCWD, folder.c_str(), RENAME_EXCHANGE) != 0)
          throw Error("cannot replace checkpoint folder").with_path(folder.string()).with_errno(errno);
        remove_tree(partial.string());
      } else if (std::rename(partial.c_str(), folder.c_str()) != 0) {
        throw Error("cannot rename checkpoint folder").with_path(folder.string()).with_errno(errno);
      }
      fsync_path(dir);
      write_file_atomically((fs::path(dir) / "latest").string(), tag + "\n");
      log::info("checkpoint: saved ", folder.string(), " (", index.shards.size(), " shards)");
    });
  } catch (...) {
    // A failed save leaves nothing behind. Every rank is here (collectively() made the failure
    // everyone's), and waits until each folder's writer has cleaned up before the error ends the job.
    if (writes_index) {
      try {
        remove_tree(partial.string());
      } catch (const Error& e) {
        log::warn("checkpoint: could not clean up after the failed save: ", e.what());
      }
    }
    group_->barrier();
    throw;
  }
}

void EngineCore::load_checkpoint(const std::string& dir, std::string tag) {
  wait_for_parameters();  // before the loaded values land where gathers still write
  at::NoGradGuard no_grad;
  ShardOptimizer& optimizer = partition_->optimizer();
  NamedTensors state = optimizer.state();
  const int rank = group_->rank();
  const bool node_local = config_.checkpoint().use_node_local_storage;
  // ZeRO 0's one whole copy lies in rank 0's shard, on rank 0's node only: with node-local storage
  // rank 0 reads it and broadcasts it.
  const bool whole_from_rank0 = node_local && layout_->partitions() == 1 && group_->world_size() > 1;
  const bool reads_state = !whole_from_rank0 || rank == 0;
  const bool reads_replicated = !node_local || rank == 0;
  // Every rank reads the folder, the index and the description on its own; agreeing on the outcome
  // keeps a rank that found a problem from leaving the others inside the collectives below.
  std::string folder;
  ckpt::CheckpointIndex index;
  std::set<int> needed;  // the shards this rank reads
  collectively(*group_, [&] {
    try {
      folder = ckpt::checkpoint_folder(dir, tag);
      index = ckpt::CheckpointIndex::read(folder);
    } catch (const Error& e) {
      if (!node_local) throw;
      Error on_this_node(e.message() + " (on host " + host_of(owner_id()) +
                         ": with checkpoint.use_node_local_storage every node reads its own folder)");
      if (e.path()) on_this_node.with_path(*e.path());
      if (e.errnum()) on_this_node.with_errno(*e.errnum());
      throw on_this_node.with_key("checkpoint.use_node_local_storage");
    }
    check_compatible(index, (fs::path(folder) / "index.json").string(), config_, names_, shapes_, state);
    if (reads_state)
      for (size_t i = 0; i < params_.size(); ++i) {
        const int64_t saved_chunk = index.params[i].chunk;
        const int64_t begin = std::min<int64_t>(layout_->rank() * layout_->slot(i).chunk, layout_->slot(i).numel);
        const int64_t end = std::min<int64_t>(begin + layout_->slot(i).chunk, layout_->slot(i).numel);
        for (int64_t k = begin / std::max<int64_t>(1, saved_chunk); begin < end && k * saved_chunk < end; ++k)
          needed.insert(static_cast<int>(k));
      }
    if (index.world_size == group_->world_size()) needed.insert(rank);  // its per-rank state and generator
    if (reads_replicated && !optimizer.replicated_state().empty()) needed.insert(0);
    if (!node_local) return;
    for (const int k : needed) {
      const std::string path = (fs::path(folder) / index.shards.at(k).file).string();
      if (fs::exists(path)) continue;
      throw Error("checkpoint: rank " + std::to_string(rank) + " on host " + host_of(owner_id()) + " reads " +
                  index.shards[k].file + " of " + index.tag + ", which this node's folder lacks: with node-local "
                  "storage each node holds only the shards of its own ranks: resume with the saving run's " +
                  std::to_string(index.world_size) + " ranks on the same nodes, or gather every node's folder "
                  "into one (docs/checkpoints.md, \"Node-local storage\")")
          .with_key("checkpoint.use_node_local_storage").with_path(path);
    }
  });
  ckpt::ShardSet shards(folder, index);

  // Every shard checked before any state changes: rank r checks shards r, r + world, ... (with
  // node-local storage, the shards it reads), and every rank learns what the others found, so all
  // stop with the same error.
  {
    at::Tensor buffer = at::empty({checkpoint_bucket_bytes()}, at::kByte);
    std::string found;  // "<shard>\t<problem>\n" per bad shard
    std::vector<int> checked(needed.begin(), needed.end());
    if (!node_local) {
      checked.clear();
      for (int k = rank; k < index.world_size; k += group_->world_size()) checked.push_back(k);
    }
    for (const int k : checked) {
      std::string problem;
      try {
        problem = shards.verify(k, buffer.data_ptr(), buffer.numel());
      } catch (const Error& e) {
        problem = e.message() + (e.errnum() ? std::string(": ") + std::strerror(*e.errnum()) : "");
      }
      if (!problem.empty()) found += std::to_string(k) + "\t" + problem + "\n";
    }
    for (const std::string& text : all_gather_strings(*group_, found)) {
      const auto tab = text.find('\t');
      if (tab == std::string::npos) continue;
      const std::string problem = text.substr(tab + 1, text.find('\n') - tab - 1);
      throw Error(problem).with_path(shards.path(std::stoi(text.substr(0, tab))));
    }
  }

  // Each chunk of each section goes into the partition through one bucket-sized buffer, wherever
  // the partition keeps it (the model's own storage, a copy, the swap files).
  const int64_t per_piece = checkpoint_bucket_bytes() / static_cast<int64_t>(sizeof(float));
  const std::vector<std::string> sections = partition_->sections();
  at::Tensor piece = at::empty({per_piece}, at::kFloat);
  for (size_t i = 0; i < params_.size() && reads_state; ++i) {
    const zero::ParamSlot& slot = layout_->slot(i);
    const int64_t begin = std::min<int64_t>(layout_->rank() * slot.chunk, slot.numel);
    const int64_t count = std::min<int64_t>(slot.chunk, slot.numel - begin);
    for (size_t k = 0; k < sections.size(); ++k)
      for (int64_t at = 0; at < slot.chunk; at += per_piece) {
        const int64_t n = std::min(per_piece, slot.chunk - at);
        const int64_t valid = std::clamp<int64_t>(count - at, 0, n);
        if (valid > 0) shards.read_elements(i, sections[k], begin + at, valid, piece.data_ptr<float>());
        if (valid < n) piece.narrow(0, valid, n - valid).zero_();
        partition_->write(k, slot.shard_offset + at, piece.narrow(0, 0, n));
      }
  }
  // ZeRO 0 (never offloaded): its one whole copy, broadcast from rank 0.
  if (whole_from_rank0)
    for (size_t i = 0; i < params_.size(); ++i) {
      group_->broadcast(partition_->master_chunk(i), 0);
      for (auto& [name, tensor] : state) group_->broadcast(layout_->chunk_view(i, tensor), 0);
    }
  const nlohmann::json& counters = index.counters;
  global_steps_ = counters.at("global_steps").get<int64_t>();
  optimizer_steps_ = counters.at("optimizer_steps").get<int64_t>();
  skipped_steps_ = counters.at("skipped_steps").get<int64_t>();
  micro_steps_ = counters.at("micro_steps").get<int64_t>();
  const nlohmann::json& s = counters.at("loss_scaler");
  scaler_.restore({s.at("scale").get<double>(), s.at("iteration").get<int64_t>(),
                   s.at("last_overflow_iteration").get<int64_t>(), s.at("hysteresis_left").get<int>()});

  const bool same_world = index.world_size == group_->world_size();
  if (const NamedTensors local = optimizer.local_state(); !local.empty()) {
    std::string names;
    for (const auto& [name, tensor] : local) names += (names.empty() ? "" : ", ") + name;
    if (same_world) {
      for (const auto& [name, tensor] : local)
        shards.read_section(group_->rank(), "local/" + name, tensor.data_ptr(), static_cast<int64_t>(tensor.nbytes()));
    } else {
      log::warn("checkpoint: the world size changed (", index.world_size, " -> ", group_->world_size(),
                "); the optimizer's per-rank state (", names, ") restarts from zero");
      for (const auto& [name, tensor] : local) tensor.zero_();
    }
  }
  // State that every rank holds alike is rank 0's copy, whatever the world size.
  for (auto& [name, tensor] : optimizer.replicated_state()) {
    if (reads_replicated)
      shards.read_section(0, "replicated/" + name, tensor.data_ptr(), static_cast<int64_t>(tensor.nbytes()));
    if (node_local) group_->broadcast(tensor, 0);
  }
  // Each rank resumes its own random stream when the world size is unchanged.
  if (same_world) {
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    at::Tensor rng = at::empty_like(generator.get_state());
    shards.read_section(group_->rank(), "rng", rng.data_ptr(), static_cast<int64_t>(rng.nbytes()));
    generator.set_state(rng);
  }
  lr_ = schedule_.lr(std::max<int64_t>(0, optimizer_steps_ - 1));
  partition_->refresh_model();
  reducer_->zero_grad_shard();
  log::info("checkpoint: loaded ", folder, " at step ", global_steps_);
}

}  // namespace ds
