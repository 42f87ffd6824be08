#include "dstrain/engine/memory_plan.hpp"

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "dstrain/comm/backend.hpp"
#include "dstrain/engine/models/activation_checkpointing.hpp"
#include "dstrain/engine/partition/model_weights.hpp"
#include "dstrain/engine/partition/optimizer_partition.hpp"
#include "dstrain/engine/partition/step_in_backward.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "dstrain/runtime/rank_env.hpp"
#include "dstrain/zero/buffer_sizes.hpp"

namespace ds {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

int64_t model_dtype_bytes(const Config& config) { return config.bf16().enabled || config.fp16().enabled ? 2 : 4; }

// What the built-in GPT's forward keeps for backward, in elements: per block the LayerNorms'
// inputs and outputs, q|k|v, the attention output and its projection, the MLP's 4C-wide input and
// GELU output and the residuals, 16 B*T*C in all, plus the attention's B*H*T*T probabilities;
// outside the blocks the embeddings and the last LayerNorm (3 B*T*C) and the logits with their
// softmax (2 B*T*V). Checkpointed every k blocks, each segment keeps only its input and one
// segment at a time is recomputed. Backward adds the gradients flowing back through one block, as
// large as that block's activations. Measured against the trainer's activation_mb (docs/zero.md).
// Counted in double and capped at 2^60: a config the trainer must refuse (block_size 1e9, whose
// T*T alone passes int64_t) still gets a count that is huge, never one that wrapped negative.
int64_t gpt_activation_elements(const models::GPTConfig& gpt, int64_t micro_batch, int checkpoint_interval) {
  const double b = static_cast<double>(micro_batch), t = static_cast<double>(gpt.block_size);
  const double btc = b * t * static_cast<double>(gpt.n_embd);
  const double block = 16 * btc + b * static_cast<double>(gpt.n_head) * t * t;
  const double outside = 3 * btc + 2 * b * t * static_cast<double>(gpt.vocab_size);
  const double layers = static_cast<double>(gpt.n_layer);
  const int64_t k = std::min<int64_t>(std::max(checkpoint_interval, 1), gpt.n_layer);
  const double elements = checkpoint_interval <= 0
                              ? (layers + 1) * block + outside
                              : static_cast<double>(ceil_div(gpt.n_layer, k)) * btc + static_cast<double>(k + 1) * block + outside;
  return static_cast<int64_t>(std::min(elements, 0x1p60));
}

// Stage 3's parameters gathered for each use (above the persistence threshold), largest first.
std::vector<int64_t> gathered_numels(const ModelShape& shape, const ZeroConfig& zero) {
  std::vector<int64_t> gathered;
  for (int64_t numel : shape.numels)
    if (numel > zero.stage3_param_persistence_threshold) gathered.push_back(numel);
  std::sort(gathered.rbegin(), gathered.rend());
  return gathered;
}

// A module in use holds at most the two largest whole (a GPT block's MLP).
int64_t two_largest(const std::vector<int64_t>& largest_first) {
  int64_t sum = 0;
  for (size_t i = 0; i < std::min<size_t>(2, largest_first.size()); ++i) sum += largest_first[i];
  return sum;
}

// The numels whole as gathered: each padded to a multiple of the partitions.
int64_t padded_sum(const std::vector<int64_t>& numels, int64_t partitions) {
  int64_t sum = 0;
  for (int64_t numel : numels) sum += ceil_div(numel, partitions) * partitions;
  return sum;
}

MemoryPlan size_with(const Config& config, const ModelShape& shape, int world, const ZeroConfig& zero) {
  MemoryPlan plan;
  plan.stage = zero.stage;
  plan.world = world;
  plan.zero = zero;
  const int64_t db = model_dtype_bytes(config);
  const int64_t partitions = zero.stage >= 1 ? world : 1;
  const bool nvme_params = zero.offload_param.device == OffloadDevice::Nvme && zero.stage == 3;

  std::vector<int64_t> chunks, packed;
  int64_t shard = 0, whole = 0, persistent = 0, largest = 0;
  std::vector<int64_t> partitioned;  // stage 3: the parameters gathered for each use
  for (int64_t numel : shape.numels) {
    const int64_t chunk = ceil_div(numel, partitions);
    chunks.push_back(chunk);
    packed.push_back(chunk * partitions);
    shard += chunk;
    whole += numel;
    largest = std::max(largest, numel);
    if (numel <= zero.stage3_param_persistence_threshold)
      persistent += numel;
    else
      partitioned.push_back(numel);
  }

  ModelStateBytes& state = plan.model_state;
  // Where the master, the optimizer's state and the gradient shard live: the engine's own choice
  // (optimizer_partition.hpp), and each placement's bytes from there.
  const PartitionSizes placed = partition_sizes(
      choose_partition(zero, {static_cast<int>(partitions), db == 4, shape.on_gpu, shape.aliased}), config, shard,
      static_cast<int>(partitions));
  const bool nvme_optimizer = placed.kind == PartitionKind::Nvme;
  const bool nvme_gradients = placed.gradients_on_nvme;
  // The model's weights as held: whole at stages 0-2; at stage 3 this rank's partition (unless on
  // NVMe), the persistent parameters whole and hpZ's secondary copy, 1/H of every gathered
  // parameter (as gathered: padded).
  const int64_t hpz = zero.zero_hpz_partition_size;
  int64_t secondary = 0;
  if (zero.stage == 3 && hpz > 1 && hpz < partitions)
    for (size_t i = 0; i < shape.numels.size(); ++i)
      if (shape.numels[i] > zero.stage3_param_persistence_threshold) secondary += packed[i] / hpz;
  const int64_t weights =
      zero.stage == 3 ? (nvme_params ? 0 : db * shard) + db * persistent + db * secondary : db * whole;
  state.parameters = placed.parameters(weights);
  state.gradients = placed.gradients();
  state.optimizer = placed.optimizer();
  // The 1-bit family (stages 0-2; docs/optimizers.md, "ZeRO-1 and ZeRO-2"): the compressed allreduce
  // runs on the whole model's flat vector padded to 8 x world at every stage, so the worker's error
  // is that whole vector and the server's one chunk of it. Under partitions the gradients it
  // compresses after the freeze are this rank's whole local gradients, the warm-up's shard freed
  // at the freeze, and the averaged momentum is kept between steps as sign bits (P/8) and one
  // scale per chunk.
  // The backend keeps its scratch between steps (mpi_compressed_allreduce.cpp): the signs sent and
  // received (P/8 each) and the server chunk's (P/8N), and at stage 0 a padded copy of a buffer
  // that is not padded already (stages 1-2 compress the padded local gradients in place).
  if (is_onebit(config.optimizer().type) && zero.stage <= 2) {
    const int64_t padded = ceil_div(whole, 8 * int64_t{world}) * 8 * world;
    state.optimizer += 4 * (padded + padded / world);
    if (config.optimizer().type == OptimizerType::OneBitLamb)
      state.optimizer += 3 * 8 * static_cast<int64_t>(shape.numels.size());  // per-tensor coefficients (double)
    if (config.optimizer().type == OptimizerType::ZeroOneAdam) state.optimizer += 8;  // the lr sum (double)
    plan.compression_buffers = 2 * (padded / 8) + padded / world / 8;
    if (partitions > 1) {
      state.gradients = 4 * padded;
      plan.compression_buffers += padded / 8 + 4 * world;
    } else if (padded != whole) {
      plan.compression_buffers += 4 * padded;
    }
  }

  // Stages 0-1 accumulating over micro-steps hold every whole gradient until the boundary, and so
  // does the 1-bit family's warm-up at stage 2; otherwise a gradient lives whole only until the
  // reducer packs it.
  const bool boundary_only = zero.stage <= 1 || (zero.stage == 2 && is_onebit(config.optimizer().type));
  plan.backward_gradients =
      db * (boundary_only && config.batch_resolved() && config.gradient_accumulation_steps() > 1 ? whole : largest);

  // A bucket packed for a reduce-scatter or a swap file has a buffer of its own, up to four at once
  // with overlap_comm (zero::reduce_buffer_numel: the one packing, two in flight, one kept for
  // reuse; measured at 100M, ZeRO-3, -np 4: 55 MB where two would be 34); with one partition and
  // no sink each bucket is the gradient shard's own slice, reduced in place, and costs none. With
  // more than one rank each collective in flight (one, two with overlap_comm) also holds a
  // temporary as large as its input inside Open MPI: libnbc's in-place MPI_Iallreduce (stage 0; a
  // binomial tree) reduces into a buffer the size of each piece it is given, and coll base's
  // reduce-scatter algorithms accumulate the whole input. Measured at stage 0 (25M GPT fp32,
  // -np 2): one bucket of the whole model (DeepSpeed's 5e8) peaks 97 MB (one model of fp32) above
  // 1M-element buckets, 746 against 649 MB.
  if ((world > 1 || nvme_gradients) && !packed.empty()) {
    std::vector<int64_t> bucket_numels;
    for (const zero::BucketRange& range : zero::reduce_buckets(packed, zero.reduce_bucket_size, zero.overlap_comm)) {
      int64_t numel = 0;
      for (size_t i = range.first; i <= range.last; ++i) numel += packed[i];
      bucket_numels.push_back(numel);
    }
    const int64_t widest = *std::max_element(bucket_numels.begin(), bucket_numels.end());
    const int64_t in_flight = std::min<int64_t>(zero.overlap_comm ? 2 : 1, static_cast<int64_t>(bucket_numels.size()));
    const int64_t bucket_buffers =
        partitions > 1 || nvme_gradients ? zero::reduce_buffer_numel(bucket_numels, zero.overlap_comm ? 2 : 0) : 0;
    const int64_t collective_temporaries = world > 1 ? in_flight * widest : 0;
    const int64_t sink_staging = nvme_gradients ? in_flight * (widest / partitions) : 0;
    plan.reduce_buckets = 4 * (bucket_buffers + collective_temporaries + sink_staging);
  }

  if (zero.stage == 3) {
    // The module in use holds at most the two largest parameters whole (a GPT block's MLP); the
    // prefetch adds up to stage3_prefetch_bucket_size more, of parameters that fit in it, while
    // everything whole stays within stage3_max_live_parameters.
    std::sort(partitioned.rbegin(), partitioned.rend());
    int64_t in_use = 0;
    for (size_t i = 0; i < std::min<size_t>(2, partitioned.size()); ++i) in_use += partitioned[i];
    int64_t fitting = 0;
    for (int64_t numel : partitioned)
      if (numel <= zero.stage3_prefetch_bucket_size) fitting += numel;
    const int64_t prefetch = std::max<int64_t>(
        0, std::min({zero.stage3_prefetch_bucket_size, fitting, zero.stage3_max_live_parameters - in_use}));
    plan.gathered_parameters = db * (in_use + prefetch);
    // A pipeline stage whose parameters all fit within stage3_max_live_parameters holds them whole
    // through each batch (PipelineEngine), each padded to the partitions as gathered.
    const int64_t held = padded_sum(partitioned, partitions);
    if (config.pipeline().stages && held <= zero.stage3_max_live_parameters) plan.gathered_parameters = db * held;
  } else if (partitions > 1) {
    // Also with dstrain.gather_in_forward, whose gathers are in place: the measured peak did not
    // move (25M GPT, -np 4, stage 1: 450 MB per rank against 446 with the gather in the step).
    plan.refresh_gather = db * (partitions + 1) * refresh_gather_width(zero.allgather_bucket_size, static_cast<int>(partitions));
  }

  if (nvme_optimizer) {
    const int64_t group = zero::optimizer_sub_group_numel(shard, zero.sub_group_size);
    const int64_t slots =
        zero::optimizer_swap_slots(zero.offload_optimizer.pipeline_read, zero.offload_optimizer.pipeline_write);
    plan.optimizer_swap_buffers = placed.optimizer_swap_buffers(slots, group);
    plan.gradient_swap_buffers = placed.gradient_swap_buffers(slots, group);
  }
  if (nvme_params) {
    const zero::ParamSwapSizes sizes = zero::param_swap_sizes(chunks, zero.offload_param.max_in_cpu);
    plan.param_swap_memory =
        4 * (sizes.resident_numel + (sizes.largest_swapped > 0 ? zero.offload_param.buffer_count * sizes.buffer_numel : 0));
  }

  if (shape.gpt && config.batch_resolved())
    plan.activations = db * gpt_activation_elements(*shape.gpt, config.train_micro_batch_size_per_gpu(),
                                                    activation_checkpoint_interval(config));
  plan.checkpoint_bucket = checkpoint_bucket_bytes(zero.reduce_bucket_size);
  plan.baseline = kProcessBaselineBytes + kEngineResidueBytes;
  return plan;
}

// Whether the user left `key` (under zero_optimization) to dstrain: absent, null or "auto".
bool left_unset(const Config& config, const std::string& key) { return !config.given("zero_optimization." + key); }

// The reason the multi-node defaults give, which the engine's start line looks for.
const char* const kSeveralNodes = "the job spans several nodes";

// A knob the planner may choose: its key under zero_optimization, how to read and set it, and the
// least it may shrink to.
struct Knob {
  std::string key;
  std::function<int64_t(const ZeroConfig&)> get;
  std::function<void(ZeroConfig&, int64_t)> set;
  int64_t floor = 0;
  bool by_one = false;  // a count: shrinks by one, not by half
};

std::vector<Knob> knobs() {
  return {
      {"reduce_bucket_size", [](const ZeroConfig& z) { return z.reduce_bucket_size; },
       [](ZeroConfig& z, int64_t v) { z.reduce_bucket_size = v; }, int64_t{1} << 16},
      {"stage3_prefetch_bucket_size", [](const ZeroConfig& z) { return z.stage3_prefetch_bucket_size; },
       [](ZeroConfig& z, int64_t v) { z.stage3_prefetch_bucket_size = v; }, 0},
      {"stage3_param_persistence_threshold", [](const ZeroConfig& z) { return z.stage3_param_persistence_threshold; },
       [](ZeroConfig& z, int64_t v) { z.stage3_param_persistence_threshold = v; }, 0},
      {"sub_group_size", [](const ZeroConfig& z) { return z.sub_group_size; },
       [](ZeroConfig& z, int64_t v) { z.sub_group_size = v; }, int64_t{1} << 16},
      {"offload_param.max_in_cpu", [](const ZeroConfig& z) { return z.offload_param.max_in_cpu; },
       [](ZeroConfig& z, int64_t v) { z.offload_param.max_in_cpu = v; }, 0},
      {"offload_param.buffer_count", [](const ZeroConfig& z) { return int64_t{z.offload_param.buffer_count}; },
       [](ZeroConfig& z, int64_t v) { z.offload_param.buffer_count = static_cast<int>(v); }, 1, true},
  };
}

int64_t shrunk(const Knob& knob, int64_t value) {
  return std::max(knob.floor, knob.by_one ? value - 1 : value / 2);
}

std::string mb(int64_t bytes) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << bytes / 1e6 << " MB";
  return out.str();
}

// The hidden size from the parameters when the config does not say: the most frequent length of a
// 1-D parameter (a transformer's LayerNorm weights and biases and its projections' biases are d
// long); 0 when no length repeats.
int64_t guess_hidden(const std::vector<std::vector<int64_t>>& shapes) {
  std::map<int64_t, int> count;
  for (const auto& shape : shapes)
    if (shape.size() == 1) ++count[shape[0]];
  int64_t best = 0;
  int most = 1;
  for (const auto& [length, n] : count)
    if (n > most) best = length, most = n;
  return best;
}

}  // namespace

ModelShape gpt_shape(const models::GPTConfig& gpt) {
  ModelShape shape;
  const int64_t C = gpt.n_embd;
  auto linear = [&](int64_t in, int64_t out) {
    shape.numels.push_back(in * out);
    if (gpt.bias) shape.numels.push_back(out);
  };
  auto layer_norm = [&] {
    shape.numels.push_back(C);
    if (gpt.bias) shape.numels.push_back(C);
  };
  shape.numels.push_back(gpt.vocab_size * C);  // wte, also the head
  shape.numels.push_back(gpt.block_size * C);  // wpe
  for (int64_t layer = 0; layer < gpt.n_layer; ++layer) {
    layer_norm();
    linear(C, 3 * C);
    linear(C, C);
    layer_norm();
    linear(C, 4 * C);
    linear(4 * C, C);
  }
  layer_norm();
  shape.hidden = C;
  shape.gpt = gpt;
  return shape;
}

ModelShape gpt_stage_shape(const models::GPTConfig& gpt, int first, int last) {
  const ModelShape whole = gpt_shape(gpt);
  const int64_t layers = gpt.n_layer;
  const size_t final_norm = gpt.bias ? 2 : 1;
  const size_t per_block = layers > 0 ? (whole.numels.size() - 2 - final_norm) / static_cast<size_t>(layers) : 0;
  ModelShape stage;
  stage.hidden = whole.hidden;
  stage.numels.reserve(whole.numels.size() + 1);
  auto take = [&](size_t begin, size_t count) {
    stage.numels.insert(stage.numels.end(), whole.numels.begin() + begin, whole.numels.begin() + begin + count);
  };
  if (first == 0) take(0, 2);  // wte, wpe
  for (int64_t layer = std::max<int64_t>(first, 1); layer < std::min<int64_t>(last, layers + 1); ++layer)
    take(2 + static_cast<size_t>(layer - 1) * per_block, per_block);
  if (last == layers + 2) {
    take(whole.numels.size() - final_norm, final_norm);
    if (first > 0) stage.numels.push_back(whole.numels[0]);  // the head's own copy of the tied wte
  }
  return stage;
}


int64_t checkpoint_bucket_bytes(int64_t reduce_bucket_size) {
  return std::clamp<int64_t>(reduce_bucket_size * int64_t{4}, 4096, int64_t{64} << 20);
}

MemoryPlan size_memory(const Config& config, const ModelShape& shape, int world, std::optional<int> stage) {
  ZeroConfig zero = config.zero_optimization();
  if (stage) zero.stage = *stage;
  return size_with(config, shape, world, zero);
}

int64_t link_bucket_numel(int64_t model_numel) {
  // 5e6 fp32 elements are 20 MB, 160 ms on a 1 Gbit/s link: each Open MPI round's latency (well
  // under a millisecond) is amortised, and measured on the cluster harness (25M GPT, 4 x 1: 1.22x
  // DDP). A model of under four such buckets gets four, so that several are in flight during
  // backward rather than one at its end.
  constexpr int64_t kMeasuredNumel = 5'000'000, kLeastBuckets = 4, kFloor = int64_t{1} << 16;
  return std::clamp(ceil_div(model_numel, kLeastBuckets), kFloor, kMeasuredNumel);
}

namespace {

const char* const kShrunk = "shrunk to fit the budget";

// A plan the search found, and how many times it shrank a knob to fit.
struct Search {
  MemoryPlan plan;
  int shrinks = 0;
};

// The knobs chosen for the budget; with overlap_off, as if overlap_comm were false.
Search search_plan(const Config& config, const ModelShape& shape, int world, const MemoryBudget& budget,
                   bool several_nodes, bool overlap_off) {
  ZeroConfig zero = config.zero_optimization();
  const int64_t d = shape.hidden;
  std::vector<ChosenKnob> chosen;
  if (overlap_off) {
    zero.overlap_comm = false;
    chosen.push_back({"zero_optimization.overlap_comm", 0, "off: its second reduce bucket in flight goes to the NVMe swap"});
  }
  auto choose = [&](const std::string& key, int64_t value, const std::string& why,
                    const std::function<void(ZeroConfig&, int64_t)>& set) {
    if (!left_unset(config, key)) return;
    set(zero, value);
    chosen.push_back({"zero_optimization." + key, value, why});
  };
  const std::vector<Knob> all = knobs();
  auto knob = [&](const std::string& key) -> const Knob& {
    return *std::find_if(all.begin(), all.end(), [&](const Knob& k) { return k.key == key; });
  };

  // Across nodes the link, not the cores, sets the step's pace (docs/multi-node.md): buckets reduced
  // while backward goes on, which the reducer polls from every gradient hook, and sized for the
  // link. Chosen here, before the search, so that the plan counts their two buckets in flight.
  bool link_bucket = false;
  if (several_nodes && world > 1) {
    choose("overlap_comm", 1, kSeveralNodes, [](ZeroConfig& z, int64_t v) { z.overlap_comm = v != 0; });
    link_bucket = zero.overlap_comm && !config.is_auto("zero_optimization.reduce_bucket_size");
    if (link_bucket) {
      int64_t whole = 0;
      for (int64_t numel : shape.numels) whole += numel;
      choose("reduce_bucket_size", link_bucket_numel(whole), kSeveralNodes, knob("reduce_bucket_size").set);
    }
  }

  // Where the search starts: Hugging Face's sizes from d (their "auto" for DeepSpeed).
  const std::string from_d = "d = " + std::to_string(d);
  if (d > 0) {
    // At stage 0 the buckets are the gradient shard's own slices, reduced in place: their size costs
    // only the all-reduce's temporary (halved below when the budget needs it), and d*d buckets
    // multiply the all-reduces (3.3M GPT at -np 4: reduce wait 15 -> 80 ms). There the size is
    // chosen only for an "auto", as Hugging Face resolves it.
    if (!link_bucket && (zero.stage >= 1 || config.is_auto("zero_optimization.reduce_bucket_size")))
      choose("reduce_bucket_size", d * d, "d*d (Hugging Face), " + from_d, knob("reduce_bucket_size").set);
    if (zero.stage == 3) {
      choose("stage3_prefetch_bucket_size", d * d * 9 / 10, "0.9*d*d (Hugging Face), " + from_d,
             knob("stage3_prefetch_bucket_size").set);
      choose("stage3_param_persistence_threshold", 10 * d, "10*d (Hugging Face), " + from_d,
             knob("stage3_param_persistence_threshold").set);
    }
  }
  const bool nvme_optimizer = zero.offload_optimizer.device == OffloadDevice::Nvme && zero.stage >= 1;
  const bool nvme_params = zero.offload_param.device == OffloadDevice::Nvme && zero.stage == 3;
  if (nvme_optimizer) {
    // Eight sub-groups (at least 1M elements each): the pipelined swap overlaps them, and the
    // buffers hold an eighth of the swapped state per sub-group in memory.
    int64_t shard = 0;
    for (int64_t numel : shape.numels) shard += ceil_div(numel, world);
    choose("sub_group_size", std::max<int64_t>(ceil_div(shard, 8), int64_t{1} << 20), "an eighth of the shard",
           knob("sub_group_size").set);
  }
  // The step begun in backward (dstrain.step_in_backward, the trainer's default) stages each
  // sub-group's gradient into a slot read ahead for it, and must not wait in backward for a
  // sub-group's writes either (without pipeline_write swap_out does): three slots, and the step's
  // reads and writes then overlap backward and the gradient never goes to disk.
  if (nvme_optimizer && !shape.on_gpu && asks_step_in_backward(config) && step_in_backward_config_obstacle(config).empty()) {
    const std::string why = "the step begun in backward overlaps its swap with backward (dstrain.step_in_backward)";
    choose("offload_optimizer.pipeline_read", 1, why,
           [](ZeroConfig& z, int64_t v) { z.offload_optimizer.pipeline_read = v != 0; });
    if (zero.offload_optimizer.pipeline_read)
      choose("offload_optimizer.pipeline_write", 1, why,
             [](ZeroConfig& z, int64_t v) { z.offload_optimizer.pipeline_write = v != 0; });
  }
  if (nvme_params)
    choose("offload_param.max_in_cpu", 0, "offload_param on NVMe: no chunk resident beyond the buffers",
           knob("offload_param.max_in_cpu").set);

  // Halve whichever unset knob lowers the peak most until it fits. A knob whose halving changes
  // nothing may still pay at its least (a prefetch bucket smaller than every parameter gathers
  // none): that is tried when no halving helps.
  const int64_t target = static_cast<int64_t>(static_cast<double>(budget.per_rank()) * kBudgetShare);
  // Under the pipeline engine a stage gathers all its parameters once per batch and holds them
  // whole, rather than each module twice per micro-batch, when the peak with them whole fits the
  // budget (PipelineEngine). Decided on the knobs as they start, so that the search below never
  // shrinks the others to make room for it.
  bool hold = false;
  if (zero.stage == 3 && config.pipeline().stages && left_unset(config, "stage3_max_live_parameters")) {
    const std::vector<int64_t> partitioned = gathered_numels(shape, zero);
    const int64_t per_module = two_largest(partitioned) + zero.stage3_prefetch_bucket_size;
    zero.stage3_max_live_parameters = std::max(per_module, padded_sum(partitioned, world));
    hold = target <= 0 || size_with(config, shape, world, zero).peak() <= target;
    if (!hold) zero.stage3_max_live_parameters = per_module;
  }
  MemoryPlan plan = size_with(config, shape, world, zero);
  int shrinks = 0;
  while (target > 0 && plan.peak() > target) {
    const Knob* best = nullptr;
    MemoryPlan best_plan = plan;
    for (bool to_floor : {false, true}) {
      for (const Knob& k : all) {
        if (!left_unset(config, k.key) || k.get(zero) <= k.floor) continue;
        ZeroConfig trial = zero;
        k.set(trial, to_floor ? k.floor : shrunk(k, k.get(zero)));
        MemoryPlan sized = size_with(config, shape, world, trial);
        if (sized.peak() < best_plan.peak()) best = &k, best_plan = std::move(sized);
      }
      if (best) break;
    }
    if (!best) break;
    const int64_t value = best->get(best_plan.zero);
    zero = best_plan.zero;
    plan = std::move(best_plan);
    auto it = std::find_if(chosen.begin(), chosen.end(),
                           [&](const ChosenKnob& c) { return c.key == "zero_optimization." + best->key; });
    if (it == chosen.end()) it = chosen.insert(chosen.end(), {"zero_optimization." + best->key, 0, ""});
    it->value = value;
    it->why = kShrunk;
    ++shrinks;
  }

  // What the swappers need: the offload buffer counts follow from the other knobs.
  if (nvme_optimizer) {
    const int slots =
        zero::optimizer_swap_slots(zero.offload_optimizer.pipeline_read, zero.offload_optimizer.pipeline_write);
    const int files = partition_sizes(PartitionKind::Nvme, config, 0, world).swap_files();
    choose("offload_optimizer.buffer_count", slots * files,
           std::to_string(files) + " files x " + std::to_string(slots) + " sub-group(s) in memory",
           [](ZeroConfig& z, int64_t v) { z.offload_optimizer.buffer_count = static_cast<int>(v); });
  }
  if (nvme_params) {
    std::vector<int64_t> chunks;
    for (int64_t numel : shape.numels) chunks.push_back(ceil_div(numel, world));
    const int64_t largest = zero::param_swap_sizes(chunks, zero.offload_param.max_in_cpu).largest_swapped;
    if (largest > zero.offload_param.buffer_size)
      choose("offload_param.buffer_size", largest, "the largest swapped chunk",
             [](ZeroConfig& z, int64_t v) { z.offload_param.buffer_size = v; });
  }
  if (zero.stage == 3) {
    const std::vector<int64_t> partitioned = gathered_numels(shape, zero);
    const int64_t in_use = two_largest(partitioned);
    if (hold)
      choose("stage3_max_live_parameters", std::max(in_use + zero.stage3_prefetch_bucket_size, padded_sum(partitioned, world)),
             "at least the pipeline stage's parameters (" + std::to_string(padded_sum(partitioned, world)) +
                 "), held whole through each batch",
             [](ZeroConfig& z, int64_t v) { z.stage3_max_live_parameters = v; });
    else
      choose("stage3_max_live_parameters", in_use + zero.stage3_prefetch_bucket_size,
             "the module in use (" + std::to_string(in_use) + ") + the prefetch bucket",
             [](ZeroConfig& z, int64_t v) { z.stage3_max_live_parameters = v; });
  }
  plan = size_with(config, shape, world, zero);
  plan.chosen = std::move(chosen);
  plan.budget = budget.per_rank();
  plan.budget_source = budget.node ? budget.node->source : "";
  return {std::move(plan), shrinks};
}

bool shrank_swap(const MemoryPlan& plan) {
  return std::any_of(plan.chosen.begin(), plan.chosen.end(), [](const ChosenKnob& knob) {
    return knob.why == kShrunk &&
           (knob.key == "zero_optimization.sub_group_size" || knob.key == "zero_optimization.offload_param.buffer_count");
  });
}

}  // namespace

MemoryPlan plan_memory(const Config& config, const ModelShape& shape, int world, const MemoryBudget& budget, bool several_nodes) {
  Search search = search_plan(config, shape, world, budget, several_nodes, false);
  // Two reduce buckets in flight (overlap_comm, stage 3's default) cost a bucket's memory that the
  // NVMe swap uses better when the budget is tight: with them the 1B GPT under a 2 GiB cap swapped
  // sub-groups of 65536 elements through one parameter buffer, and waited on the disk 29 of its
  // 43 s a step. Across nodes the link needs the overlap more.
  if (!several_nodes && left_unset(config, "overlap_comm") && search.plan.zero.overlap_comm && shrank_swap(search.plan)) {
    Search off = search_plan(config, shape, world, budget, several_nodes, true);
    if (off.shrinks < search.shrinks) search = std::move(off);
  }
  MemoryPlan plan = std::move(search.plan);
  if (plan.budget <= 0 || plan.peak() <= plan.budget) return plan;

  const ZeroConfig& zero = plan.zero;
  const std::vector<Knob> all = knobs();

  // Over the budget: a value the user set is to blame when the plan fits with it at its least.
  const std::string over = "the predicted peak is " + mb(plan.peak()) + " per rank, over the budget of " +
                           mb(plan.budget) + " (" + plan.budget_source + ", " +
                           std::to_string(budget.ranks_per_node) + " rank(s) on this node)";
  for (const Knob& k : all) {
    if (left_unset(config, k.key) || k.get(zero) <= k.floor) continue;
    ZeroConfig trial = zero;
    k.set(trial, k.floor);
    const MemoryPlan least = size_with(config, shape, world, trial);
    if (least.peak() > plan.budget) continue;
    throw Error("zero_optimization." + k.key + " = " + std::to_string(k.get(zero)) + " costs " +
                mb(plan.peak() - least.peak()) + " per rank beyond its least; " + over +
                ": lower it, or leave it unset for the planner")
        .with_key("zero_optimization." + k.key);
  }
  log::warn("memory plan: ", over, ", whatever the planner chooses; the job may run out of memory "
            "(a higher ZeRO stage, offload or more ranks hold less)");
  return plan;
}

Config apply_memory_plan(const Config& config, const MemoryPlan& plan) {
  if (plan.chosen.empty()) return config;
  nlohmann::json json = config.to_json();
  for (const ChosenKnob& knob : plan.chosen) {
    std::string pointer = "/" + knob.key;
    std::replace(pointer.begin(), pointer.end(), '.', '/');
    nlohmann::json& value = json[nlohmann::json::json_pointer(pointer)];
    value = value.is_boolean() ? nlohmann::json(knob.value != 0) : nlohmann::json(knob.value);
  }
  Config planned = Config::from_json(json);
  if (config.batch_resolved()) planned.resolve_batch(config.dp_world_size());
  return planned;
}

MemoryPlan plan_engine_memory(const Config& config, const torch::nn::Module& model, comm::Backend& group) {
  ModelShape shape;
  std::vector<std::vector<int64_t>> shapes;
  std::set<const void*> storages;
  at::Device device = at::kCPU;  // the group's collectives take tensors where the model is (NCCL: a GPU)
  for (const at::Tensor& param : model.parameters()) {
    if (!param.requires_grad()) continue;
    shape.aliased = shape.aliased || !storages.insert(param.storage().unsafeGetStorageImpl()).second;
    shape.numels.push_back(param.numel());
    shapes.push_back(param.sizes().vec());
    device = param.device();
  }
  shape.on_gpu = !device.is_cpu();
  shape.hidden = guess_hidden(shapes);
  // The trainer's GPT: d and the activations from its config block, when it is this model.
  const nlohmann::json& block = config.dstrain_block();
  if (const auto it = block.find("model"); it != block.end() && it->is_object() && it->value("type", "gpt") == "gpt") {
    try {
      const ModelShape gpt = gpt_shape(models::GPTConfig::from_json(*it));
      shape.hidden = gpt.hidden;
      if (gpt.numels == shape.numels) shape.gpt = gpt.gpt;
    } catch (const Error&) {
      // Not the built-in GPT's block: keep what the parameters say.
    }
  }
  // Every rank must choose the same sizes (buckets and gathers are collective): the least budget.
  MemoryBudget budget = memory_budget(config, rank_env_from_environment().local_size);
  at::Tensor least = at::full({1}, budget.node ? static_cast<double>(budget.per_rank()) : 1e30,
                              at::dtype(at::kDouble).device(device));
  group.all_reduce(least, comm::ReduceOp::Min);
  const double least_bytes = least.item<double>();
  if (least_bytes < 1e30 && (!budget.node || least_bytes < static_cast<double>(budget.per_rank())))
    budget.node = MemoryLimit{static_cast<int64_t>(least_bytes) * budget.ranks_per_node, "another rank's budget", ""};
  const RankEnv env = rank_env_from_environment();
  const MemoryPlan plan = plan_memory(config, shape, group.world_size(), budget, env.local_size < env.world_size);
  if (group.rank() == 0) {
    std::string link;
    for (const ChosenKnob& knob : plan.chosen)
      if (knob.why == kSeveralNodes)
        link += (link.empty() ? "" : ", ") + knob.key + " = " +
                (knob.key == "zero_optimization.overlap_comm" ? std::string("true") : std::to_string(knob.value));
    if (!link.empty())
      log::info(kSeveralNodes, ": ", link, " (set them to choose otherwise; docs/multi-node.md)");
    std::string knobs;
    for (const ChosenKnob& knob : plan.chosen)
      knobs += (knobs.empty() ? "" : ", ") + knob.key.substr(knob.key.rfind('.') + 1) + " " + std::to_string(knob.value) +
               " (" + knob.why + ")";
    log::info("memory plan: predicted peak ", mb(plan.peak()), " per rank (", mb(plan.baseline), " for the process and the engine + ",
              mb(plan.peak() - plan.baseline), ")",
              plan.budget > 0 ? " of a budget of " + mb(plan.budget) + " (" + plan.budget_source + ")" : std::string(),
              knobs.empty() ? std::string("; every knob as configured") : "; chose " + knobs);
  }
  return plan;
}

}  // namespace ds
