#include <catch2/catch.hpp>
#include <torch/torch.h>

#include "dstrain/engine/data/corpus_source.hpp"
#include "dstrain/engine/data/synthetic_source.hpp"
#include "dstrain/engine/data/token_file.hpp"
#include "dstrain/engine/data/token_source.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/remove_tree.hpp"

#include <unistd.h>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using ds::data::Batch;
using ds::data::CorpusSource;
using ds::data::SyntheticSource;
using ds::data::TokenSource;

namespace {

// A fresh directory, removed with its files at the end of the test.
class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "dstrain_data_test_XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() { ds::remove_tree(path_.string()); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), bytes.size());
}

// An llm.c header with the given fields, written by hand.
std::string raw_header(int32_t magic, int32_t version, int32_t count) {
  std::vector<int32_t> header(256, 0);
  header[0] = magic;
  header[1] = version;
  header[2] = count;
  return std::string(reinterpret_cast<const char*>(header.data()), header.size() * sizeof(int32_t));
}

std::vector<uint16_t> random_tokens(size_t count, uint32_t seed) {
  std::vector<uint16_t> tokens(count);
  uint32_t state = seed;
  for (uint16_t& token : tokens) {
    state = state * 1664525u + 1013904223u;
    token = static_cast<uint16_t>(state >> 16);
  }
  return tokens;
}

ds::Error error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const ds::Error& error) {
    return error;
  }
  FAIL("expected a ds::Error");
  return ds::Error("unreachable");
}

// Each row of `batch` followed by its last target: the block_size + 1 tokens of one sample.
std::vector<std::vector<int64_t>> samples_of(const Batch& batch) {
  std::vector<std::vector<int64_t>> samples;
  for (int64_t b = 0; b < batch.inputs.size(0); ++b) {
    std::vector<int64_t> row;
    for (int64_t t = 0; t < batch.inputs.size(1); ++t) row.push_back(batch.inputs[b][t].item<int64_t>());
    row.push_back(batch.targets[b][-1].item<int64_t>());
    samples.push_back(row);
  }
  return samples;
}

}  // namespace

TEST_CASE("write_token_file writes llm.c's format", "[data]") {
  TempDir dir;
  const std::string path = dir.file("tokens.bin");
  std::vector<uint16_t> tokens = random_tokens(1000, 1);
  tokens[0] = 0;
  tokens[1] = 65535;
  ds::data::write_token_file(path, tokens);

  std::ifstream in(path, std::ios::binary);
  std::vector<int32_t> header(256);
  in.read(reinterpret_cast<char*>(header.data()), 1024);
  REQUIRE(header[0] == 20240520);
  REQUIRE(header[1] == 1);
  REQUIRE(header[2] == 1000);
  std::vector<uint16_t> raw(1000);
  in.read(reinterpret_cast<char*>(raw.data()), 2000);
  REQUIRE(in.gcount() == 2000);
  REQUIRE(raw == tokens);
  REQUIRE(fs::file_size(path) == 1024 + 2000);

  REQUIRE(ds::data::read_token_file(path) == tokens);
  ds::data::write_token_file(path, {});
  REQUIRE(ds::data::read_token_file(path).empty());
}

TEST_CASE("read_token_file rejects a malformed file, naming the path and field", "[data]") {
  TempDir dir;
  const std::string path = dir.file("bad.bin");
  const std::string two_tokens("\x01\x00\x02\x00", 4);

  write_bytes(path, raw_header(20240521, 1, 2) + two_tokens);
  ds::Error error = error_of([&] { ds::data::read_token_file(path); });
  REQUIRE(error.path() == path);
  REQUIRE(error.offset() == 0);
  REQUIRE(error.message().find("magic") != std::string::npos);

  write_bytes(path, raw_header(20240520, 2, 2) + two_tokens);
  error = error_of([&] { ds::data::read_token_file(path); });
  REQUIRE(error.path() == path);
  REQUIRE(error.offset() == 4);

  write_bytes(path, raw_header(20240520, 1, 3) + two_tokens);  // one token short
  error = error_of([&] { ds::data::read_token_file(path); });
  REQUIRE(error.path() == path);
  REQUIRE(error.offset() == 8);

  write_bytes(path, raw_header(20240520, 1, -1));
  REQUIRE(error_of([&] { ds::data::read_token_file(path); }).offset() == 8);

  write_bytes(path, "short");
  REQUIRE(error_of([&] { ds::data::read_token_file(path); }).path() == path);

  error = error_of([&] { ds::data::read_token_file(dir.file("missing.bin")); });
  REQUIRE(error.path() == dir.file("missing.bin"));
  REQUIRE(error.errnum() == ENOENT);
}

TEST_CASE("a corpus source cuts windows of block_size + 1 consecutive tokens", "[data]") {
  std::vector<uint16_t> counting(1000);
  for (size_t i = 0; i < counting.size(); ++i) counting[i] = static_cast<uint16_t>(i);
  const CorpusSource source(counting, "counting", 1000, 16, 7);
  const Batch batch = source.batch(0, 0, 0, 1, 32);
  REQUIRE(batch.inputs.sizes() == at::IntArrayRef({32, 16}));
  REQUIRE(batch.targets.sizes() == at::IntArrayRef({32, 16}));
  REQUIRE(batch.inputs.scalar_type() == torch::kLong);
  // Token i of the corpus is i, so a window is a run of consecutive integers within range.
  REQUIRE(torch::equal(batch.targets, batch.inputs + 1));
  REQUIRE(torch::equal(batch.inputs.narrow(1, 1, 15), batch.inputs.narrow(1, 0, 15) + 1));
  REQUIRE(batch.inputs.min().item<int64_t>() >= 0);
  REQUIRE(batch.targets.max().item<int64_t>() <= 999);
  REQUIRE(std::get<0>(at::_unique(batch.inputs.select(1, 0))).numel() > 16);  // windows start all over

  // The last window that fits is reachable: a 17-token corpus has exactly one window.
  std::vector<uint16_t> exact(counting.begin(), counting.begin() + 17);
  const Batch only = CorpusSource(exact, "exact", 1000, 16, 7).batch(3, 0, 0, 1, 4);
  REQUIRE(torch::equal(only.inputs, torch::arange(16, torch::kLong).expand({4, 16})));

  std::vector<uint16_t> too_short(counting.begin(), counting.begin() + 16);
  REQUIRE(error_of([&] { CorpusSource(too_short, "short.bin", 1000, 16, 7); }).path() == "short.bin");
  ds::Error error = error_of([&] { CorpusSource(counting, "big.bin", 500, 16, 7); });
  REQUIRE(error.path() == "big.bin");
  REQUIRE(error.message().find("500") != std::string::npos);
}

TEST_CASE("make_token_source builds the source the dstrain.data block names", "[data]") {
  TempDir dir;
  const std::string text_path = dir.file("corpus.txt");
  const std::string text = "It was the best of times, it was the worst of times, it was the age of wisdom.";
  write_bytes(text_path, text);
  const std::string tokens_path = dir.file("corpus.bin");
  ds::data::write_token_file(tokens_path, random_tokens(500, 2));

  SECTION("text: every sample is a run of the file's bytes") {
    auto source = ds::data::make_token_source({{"type", "text"}, {"path", text_path}}, 256, 8);
    for (const auto& sample : samples_of(source->batch(0, 0, 0, 1, 16))) {
      const std::string window(sample.begin(), sample.end());
      REQUIRE(text.find(window) != std::string::npos);
    }
    REQUIRE(error_of([&] { ds::data::make_token_source({{"type", "text"}, {"path", text_path}}, 100, 8); }).key() ==
            "dstrain.model.vocab_size");
  }
  SECTION("tokens: every sample is a run of the file's tokens") {
    const std::vector<uint16_t> tokens = ds::data::read_token_file(tokens_path);
    auto source = ds::data::make_token_source({{"type", "tokens"}, {"path", tokens_path}, {"seed", 3}}, 65536, 8);
    for (const auto& sample : samples_of(source->batch(0, 0, 0, 1, 16))) {
      REQUIRE(std::search(tokens.begin(), tokens.end(), sample.begin(), sample.end()) != tokens.end());
    }
  }
  SECTION("synthetic by default") {
    auto source = ds::data::make_token_source(nullptr, 64, 8);
    REQUIRE(dynamic_cast<SyntheticSource*>(source.get()) != nullptr);
    REQUIRE(source->vocab_size() == 64);
    REQUIRE(source->block_size() == 8);
  }
  SECTION("bad blocks name the key") {
    auto key_of = [](const nlohmann::json& block) {
      return error_of([&] { ds::data::make_token_source(block, 256, 8); }).key();
    };
    REQUIRE(key_of({{"type", "parquet"}}) == "dstrain.data.type");
    REQUIRE(key_of({{"type", "tokens"}}) == "dstrain.data.path");
    REQUIRE(key_of({{"type", "synthetic"}, {"seed", -1}}) == "dstrain.data.seed");
    REQUIRE(key_of({{"type", "synthetic"}, {"path", text_path}}) == "dstrain.data.path");
    REQUIRE(key_of(nlohmann::json::array()) == "dstrain.data");
    REQUIRE(error_of([&] { ds::data::make_token_source({{"type", "tokens"}, {"path", text_path}}, 256, 8); }).path() ==
            text_path);
  }
}

TEST_CASE("the ranks' micro-batches over all accumulation steps are exactly the global batch", "[data]") {
  std::vector<uint16_t> corpus = random_tokens(5000, 3);
  for (uint16_t& token : corpus) token %= 64;
  const SyntheticSource synthetic(64, 16, 11);
  const CorpusSource from_corpus(corpus, "corpus", 64, 16, 11);
  const int64_t train_batch_size = 16;
  for (const TokenSource* source : {static_cast<const TokenSource*>(&synthetic), static_cast<const TokenSource*>(&from_corpus)}) {
    for (int64_t step : {0, 5}) {
      const Batch global = source->batch(step, 0, 0, 1, train_batch_size);
      for (int world : {1, 2, 4}) {
        for (int accumulation : {1, 2, 4}) {
          INFO("step " << step << ", world " << world << ", accumulation " << accumulation);
          const int64_t micro = train_batch_size / (world * accumulation);
          std::vector<at::Tensor> inputs, targets;
          for (int a = 0; a < accumulation; ++a) {
            for (int rank = 0; rank < world; ++rank) {
              const Batch part = source->batch(step, a, rank, world, micro);
              REQUIRE(part.inputs.size(0) == micro);
              inputs.push_back(part.inputs);
              targets.push_back(part.targets);
            }
          }
          REQUIRE(torch::equal(torch::cat(inputs), global.inputs));
          REQUIRE(torch::equal(torch::cat(targets), global.targets));
        }
      }
    }
  }
  REQUIRE_THROWS_AS(synthetic.batch(0, 0, 2, 2, 4), ds::Error);
  REQUIRE_THROWS_AS(synthetic.batch(0, 0, 0, 1, 0), ds::Error);
}

TEST_CASE("batches depend only on seed and step, targets being inputs shifted by one", "[data]") {
  const SyntheticSource source(64, 16, 1);
  const Batch batch = source.batch(3, 0, 0, 1, 8);
  REQUIRE(torch::equal(batch.inputs.narrow(1, 1, 15), batch.targets.narrow(1, 0, 15)));
  REQUIRE(torch::equal(SyntheticSource(64, 16, 1).batch(3, 0, 0, 1, 8).inputs, batch.inputs));
  REQUIRE_FALSE(torch::equal(source.batch(4, 0, 0, 1, 8).inputs, batch.inputs));
  REQUIRE_FALSE(torch::equal(SyntheticSource(64, 16, 2).batch(3, 0, 0, 1, 8).inputs, batch.inputs));
  REQUIRE(batch.inputs.min().item<int64_t>() >= 0);
  REQUIRE(batch.targets.max().item<int64_t>() < 64);
}

TEST_CASE("the synthetic corpus is learnable: a bigram model predicts it far better than chance", "[data]") {
  const int64_t V = 64, K = SyntheticSource::kSuccessors;
  const double noise = SyntheticSource::kNoise;
  const SyntheticSource source(V, 64, 5);

  // Bigram counts from one step's batch, smoothed, scored on another step's batch.
  std::vector<double> counts(V * V, 0.1);
  std::vector<double> totals(V, 0.1 * V);
  for (const auto& sample : samples_of(source.batch(0, 0, 0, 1, 1000))) {
    for (size_t t = 1; t < sample.size(); ++t) {
      counts[sample[t - 1] * V + sample[t]] += 1;
      totals[sample[t - 1]] += 1;
    }
  }
  double nll = 0.0, transitions = 0.0, to_successor = 0.0;
  for (const auto& sample : samples_of(source.batch(1, 0, 0, 1, 200))) {
    for (size_t t = 1; t < sample.size(); ++t) {
      nll -= std::log(counts[sample[t - 1] * V + sample[t]] / totals[sample[t - 1]]);
      const int64_t* successors = source.successors(sample[t - 1]);
      to_successor += std::count(successors, successors + K, sample[t]);
      transitions += 1;
    }
  }
  const double cross_entropy = nll / transitions;

  // The chain's entropy per token: each of the K successors has probability (1 - noise) / K +
  // noise / V, every other token noise / V.
  const double p_successor = (1 - noise) / K + noise / V, p_other = noise / V;
  const double entropy = -(K * p_successor * std::log(p_successor) + (V - K) * p_other * std::log(p_other));
  REQUIRE(to_successor / transitions == Approx(1 - noise + noise * K / V).margin(0.01));
  REQUIRE(cross_entropy == Approx(entropy).margin(0.15));
  REQUIRE(cross_entropy < 0.6 * std::log(V));
}
