// EngineCore's checkpoints: one consolidated file per tag, written by rank 0, atomically.
//
// Layout of <dir>/<tag>.pt (a LibTorch archive):
//   master/<param>            full fp32 weights
//   optim/<state>/<param>     full fp32 optimizer state (exp_avg, exp_avg_sq, momentum_buffer)
//   rng/<rank>                each rank's CPU generator state
//   meta/...                  steps, loss scaler, world size, stage, the config as JSON
// Being whole, a checkpoint loads under any ZeRO stage and any world size: each rank cuts its
// shard out of the full tensors (DeepSpeed's zero_to_fp32 / universal checkpoint, done on save).
//
// An optimizer's per-rank state (ShardOptimizer::local_state(), e.g. OneBitAdam's compression
// errors) has no whole form: each rank writes its own <dir>/<tag>.rank<r>.pt (local/<state>), before
// `latest` names the tag. It is restored when the world size is unchanged and reset to zero, with a
// warning, otherwise (DeepSpeed always resets OneBitAdam's errors on load).
#include <ATen/CPUGeneratorImpl.h>
#include <fcntl.h>
#include <torch/torch.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>

#include "dstrain/engine/engine.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds {
namespace {

namespace fs = std::filesystem;

void fsync_path(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) throw Error("cannot open for fsync").with_path(path).with_errno(errno);
  const int rc = ::fsync(fd);
  const int err = errno;
  ::close(fd);
  if (rc != 0) throw Error("fsync failed").with_path(path).with_errno(err);
}

// Write to a temporary name, fsync, rename over the final name, fsync the directory: a crash at any
// point leaves either the old file or the new one, never a torn one.
template <class WriteFn>
void write_atomically(const std::string& path, WriteFn write) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  write(tmp);
  fsync_path(tmp);
  if (std::rename(tmp.c_str(), path.c_str()) != 0) throw Error("rename failed").with_path(path).with_errno(errno);
  fsync_path(fs::path(path).parent_path().string());
}

at::Tensor scalar(double value) { return torch::tensor({value}, torch::kDouble); }
double read_scalar(torch::serialize::InputArchive& archive, const std::string& key) {
  at::Tensor value;
  archive.read(key, value);
  return value.item<double>();
}

using NamedTensors = std::vector<std::pair<std::string, at::Tensor>>;

std::string local_state_path(const std::string& dir, const std::string& tag, int rank) {
  return (fs::path(dir) / (tag + ".rank" + std::to_string(rank) + ".pt")).string();
}

void save_local_state(const std::string& path, const NamedTensors& local) {
  torch::serialize::OutputArchive archive;
  for (const auto& [name, tensor] : local) archive.write("local/" + name, tensor);
  write_atomically(path, [&](const std::string& tmp) { archive.save_to(tmp); });
}

// Restores the tensors of `local` from `path`, or zeroes them (their starting value) with the reason
// when the file cannot hold this rank's state.
void load_local_state(const std::string& path, bool same_world, const NamedTensors& local) {
  std::string reason;
  if (!same_world) reason = "the world size changed";
  else if (!fs::exists(path)) reason = "the checkpoint has no " + fs::path(path).filename().string();
  if (!reason.empty()) {
    std::string names;
    for (const auto& [name, tensor] : local) names += (names.empty() ? "" : ", ") + name;
    log::warn("checkpoint: ", reason, "; the optimizer's per-rank state (", names, ") restarts from zero");
    for (const auto& [name, tensor] : local) tensor.zero_();
    return;
  }
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  for (const auto& [name, tensor] : local) {
    at::Tensor saved;
    archive.read("local/" + name, saved);
    if (saved.numel() != tensor.numel())
      throw Error("checkpoint state '" + name + "' has " + std::to_string(saved.numel()) + " elements, the optimizer " +
                  std::to_string(tensor.numel())).with_path(path);
    tensor.copy_(saved.view(tensor.sizes()));
  }
}

}  // namespace

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
  std::map<std::string, at::Tensor> weights;
  for (size_t i = 0; i < params_.size(); ++i) weights[names_[i]] = gather_full(i, master_).clone();
  return weights;
}

void EngineCore::save_checkpoint(const std::string& dir, std::string tag) {
  if (tag.empty()) tag = "global_step" + std::to_string(global_steps_);
  const bool writer = group_->rank() == 0;
  torch::serialize::OutputArchive archive;
  for (size_t i = 0; i < params_.size(); ++i) {
    archive.write("master/" + names_[i], gather_full(i, master_));
    for (auto& [state_name, state] : optimizer_->state())
      archive.write("optim/" + state_name + "/" + names_[i], gather_full(i, state));
  }
  at::Tensor rng = at::detail::getDefaultCPUGenerator().get_state();
  std::vector<at::Tensor> rngs;
  for (int r = 0; r < group_->world_size(); ++r) rngs.push_back(at::empty_like(rng));
  group_->all_gather(rngs, rng);
  for (int r = 0; r < group_->world_size(); ++r) archive.write("rng/" + std::to_string(r), rngs[r]);
  const LossScalerState& s = scaler_.state();
  archive.write("meta/global_steps", scalar(global_steps_));
  archive.write("meta/optimizer_steps", scalar(optimizer_steps_));
  archive.write("meta/skipped_steps", scalar(skipped_steps_));
  archive.write("meta/micro_steps", scalar(micro_steps_));
  archive.write("meta/world_size", scalar(group_->world_size()));
  archive.write("meta/zero_stage", scalar(zero_stage()));
  archive.write("meta/scaler", torch::tensor({s.scale, double(s.iteration), double(s.last_overflow_iteration),
                                              double(s.hysteresis_left)}, torch::kDouble));
  archive.write("meta/config", c10::IValue(config_.to_json().dump()));
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw Error("cannot create checkpoint directory").with_path(dir).with_errno(ec.value());
  if (const NamedTensors local = optimizer_->local_state(); !local.empty()) {
    save_local_state(local_state_path(dir, tag, group_->rank()), local);
    group_->barrier();  // every rank's file is in place before `latest` names the tag
  }
  if (writer) {
    const std::string path = (fs::path(dir) / (tag + ".pt")).string();
    write_atomically(path, [&](const std::string& tmp) { archive.save_to(tmp); });
    write_atomically((fs::path(dir) / "latest").string(), [&](const std::string& tmp) {
      std::ofstream out(tmp);
      out << tag;
      if (!out.flush()) throw Error("cannot write").with_path(tmp).with_errno(errno);
    });
    log::info("checkpoint: saved ", path);
  }
  group_->barrier();
}

void EngineCore::load_checkpoint(const std::string& dir, std::string tag) {
  if (tag.empty()) {
    const std::string latest = (fs::path(dir) / "latest").string();
    std::ifstream in(latest);
    if (!(in >> tag)) throw Error("no checkpoint to resume: cannot read").with_path(latest).with_errno(errno);
  }
  const std::string path = (fs::path(dir) / (tag + ".pt")).string();
  if (!fs::exists(path)) throw Error("checkpoint not found").with_path(path).with_errno(ENOENT);
  torch::serialize::InputArchive archive;
  archive.load_from(path);
  at::NoGradGuard no_grad;
  auto state = optimizer_->state();
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor full;
    archive.read("master/" + names_[i], full);
    if (full.numel() != layout_->slot(i).numel)
      throw Error("checkpoint parameter '" + names_[i] + "' has " + std::to_string(full.numel()) +
                  " elements, the model " + std::to_string(layout_->slot(i).numel)).with_path(path);
    layout_->copy_chunk(i, full, layout_->rank(), layout_->chunk_view(i, master_));
    for (auto& [state_name, tensor] : state) {
      archive.read("optim/" + state_name + "/" + names_[i], full);
      layout_->copy_chunk(i, full, layout_->rank(), layout_->chunk_view(i, tensor));
    }
  }
  global_steps_ = static_cast<int64_t>(read_scalar(archive, "meta/global_steps"));
  optimizer_steps_ = static_cast<int64_t>(read_scalar(archive, "meta/optimizer_steps"));
  skipped_steps_ = static_cast<int64_t>(read_scalar(archive, "meta/skipped_steps"));
  micro_steps_ = static_cast<int64_t>(read_scalar(archive, "meta/micro_steps"));
  const int saved_world = static_cast<int>(read_scalar(archive, "meta/world_size"));
  at::Tensor scaler;
  archive.read("meta/scaler", scaler);
  scaler_.restore({scaler[0].item<double>(), static_cast<int64_t>(scaler[1].item<double>()),
                   static_cast<int64_t>(scaler[2].item<double>()), static_cast<int>(scaler[3].item<double>())});
  if (const NamedTensors local = optimizer_->local_state(); !local.empty())
    load_local_state(local_state_path(dir, tag, group_->rank()), saved_world == group_->world_size(), local);
  // Each rank resumes its own random stream when the world size is unchanged.
  if (saved_world == group_->world_size()) {
    at::Tensor rng;
    archive.read("rng/" + std::to_string(group_->rank()), rng);
    at::Generator generator = at::detail::getDefaultCPUGenerator();
    generator.set_state(rng);
  }
  lr_ = schedule_.lr(std::max<int64_t>(0, optimizer_steps_ - 1));
  refresh_model_from_master();
  reducer_->zero_grad_shard();
  log::info("checkpoint: loaded ", path, " at step ", global_steps_);
}

}  // namespace ds
