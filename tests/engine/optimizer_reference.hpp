// Shared by the Lamb, OneBitLamb and ZeroOneAdam tests: a small GPT trained by the engine, and the
// pieces of an independent plain-LibTorch reference (the same model trained by hand on a flat copy of
// its weights, and DeepSpeed's compressed allreduce simulated over the ordinary all_reduce).
#pragma once

#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cmath>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/checkpoint/index.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/io/crc32c.hpp"
#include "training_loop.hpp"

namespace optimizer_reference {

constexpr int64_t kSeed = 11;
constexpr int kMicro = 2;
constexpr int kAccumulation = 2;

inline ds::models::GPT make_model() {
  torch::manual_seed(kSeed);
  return ds::models::GPT(ds::models::GPTConfig::from_json(
      {{"n_layer", 2}, {"n_head", 2}, {"n_embd", 32}, {"block_size", 16}, {"vocab_size", 64}, {"dropout", 0.0}}));
}

inline std::unique_ptr<ds::data::TokenSource> make_source() {
  return ds::data::make_token_source(nlohmann::json{{"type", "synthetic"}, {"seed", 5}}, 64, 16);
}

inline ds::Config make_config(const nlohmann::json& optimizer, int stage = 0) {
  return ds::Config::from_json({
      {"train_micro_batch_size_per_gpu", kMicro},
      {"gradient_accumulation_steps", kAccumulation},
      {"optimizer", optimizer},
      // One bucket: the engine's allreduce is then the reference's, element for element.
      {"zero_optimization", {{"stage", stage}, {"reduce_bucket_size", 1 << 30}}},
  });
}

inline std::shared_ptr<ds::Engine<ds::models::GPT>> make_engine(const nlohmann::json& optimizer, int stage = 0) {
  return ds::initialize(make_model(), make_config(optimizer, stage), ds::comm::init_distributed("mpi"));
}

inline double mean_over_ranks(double value) {
  at::Tensor t = torch::tensor({value}, torch::kDouble);
  ds::comm::world().all_reduce(t, ds::comm::ReduceOp::Avg);
  return t.item<double>();
}

// The global batch loss of each step, on the data the reference trains on.
inline std::vector<double> train(ds::Engine<ds::models::GPT>& engine, int steps) {
  return training_loop::train(engine, steps, *make_source());
}

// DeepSpeed's compressed allreduce as tests/comm simulates it: each rank's scaled signs gathered
// (through an ordinary all_reduce) and averaged, then each rank's server chunk compressed again and
// gathered.
struct CompressionSimulation {
  int64_t numel, padded, chunk;
  at::Tensor worker_error, server_error;

  CompressionSimulation(int64_t n, int world) : numel(n) {
    const int64_t unit = 8 * world;
    padded = (n + unit - 1) / unit * unit;
    chunk = padded / world;
    worker_error = at::zeros({padded});
    server_error = at::zeros({chunk});
  }

  static at::Tensor sign_of(const at::Tensor& x) { return at::where(x >= 0, 1.0f, -1.0f); }
  static at::Tensor rms(const at::Tensor& x) {
    return (x.to(at::kDouble).norm() / std::sqrt(double(x.numel()))).to(at::kFloat);
  }

  at::Tensor allreduce(const at::Tensor& buffer) {
    ds::comm::Backend& world = ds::comm::world();
    const int w = world.world_size(), rank = world.rank();
    const at::Tensor x = at::cat({buffer, at::zeros({padded - numel})}) + worker_error;
    const at::Tensor compressed = rms(x) * sign_of(x);
    worker_error = x - compressed;
    // Every rank's compressed buffer (an all_reduce of rows that are zero but this rank's), then the
    // server's sum in rank order: any other order rounds differently, and a 1-bit sign decision
    // later turns that difference into ±scale.
    at::Tensor rows = at::zeros({w, padded});
    rows[rank].copy_(compressed);
    world.all_reduce(rows);
    at::Tensor sum = at::zeros({chunk});
    for (int j = 0; j < w; ++j) sum = sum + rows[j].narrow(0, rank * chunk, chunk) * (1.0 / w);
    const at::Tensor served = sum + server_error;
    const at::Tensor server_compressed = rms(served) * sign_of(served);
    server_error = served - server_compressed;
    at::Tensor result = at::zeros({padded});
    result.narrow(0, rank * chunk, chunk).copy_(server_compressed);
    world.all_reduce(result);
    return result.narrow(0, 0, numel).clone();
  }
};

// The model trained by hand: `weights` is a flat copy of its trainable parameters, in parameter
// order; `segments` are each parameter's [offset, numel) in it.
struct ReferenceModel {
  ds::models::GPT model = make_model();
  std::vector<at::Tensor> params;
  std::vector<std::pair<int64_t, int64_t>> segments;
  at::Tensor weights;
  std::unique_ptr<ds::data::TokenSource> source = make_source();

  ReferenceModel() {
    std::vector<at::Tensor> flat;
    int64_t offset = 0;
    for (auto& item : model->named_parameters()) {
      if (!item.value().requires_grad()) continue;
      params.push_back(item.value());
      segments.emplace_back(offset, item.value().numel());
      offset += item.value().numel();
      flat.push_back(item.value().detach().reshape({-1}));
    }
    weights = at::cat(flat);
  }

  int64_t numel() const { return weights.numel(); }
  at::Tensor segment(const at::Tensor& flat, size_t k) const {
    return flat.narrow(0, segments[k].first, segments[k].second);
  }

  // This rank's gradient of step `step` (from 0) at the current weights, flat; `loss` gets the
  // global batch loss.
  at::Tensor local_gradient(int64_t step, double& loss) {
    const int rank = ds::comm::get_rank(), world = ds::comm::get_world_size();
    {
      at::NoGradGuard no_grad;
      for (size_t k = 0; k < params.size(); ++k) params[k].view({-1}).copy_(segment(weights, k));
    }
    for (at::Tensor& p : params) p.mutable_grad() = at::Tensor();
    double sum = 0;
    for (int a = 0; a < kAccumulation; ++a) {
      ds::data::Batch batch = source->batch(step, a, rank, world, kMicro);
      at::Tensor l = ds::models::cross_entropy_loss(model->forward(batch.inputs), batch.targets);
      (l * (1.0 / kAccumulation)).backward();
      sum += l.item<double>();
    }
    loss = mean_over_ranks(sum / kAccumulation);
    std::vector<at::Tensor> grads;
    for (at::Tensor& p : params) grads.push_back(p.grad().reshape({-1}));
    return at::cat(grads);
  }

  static at::Tensor averaged(at::Tensor grad) {
    ds::comm::world().all_reduce(grad, ds::comm::ReduceOp::Avg);
    return grad;
  }
};

// The engine's weights against the reference's: every element within `tolerance`, but for at most
// `sign_flips` (a fraction of the model's elements). 1-bit compression keeps the sign of each
// element; where that element is within roundoff of zero, the engine and the reference can take
// opposite signs, because their gradients are summed in another order (two ranks' half batches
// against one whole batch, another BLAS, another thread count: pip LibTorch on the CUDA machine did
// it). That element then moves by 2·lr·scale/(√v + eps), far past any roundoff bound, while the
// others stay within it (under LAMB a few more of its tensor, through the trust ratio: 47 of 28032
// elements at -np 4 on 3 threads). A wrong algorithm (a late freeze) moves 90% or more.
constexpr double kSignFlips = 1e-2;  // of the model's elements
class WeightComparison {
 public:
  WeightComparison(double tolerance, double sign_flips) : tolerance_(tolerance), sign_flips_(sign_flips) {}

  void add(const std::string& name, const at::Tensor& actual, const at::Tensor& expected) {
    const at::Tensor diff = (actual.reshape({-1}) - expected.reshape({-1})).abs();
    const int64_t beyond = (diff > tolerance_).sum().item<int64_t>();
    const double largest = diff.max().item<double>();
    if (beyond > 0) report_ += name + ": " + std::to_string(beyond) + " beyond, max " + std::to_string(largest) + "; ";
    beyond_ += beyond;
    elements_ += diff.numel();
    ++tensors_;
  }

  int tensors() const { return tensors_; }

  void require() const {
    INFO(beyond_ << " of " << elements_ << " elements beyond " << tolerance_ << " (" << report_ << ")");
    REQUIRE(static_cast<double>(beyond_) <= sign_flips_ * static_cast<double>(elements_));
  }

 private:
  double tolerance_, sign_flips_;
  int64_t beyond_ = 0, elements_ = 0;
  int tensors_ = 0;
  std::string report_;
};

// The engine's losses and weights against the reference's.
// loss_tolerance: relative, per step; sign_flips: as WeightComparison's.
inline void require_close(ds::Engine<ds::models::GPT>& engine, const std::vector<double>& losses,
                          const std::vector<double>& expected, ReferenceModel& reference, double weight_tolerance,
                          double loss_tolerance = 1e-5, double sign_flips = 0) {
  REQUIRE(losses.size() == expected.size());
  for (size_t s = 0; s < losses.size(); ++s) {
    INFO("step " << s + 1 << ": " << losses[s] << " vs " << expected[s]);
    REQUIRE(std::abs(losses[s] - expected[s]) <= loss_tolerance * std::abs(expected[s]));
  }
  const auto weights = engine.consolidated_weights();
  WeightComparison comparison(weight_tolerance, sign_flips);
  for (auto& item : reference.model->named_parameters()) {
    if (!item.value().requires_grad()) continue;
    comparison.add(item.key(), weights.at(item.key()), reference.segment(reference.weights, comparison.tensors()));
  }
  comparison.require();
  REQUIRE(static_cast<size_t>(comparison.tensors()) == weights.size());
}

// Rank 0 zeroes every shard's local/* sections (the compression errors) and records the new
// checksums in the index.
inline void zero_local_sections(const std::string& dir, const std::string& tag) {
  if (ds::comm::get_rank() == 0) {
    const std::string folder = ds::ckpt::checkpoint_folder(dir, tag);
    ds::ckpt::CheckpointIndex index = ds::ckpt::CheckpointIndex::read(folder);
    for (ds::ckpt::ShardEntry& shard : index.shards) {
      const std::string path = folder + "/" + shard.file;
      int zeroed = 0;
      for (const ds::ckpt::ShardSection& section : shard.sections) {
        if (section.name.rfind("local/", 0) != 0) continue;
        std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
        file.seekp(section.offset);
        file.write(std::string(static_cast<size_t>(section.bytes), '\0').data(), section.bytes);
        ++zeroed;
      }
      REQUIRE(zeroed == 2);  // worker_error, server_error
      std::ifstream in(path, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      shard.crc32c = ds::io::crc32c(0, bytes.data(), bytes.size());
    }
    std::ofstream(folder + "/index.json", std::ios::trunc) << index.to_json().dump();
  }
  ds::comm::barrier();
}

}  // namespace optimizer_reference
