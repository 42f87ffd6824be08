#include "tokenize_command.hpp"

#include <sys/stat.h>

#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "dstrain/engine/data/token_file.hpp"
#include "dstrain/engine/tokenizer/text_file.hpp"
#include "dstrain/engine/tokenizer/tokenizer.hpp"
#include "dstrain/runtime/error.hpp"
#include "progress.hpp"

namespace ds::app {
namespace {

constexpr double kPlainLineSeconds = 10;
constexpr double kRedrawSeconds = 0.1;

// What the user sees while the documents are encoded: the bar on a terminal, else a plain line
// every kPlainLineSeconds.
class Report {
 public:
  Report(double total_bytes, bool bar)
      : total_mb_(total_bytes / 1e6), bar_(0, total_bytes / 1e6, "MB"), drawing_(bar) {}

  void update(double done_bytes, size_t tokens) {
    const auto now = std::chrono::steady_clock::now();
    const double since = std::chrono::duration<double>(now - last_).count();
    const double done_mb = done_bytes / 1e6;
    if (drawing_ && since >= kRedrawSeconds) {
      bar_.draw(done_mb, std::to_string(tokens) + " tokens");
      last_ = now;
    } else if (!drawing_ && since >= kPlainLineSeconds) {
      std::printf("tokenize: %.1f/%.1f MB, %zu tokens, %.2f MB/s, ETA %s\n", done_mb, total_mb_, tokens,
                  bar_.rate(done_mb), bar_.time_left(done_mb).c_str());
      std::fflush(stdout);
      last_ = now;
    }
  }
  void finish(double done_bytes, size_t tokens) {
    if (!drawing_) return;
    bar_.draw(done_bytes / 1e6, std::to_string(tokens) + " tokens");
    bar_.finish();
  }
  double rate_mb(double done_bytes) const { return bar_.rate(done_bytes / 1e6); }

 private:
  double total_mb_;
  ProgressBar bar_;
  bool drawing_;
  std::chrono::steady_clock::time_point last_ = std::chrono::steady_clock::now();
};

std::vector<uint16_t> narrow(const std::vector<uint32_t>& ids) {
  return std::vector<uint16_t>(ids.begin(), ids.end());
}

}  // namespace

void run_tokenize(const TokenizeOptions& options) {
  if (!(options.valid_fraction >= 0 && options.valid_fraction < 1))
    throw Error("--valid-fraction must be in [0, 1), got " + std::to_string(options.valid_fraction))
        .with_key("--valid-fraction");
  const auto tokenizer = tokenizer::load_tokenizer(options.tokenizer);
  // llm.c's files hold uint16 ids.
  if (tokenizer->vocab_size() > 65536)
    throw Error("the tokenizer has " + std::to_string(tokenizer->vocab_size()) +
                " ids; llm.c token files hold ids below 65536")
        .with_path(options.tokenizer);
  if (is_instruction_data(options.inputs)) {
    run_instruction_tokenize(*tokenizer, options.tokenizer, options.inputs, options.out_prefix, options.valid_fraction,
                             options.instruction);
    return;
  }
  double total_bytes = 0;
  for (const std::string& input : options.inputs) {
    struct stat info {};
    if (::stat(input.c_str(), &info) != 0) throw Error("cannot read input").with_path(input).with_errno(errno);
    total_bytes += static_cast<double>(info.st_size);
  }
  std::printf("tokenize: %zu documents, %.1f MB, with %s\n", options.inputs.size(), total_bytes / 1e6,
              tokenizer->description().c_str());
  std::fflush(stdout);

  const auto end_of_text = tokenizer->end_of_text();
  Report report(total_bytes, draws_progress(options.progress));
  std::vector<uint32_t> train, valid, ids;
  double done_bytes = 0;
  for (const std::string& input : options.inputs) {
    const std::string text = tokenizer::read_text_file(input);
    ids.clear();
    try {
      tokenizer->encode(text, ids, [&](size_t bytes) {
        report.update(done_bytes + static_cast<double>(bytes), train.size() + valid.size() + ids.size());
      });
    } catch (Error& e) {
      e.with_path(input);
      throw;
    }
    done_bytes += static_cast<double>(text.size());
    const auto valid_count = static_cast<size_t>(std::floor(options.valid_fraction * static_cast<double>(ids.size())));
    const auto cut = ids.end() - static_cast<std::ptrdiff_t>(valid_count);
    if (end_of_text) train.push_back(*end_of_text);
    train.insert(train.end(), ids.begin(), cut);
    if (valid_count > 0) {
      if (end_of_text) valid.push_back(*end_of_text);
      valid.insert(valid.end(), cut, ids.end());
    }
  }
  report.finish(done_bytes, train.size() + valid.size());

  const std::filesystem::path prefix(options.out_prefix);
  if (prefix.has_parent_path()) std::filesystem::create_directories(prefix.parent_path());
  const std::string train_path = options.out_prefix + "_train.bin", valid_path = options.out_prefix + "_val.bin";
  data::write_token_file(train_path, narrow(train));
  data::write_token_file(valid_path, narrow(valid));
  std::printf("tokenize: %zu training tokens -> %s, %zu validation tokens -> %s (%.2f MB/s)\n", train.size(),
              train_path.c_str(), valid.size(), valid_path.c_str(), report.rate_mb(done_bytes));
}

void add_tokenize_options(CLI::App& app, TokenizeOptions& options) {
  app.add_option("--tokenizer", options.tokenizer, "gpt2:DIR (vocab.json, merges.txt), spm:FILE (.model) or hf:DIR (tokenizer.json)")
      ->required();
  app.add_option("--input", options.inputs, "UTF-8 text files, one document each; or .jsonl/.json instruction data")
      ->required();
  app.add_option("--out", options.out_prefix, "output prefix: writes PREFIX_train.bin and PREFIX_val.bin")->required();
  app.add_option("--valid-fraction", options.valid_fraction,
                 "share of each document's tokens (its end) for PREFIX_val.bin (default 0.1); of whole records "
                 "for instruction data");
  add_progress_option(app, options.progress);
  add_instruction_options(app, options.instruction);
}

}  // namespace ds::app
