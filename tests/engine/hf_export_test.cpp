// Hugging Face weights out of a sharded checkpoint and back in: the GPT's export, loaded into a
// PyTorch GPT-2 written in Python (tests/apps/hf_gpt2_reference.py, the tests' Python (tests/support/python.hpp) with torch and
// numpy), gives the engine's loss on the same batch, and a Llama's, loaded into a PyTorch
// LlamaForCausalLM (tests/apps/hf_llama_reference.py), too; the import gives the engine's logits back
// from one file, from our sharded export (cut as save_pretrained cuts) and from sharded folders and
// F16/BF16 copies that Python writes; the export streams (peak RSS); bad folders (a missing shard, an
// index naming a tensor its shard lacks, dtypes we do not load) fail naming the tensor and the file.
#include <catch2/catch.hpp>
#include <torch/torch.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/engine/checkpoint/export.hpp"
#include "dstrain/engine/checkpoint/hf_format.hpp"
#include "dstrain/engine/checkpoint/hf_import.hpp"
#include "dstrain/engine/checkpoint/index.hpp"
#include "dstrain/engine/engine.hpp"
#include "dstrain/engine/models/gpt.hpp"
#include "dstrain/engine/models/llama.hpp"
#include "dstrain/io/safetensors.hpp"
#include "dstrain/engine/models/loss.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/zero/init.hpp"
#include "shared_folder.hpp"
#include "training_loop.hpp"
#include "python.hpp"

namespace {

namespace fs = std::filesystem;
using Engine = ds::Engine<ds::models::GPT>;

const std::string kReference = std::string(DSTRAIN_SOURCE_DIR) + "/tests/apps/hf_gpt2_reference.py";
const std::string kLlamaReference = std::string(DSTRAIN_SOURCE_DIR) + "/tests/apps/hf_llama_reference.py";

nlohmann::json model_block(int64_t n_layer = 2, int64_t n_embd = 32, int64_t vocab = 64) {
  return {{"type", "gpt"}, {"n_layer", n_layer}, {"n_head", 2},      {"n_embd", n_embd},
          {"block_size", 16}, {"vocab_size", vocab}, {"dropout", 0.0}};
}

nlohmann::json config_json(int stage, const nlohmann::json& model) {
  return {{"train_batch_size", 4},
          {"gradient_accumulation_steps", 1},
          {"optimizer", {{"type", "AdamW"}, {"params", {{"lr", 3e-3}}}}},
          {"zero_optimization", {{"stage", stage}, {"stage3_param_persistence_threshold", 0}}},
          {"dstrain", {{"model", model}}}};
}

std::shared_ptr<Engine> make_engine(const nlohmann::json& config) {
  torch::manual_seed(11);
  auto world = ds::comm::init_distributed("mpi");
  ds::Config parsed = ds::Config::from_json(config);
  auto build = [&] { return ds::models::GPT(ds::models::GPTConfig::from_json(config["dstrain"]["model"])); };
  return ds::initialize(parsed.zero_optimization().stage == 3 ? ds::zero::build(parsed, build, world) : build(), parsed, world);
}

std::string fresh_dir(const std::string& name) { return fresh_shared_folder("dstrain_hf_" + name); }

// Rows of block_size + 1 tokens, the same on every rank.
at::Tensor batch_rows(int64_t rows, int64_t vocab) {
  auto generator = at::detail::createCPUGenerator(99);
  return at::randint(vocab, {rows, 17}, generator, at::kLong);
}

// What `command` prints on stdout; the test fails when it exits non-zero.
std::string output_of(const std::string& command) {
  std::FILE* pipe = ::popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  std::string text;
  char buffer[256];
  while (std::fgets(buffer, sizeof buffer, pipe)) text += buffer;
  REQUIRE(::pclose(pipe) == 0);
  return text;
}

// The loss that `reference` (a Python model of transformers') gives the weights in `folder` on
// `rows` of T + 1 tokens; with `logits`, its logits there too.
double python_loss(const std::string& folder, const at::Tensor& rows, const std::string& scratch,
                   const std::string& reference = kReference, at::Tensor* logits = nullptr) {
  const std::string tokens = scratch + "/tokens.bin", logits_file = scratch + "/logits.bin";
  std::ofstream(tokens, std::ios::binary)
      .write(static_cast<const char*>(rows.contiguous().data_ptr()), rows.numel() * static_cast<int64_t>(sizeof(int64_t)));
  const double loss = std::stod(output_of(ds::testing::python() + " " + reference + " loss " + folder + " --tokens " + tokens +
                                          " --block-size " + std::to_string(rows.size(1) - 1) +
                                          (logits ? " --logits " + logits_file : "")));
  if (logits) {
    std::ifstream in(logits_file, std::ios::binary);
    in.read(static_cast<char*>(logits->data_ptr()), static_cast<std::streamsize>(logits->nbytes()));
    REQUIRE(in.gcount() == static_cast<std::streamsize>(logits->nbytes()));
  }
  return loss;
}

template <class Fn>
std::string error_of(Fn body) {
  try {
    body();
  } catch (const ds::Error& e) {
    return e.what();
  }
  return "(no error)";
}

int64_t status_kib(const std::string& field) {
  std::ifstream in("/proc/self/status");
  for (std::string line; std::getline(in, line);)
    if (line.rfind(field + ":", 0) == 0) return std::stoll(line.substr(field.size() + 1));
  return -1;
}

}  // namespace

TEST_CASE("the export from stage 0 and 3 checkpoints gives PyTorch's GPT-2 the engine's loss, and imports back",
          "[mpi][hf]") {
  for (int stage : {0, 3}) {
    DYNAMIC_SECTION("stage " << stage) {
      const std::string dir = fresh_dir("stage" + std::to_string(stage));
      auto engine = make_engine(config_json(stage, model_block()));
      training_loop::train(*engine, 3);
      engine->save_checkpoint(dir + "/ckpt");
      const at::Tensor rows = batch_rows(3, 64);
      const at::Tensor inputs = rows.slice(1, 0, 16), targets = rows.slice(1, 1, 17);
      at::Tensor logits;
      double loss = 0;
      {
        torch::NoGradGuard no_grad;
        logits = engine->forward(inputs);
        loss = ds::models::cross_entropy_loss(logits, targets).item<double>();
      }
      if (ds::comm::get_rank() == 0) {
        const std::string out = dir + "/hf";
        const ds::HfExport exported = ds::export_hf(ds::checkpoint_folders(dir + "/ckpt", ""), out);
        REQUIRE(exported.tensors == 4 + 12 * 2);
        const double reference = python_loss(out, rows, dir);
        INFO("engine " << loss << ", PyTorch GPT-2 " << reference);
        REQUIRE(std::abs(loss - reference) <= 1e-4 * std::abs(reference));

        ds::models::GPT imported(ds::models::GPTConfig::from_json(model_block()));
        ds::load_hf_weights(out, *imported);
        torch::NoGradGuard no_grad;
        REQUIRE(torch::allclose(imported->forward(inputs), logits, 1e-5, 1e-6));
      }
      ds::comm::init_distributed("mpi")->barrier();
    }
  }
}

// Rewrites the export in `folder` (argv[1]) as others write GPT-2: split into two shards with an
// index, names without "transformer.", the tied lm_head.weight and the mask buffers included (as
// older transformers files have them); and as F16 and BF16 copies (rounded to nearest even).
const char* const kRewrite = R"PY(
import json, os, struct, sys
import numpy as np
sys.path.insert(0, os.path.dirname(sys.argv[2]))
from hf_gpt2_reference import read_safetensors_file

def write(path, tensors):
    header, blobs, offset = {}, [], 0
    for name, (dtype, array) in tensors.items():
        data = np.ascontiguousarray(array).tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    header["__metadata__"] = {"format": "pt"}
    text = json.dumps(header).encode()
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))

root = sys.argv[1]
weights = read_safetensors_file(root + "/hf/model.safetensors")
config = open(root + "/hf/config.json").read()
names = sorted(weights)
bare = lambda name: name[len("transformer."):]
os.makedirs(root + "/sharded")
half = len(names) // 2
files = {"model-00001-of-00002.safetensors": names[:half], "model-00002-of-00002.safetensors": names[half:]}
weight_map = {}
for file, part in files.items():
    tensors = {bare(n): ("F32", weights[n]) for n in part}
    if file.startswith("model-00002"):
        tensors["lm_head.weight"] = ("F32", weights["transformer.wte.weight"])
        tensors["h.0.attn.bias"] = ("F32", np.tril(np.ones((1, 1, 16, 16), dtype="<f4")))
    write(root + "/sharded/" + file, tensors)
    weight_map.update({name: file for name in tensors})
json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, open(root + "/sharded/model.safetensors.index.json", "w"))
open(root + "/sharded/config.json", "w").write(config)

def bf16(array):
    bits = array.astype("<f4").view("<u4").astype(np.uint64)
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2")
for kind, convert in (("F16", lambda a: a.astype("<f2")), ("BF16", bf16)):
    os.makedirs(root + "/" + kind)
    write(root + "/" + kind + "/model.safetensors", {n: (kind, convert(weights[n])) for n in names})
    open(root + "/" + kind + "/config.json", "w").write(config)

import shutil
shutil.copytree(root + "/sharded", root + "/lost_shard")
os.remove(root + "/lost_shard/model-00002-of-00002.safetensors")
shutil.copytree(root + "/sharded", root + "/misplaced")
index = json.load(open(root + "/misplaced/model.safetensors.index.json"))
index["weight_map"]["h.1.ln_2.bias"] = "model-00001-of-00002.safetensors"  # it is in the second
json.dump(index, open(root + "/misplaced/model.safetensors.index.json", "w"))
os.makedirs(root + "/F64")
write(root + "/F64/model.safetensors", {n: ("F64", weights[n].astype("<f8")) for n in names})
open(root + "/F64/config.json", "w").write(config)
for kind, dtype in (("I8", "<i1"), ("F8_E4M3", "u1")):
    os.makedirs(root + "/" + kind)
    tensors = {n: ("F32", weights[n]) for n in names}
    tensors["transformer.h.0.ln_1.weight"] = (kind, np.ones(32, dtype=dtype))
    write(root + "/" + kind + "/model.safetensors", tensors)

os.makedirs(root + "/missing")
write(root + "/missing/model.safetensors", {n: ("F32", weights[n]) for n in names if n != "transformer.h.1.mlp.c_fc.bias"})
open(root + "/missing/config.json", "w").write(config)
os.makedirs(root + "/unknown")
write(root + "/unknown/model.safetensors", dict({n: ("F32", weights[n]) for n in names}, **{"transformer.h.9.ln_1.weight": ("F32", np.ones(32, dtype="<f4"))}))
os.makedirs(root + "/transposed")
wrong = {n: ("F32", weights[n]) for n in names}
wrong["transformer.h.0.attn.c_attn.weight"] = ("F32", weights["transformer.h.0.attn.c_attn.weight"].T)
write(root + "/transposed/model.safetensors", wrong)
)PY";

TEST_CASE("weights import from a sharded folder, F16 and BF16 copies that Python writes; bad ones are named",
          "[mpi][hf]") {
  const std::string dir = fresh_dir("import");
  auto engine = make_engine(config_json(0, model_block()));
  training_loop::train(*engine, 2);
  engine->save_checkpoint(dir + "/ckpt");
  if (ds::comm::get_rank() != 0) return;
  ds::export_hf(ds::checkpoint_folders(dir + "/ckpt", ""), dir + "/hf");
  std::ofstream(dir + "/rewrite.py") << kRewrite;
  output_of(ds::testing::python() + " " + dir + "/rewrite.py " + dir + " " + kReference);

  const auto config = ds::models::GPTConfig::from_json(model_block());
  ds::models::GPT exported(config);
  ds::load_hf_weights(dir + "/hf", *exported);
  // The engine's own weights are the reference for the exported file.
  for (const auto& item : engine->module()->named_parameters())
    REQUIRE(torch::equal(exported->named_parameters()[item.key()], item.value()));
  ds::models::GPT sharded(config);
  ds::load_hf_weights(dir + "/sharded", *sharded);
  for (const auto& item : exported->named_parameters()) REQUIRE(torch::equal(sharded->named_parameters()[item.key()], item.value()));
  for (const auto& [kind, type] : {std::pair{"F16", at::kHalf}, std::pair{"BF16", at::kBFloat16}, std::pair{"F64", at::kFloat}}) {
    INFO(kind);
    ds::models::GPT rounded(config);
    ds::load_hf_weights(dir + "/" + kind, *rounded);
    for (const auto& item : exported->named_parameters())
      REQUIRE(torch::equal(rounded->named_parameters()[item.key()], item.value().to(type).to(at::kFloat)));
  }

  ds::models::GPT target(config);
  REQUIRE_THAT(error_of([&] { ds::load_hf_weights(dir + "/missing", *target); }),
               Catch::Contains("no tensor for the model's 'h.1.mlp.c_fc.bias' (Hugging Face: 'transformer.h.1.mlp.c_fc.bias')") &&
                   Catch::Contains(dir + "/missing"));
  REQUIRE_THAT(error_of([&] { ds::load_hf_weights(dir + "/unknown", *target); }),
               Catch::Contains("'transformer.h.9.ln_1.weight' has no place in the model") &&
                   Catch::Contains(dir + "/unknown/model.safetensors"));
  REQUIRE_THAT(error_of([&] { ds::load_hf_weights(dir + "/transposed", *target); }),
               Catch::Contains("'transformer.h.0.attn.c_attn.weight' has shape [96, 32], the model's 'h.0.attn.c_attn.weight' "
                               "needs [32, 96]"));
  REQUIRE_THAT(error_of([&] { ds::load_hf_weights(dir + "/lost_shard", *target); }),
               Catch::Contains("the index puts tensor '") && Catch::Contains("in this file; the file is missing") &&
                   Catch::Contains(dir + "/lost_shard/model-00002-of-00002.safetensors"));
  REQUIRE_THAT(error_of([&] { ds::load_hf_weights(dir + "/misplaced", *target); }),
               Catch::Contains("the index puts tensor 'h.1.ln_2.bias' in this file; it is not there") &&
                   Catch::Contains(dir + "/misplaced/model-00001-of-00002.safetensors"));
  for (const std::string kind : {"I8", "F8_E4M3"})
    REQUIRE_THAT(error_of([&] { ds::load_hf_weights(dir + "/" + kind, *target); }),
                 Catch::Contains("tensor 'transformer.h.0.ln_1.weight' has dtype " + kind +
                                 "; weights load from F32, F16, BF16 or F64") &&
                     Catch::Contains(dir + "/" + kind + "/model.safetensors"));
  REQUIRE_THAT(error_of([&] { (void)ds::hf_model_block(dir + "/transposed"); }),
               Catch::Contains("cannot open the Hugging Face config") && Catch::Contains(dir + "/transposed/config.json"));
  REQUIRE(ds::hf_model_block(dir + "/sharded") ==
          nlohmann::json{{"type", "gpt"}, {"n_layer", 2}, {"n_head", 2}, {"n_embd", 32}, {"block_size", 16}, {"vocab_size", 64}});
}

TEST_CASE("max_shard_size reads as transformers reads it and cuts as its shard_checkpoint cuts", "[hf]") {
  REQUIRE(ds::ckpt::parse_shard_size("5GB") == 5'000'000'000);
  REQUIRE(ds::ckpt::parse_shard_size("2GiB") == int64_t{2} << 30);
  REQUIRE(ds::ckpt::parse_shard_size("200mb") == 200'000'000);
  REQUIRE(ds::ckpt::parse_shard_size("64KiB") == 65'536);
  REQUIRE(ds::ckpt::parse_shard_size("1000") == 1000);
  for (const std::string bad : {"", "GB", "5 GB", "5TB", "0MB", "-1", "1.5GB", "99999999999GB"})
    REQUIRE_THAT(error_of([&] { ds::ckpt::parse_shard_size(bad); }),
                 Catch::Contains("max shard size '" + bad + "'") && Catch::Contains("--max-shard-size"));
  // transformers' documented example: [6, 6, 2, 6, 2, 2] GB at 10GB is [6], [6 + 2], [6 + 2 + 2].
  REQUIRE(ds::ckpt::shard_starts({6, 6, 2, 6, 2, 2}, 10) == std::vector<size_t>{0, 1, 3});
  REQUIRE(ds::ckpt::shard_starts({3, 12, 3}, 10) == std::vector<size_t>{0, 1, 2});  // 12 alone
  REQUIRE(ds::ckpt::shard_starts({4, 4, 4}, 100) == std::vector<size_t>{0});
  REQUIRE(ds::ckpt::weights_file_name(0, 1) == "model.safetensors");
  REQUIRE(ds::ckpt::weights_file_name(1, 12) == "model-00002-of-00012.safetensors");
}

TEST_CASE("a sharded export: files cut at the limit, an index transformers reads, weights that import back",
          "[mpi][hf]") {
  const std::string dir = fresh_dir("sharded");
  auto engine = make_engine(config_json(0, model_block()));
  training_loop::train(*engine, 2);
  engine->save_checkpoint(dir + "/ckpt");
  if (ds::comm::get_rank() != 0) return;
  const std::vector<std::string> folders = ds::checkpoint_folders(dir + "/ckpt", "");
  // A GPT of 2 blocks at n_embd 32: wte 8 KiB, a block's c_fc and mlp.c_proj 16 KiB each.
  constexpr int64_t kLimit = 20'000;
  ds::export_hf(folders, dir + "/hf");  // one file first: the sharded export replaces it
  const ds::HfExport exported = ds::export_hf(folders, dir + "/hf", kLimit);
  REQUIRE(exported.files.size() > 2);
  REQUIRE(!fs::exists(dir + "/hf/model.safetensors"));
  const nlohmann::json index = nlohmann::json::parse(std::ifstream(dir + "/hf/model.safetensors.index.json"));
  std::vector<std::string> order;  // the tensors, file after file
  int64_t total = 0;
  int64_t previous = -1;  // the data bytes of the file before
  for (size_t k = 0; k < exported.files.size(); ++k) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05zu.safetensors", k + 1, exported.files.size());
    REQUIRE(exported.files[k] == name);
    const ds::io::SafetensorsReader file(dir + "/hf/" + name);
    const auto& tensors = file.header().tensors;
    const int64_t data = tensors.back().end;
    INFO(name << ": " << data << " bytes in " << tensors.size() << " tensors");
    REQUIRE((data <= kLimit || tensors.size() == 1));
    // The file before ended only because this one's first tensor did not fit.
    if (previous >= 0) REQUIRE(previous + tensors.front().bytes() > kLimit);
    previous = data;
    for (const auto& tensor : tensors) {
      REQUIRE(index["weight_map"][tensor.name] == name);
      order.push_back(tensor.name);
      total += tensor.bytes();
    }
  }
  REQUIRE(index["metadata"]["total_size"] == total);
  REQUIRE(index["weight_map"].size() == order.size());
  std::vector<std::string> expected;
  for (const auto& item : engine->module()->named_parameters())
    expected.push_back(ds::ckpt::to_hf_tensor("gpt", item.key()).name);
  REQUIRE(order == expected);

  ds::models::GPT imported(ds::models::GPTConfig::from_json(model_block()));
  ds::load_hf_weights(dir + "/hf", *imported);
  for (const auto& item : engine->module()->named_parameters())
    REQUIRE(torch::equal(imported->named_parameters()[item.key()], item.value()));

  // Back to one file: the shards and the index go.
  ds::export_hf(folders, dir + "/hf");
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir + "/hf")) left.push_back(entry.path().filename().string());
  std::sort(left.begin(), left.end());
  REQUIRE(left == std::vector<std::string>{"config.json", "model.safetensors"});
}

TEST_CASE("the export streams: its peak RSS grows by one tensor and its buffers, not by a shard or the model",
          "[mpi][hf]") {
  const std::string dir = fresh_dir("stream");
  // 8 blocks of n_embd 256: 6.4M parameters, 25.6 MB in fp32; the largest tensor is a block's
  // c_fc or mlp.c_proj weight, 256 x 1024 (1 MiB). At stage 3 each rank's shard holds its part of
  // the master and of Adam's two states.
  auto engine = make_engine(config_json(3, model_block(8, 256, 512)));
  engine->save_checkpoint(dir + "/ckpt");
  engine.reset();
  if (ds::comm::get_rank() != 0) return;
  const std::vector<std::string> folders = ds::checkpoint_folders(dir + "/ckpt", "");
  int64_t model_bytes = 0, largest = 0;
  for (const ds::ckpt::ParamEntry& param : ds::ckpt::CheckpointIndex::read(folders[0]).params) {
    model_bytes += param.numel * 4;
    largest = std::max<int64_t>(largest, param.numel * 4);
  }
  std::ofstream("/proc/self/clear_refs") << "5";
  const int64_t before = status_kib("VmRSS");
  REQUIRE(status_kib("VmHWM") <= before + 64);  // the reset worked
  ds::export_hf(folders, dir + "/hf");
  const int64_t growth = (status_kib("VmHWM") - before) * 1024;
  // One tensor, the 4 MiB checksum buffer, the 256 KiB transpose block, 1.5 MiB for the rest.
  const int64_t bound = largest + (4 << 20) + (256 << 10) + (3 << 19);
  const int64_t shard_bytes = static_cast<int64_t>(fs::file_size(folders[0] + "/rank0.bin"));
  INFO("peak growth " << growth << " bytes; bound " << bound << "; model " << model_bytes << "; shard " << shard_bytes);
  REQUIRE(bound < shard_bytes / 3);
  REQUIRE(growth <= bound);
  REQUIRE(bound < model_bytes / 3);
  REQUIRE(fs::file_size(dir + "/hf/model.safetensors") > static_cast<uintmax_t>(model_bytes));
}

TEST_CASE("a Llama exports under LlamaForCausalLM's own names, gives PyTorch's Llama the engine's loss and imports back",
          "[mpi][hf]") {
  for (bool tied : {false, true}) {
    DYNAMIC_SECTION("tie_word_embeddings " << tied) {
      const nlohmann::json model = {{"type", "llama"}, {"vocab_size", 64}, {"hidden_size", 32}, {"intermediate_size", 48},
                                    {"num_hidden_layers", 2}, {"num_attention_heads", 4}, {"num_key_value_heads", 2},
                                    {"max_position_embeddings", 16}, {"tie_word_embeddings", tied}};
      const std::string dir = fresh_dir(std::string("llama") + (tied ? "_tied" : ""));
      // A large learning rate moves every weight far from its small initial value in two steps, so
      // that the logits depend on every part of the equations (RoPE's convention, which query heads
      // share a key head): near initialization the loss is ln(vocab) whatever they compute.
      nlohmann::json json = config_json(3, model);
      json["optimizer"]["params"]["lr"] = 0.05;
      const ds::Config config = ds::Config::from_json(json);
      torch::manual_seed(13);
      const auto llama_config = ds::models::LlamaConfig::from_json(model);
      auto world = ds::comm::init_distributed("mpi");
      auto engine = ds::initialize(ds::zero::build(config, [&] { return ds::models::Llama(llama_config); }, world), config, world);
      training_loop::train(*engine, 2);
      engine->save_checkpoint(dir + "/ckpt");
      const at::Tensor rows = batch_rows(2, 64);
      const at::Tensor inputs = rows.slice(1, 0, 16);
      at::Tensor logits;
      double loss = 0;
      {
        torch::NoGradGuard no_grad;
        logits = engine->forward(inputs);
        loss = ds::models::cross_entropy_loss(logits, rows.slice(1, 1, 17)).item<double>();
      }
      if (ds::comm::get_rank() == 0) {
        const ds::HfExport exported = ds::export_hf(ds::checkpoint_folders(dir + "/ckpt", ""), dir + "/hf");
        at::Tensor python_logits = at::empty_like(logits);
        const double reference = python_loss(dir + "/hf", rows, dir, kLlamaReference, &python_logits);
        INFO("engine " << loss << ", PyTorch LlamaForCausalLM " << reference);
        REQUIRE(std::abs(loss - reference) <= 1e-4 * std::abs(reference));
        // The mean loss of these weights on random tokens barely depends on positions (RoPE left out
        // moves it 4e-5); the logits do (by 0.09).
        REQUIRE(torch::allclose(python_logits, logits, 1e-4, 1e-5));
        ds::models::Llama fresh(llama_config);
        REQUIRE(exported.tensors == static_cast<int64_t>(fresh->parameters().size()));
        REQUIRE(exported.tensors == 2 + 9 * 2 + (tied ? 0 : 1));
        // The names are the module's own, which are LlamaForCausalLM's.
        const ds::io::SafetensorsReader file(dir + "/hf/model.safetensors");
        for (const auto& item : fresh->named_parameters()) {
          INFO(item.key());
          REQUIRE(file.header().find(item.key()) != nullptr);
          REQUIRE(file.header().find(item.key())->shape == item.value().sizes().vec());
        }
        const nlohmann::json hf = nlohmann::json::parse(std::ifstream(dir + "/hf/config.json"));
        REQUIRE(hf["architectures"] == nlohmann::json{"LlamaForCausalLM"});
        REQUIRE(hf["num_key_value_heads"] == 2);
        REQUIRE(hf["tie_word_embeddings"] == tied);
        nlohmann::json block = ds::hf_model_block(dir + "/hf");
        REQUIRE(ds::models::LlamaConfig::from_json(block).intermediate_size == 48);
        ds::load_hf_weights(dir + "/hf", *fresh, "llama");
        torch::NoGradGuard no_grad;
        REQUIRE(torch::allclose(fresh->forward(inputs), logits, 1e-5, 1e-6));
      }
      ds::comm::init_distributed("mpi")->barrier();
    }
  }
}
