#include "generate_command.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <torch/torch.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "dstrain/engine/checkpoint/export.hpp"
#include "dstrain/runtime/error.hpp"
#include "model_checkpoint.hpp"
#include "model_choice.hpp"
#include "trainer_block.hpp"

namespace ds::app {
namespace {

struct GenerateOptions {
  std::string dir;
  std::string tag;
  std::string prompt;
  std::string tokenizer;  // "": bytes
  int64_t max_new_tokens = 0;  // 0: as many as the longest sequence allows, at most 100
  double temperature = 1.0;
  int64_t top_k = 0;
  uint64_t seed = 0;
};

// dstrain-codec SPEC ARGS... running beside this program, its stdin or stdout a pipe to us.
class Codec {
 public:
  Codec(const std::string& spec, const std::vector<std::string>& args, bool we_write) {
    const std::string program =
        (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "dstrain-codec").string();
    int ends[2];
    if (::pipe(ends) != 0) throw Error("cannot make a pipe to dstrain-codec").with_errno(errno);
    std::fflush(stdout);
    pid_ = ::fork();
    if (pid_ < 0) throw Error("cannot start dstrain-codec").with_path(program).with_errno(errno);
    if (pid_ == 0) {
      ::dup2(we_write ? ends[0] : ends[1], we_write ? STDIN_FILENO : STDOUT_FILENO);
      ::close(ends[0]);
      ::close(ends[1]);
      std::vector<char*> argv{const_cast<char*>(program.c_str()), const_cast<char*>(spec.c_str())};
      for (const std::string& arg : args) argv.push_back(const_cast<char*>(arg.c_str()));
      argv.push_back(nullptr);
      ::execv(program.c_str(), argv.data());
      std::fprintf(stderr, "dstrain generate: cannot run %s: %s\n", program.c_str(), std::strerror(errno));
      ::_exit(127);
    }
    ::close(we_write ? ends[0] : ends[1]);
    stream_ = ::fdopen(we_write ? ends[1] : ends[0], we_write ? "w" : "r");
  }
  ~Codec() {
    if (pid_ > 0) wait();
  }
  FILE* stream() { return stream_; }
  // Closes our end and returns the program's exit status.
  int wait() {
    if (stream_) std::fclose(stream_), stream_ = nullptr;
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  }

 private:
  pid_t pid_ = -1;
  FILE* stream_ = nullptr;
};

std::vector<int64_t> encode_prompt(const GenerateOptions& options, int64_t vocab_size) {
  std::vector<int64_t> ids;
  if (options.tokenizer.empty()) {
    if (vocab_size < 256)
      throw Error("byte tokens need vocab_size >= 256, the model has " + std::to_string(vocab_size) +
                  ": pass the --tokenizer it was trained with")
          .with_key("--tokenizer");
    for (unsigned char byte : options.prompt) ids.push_back(byte);
  } else {
    Codec codec(options.tokenizer, {"--encode", options.prompt}, /*we_write=*/false);
    for (long long id; std::fscanf(codec.stream(), "%lld", &id) == 1;) ids.push_back(id);
    if (codec.wait() != 0)
      throw Error("the tokenizer " + options.tokenizer + " cannot encode the prompt (its message above)")
          .with_key("--prompt");
  }
  if (ids.empty()) throw Error("the prompt is empty: generation starts from at least one token").with_key("--prompt");
  for (int64_t id : ids)
    if (id >= vocab_size)
      throw Error("the prompt holds token " + std::to_string(id) + ", not below the model's vocab_size " +
                  std::to_string(vocab_size) + ": is --tokenizer the one the model was trained with?")
          .with_key("--tokenizer");
  return ids;
}

void check_length(int64_t prompt_tokens, int64_t max_new_tokens, const ModelChoice& model) {
  // The last new token is never fed back, so prompt + new - 1 positions must fit.
  const int64_t limit = model.max_sequence_length() - prompt_tokens + 1;
  if (max_new_tokens > limit)
    throw Error("--max-new-tokens " + std::to_string(max_new_tokens) + " with a prompt of " +
                std::to_string(prompt_tokens) + " tokens passes the model's " + model.max_sequence_key() + " " +
                std::to_string(model.max_sequence_length()) +
                ": at most " + std::to_string(std::max<int64_t>(limit, 0)) + " new tokens")
        .with_key("--max-new-tokens");
}

void generate_text(const GenerateOptions& options) {
  const std::vector<std::string> folders = model_checkpoint_folders(options.dir, options.tag);
  const nlohmann::json config = checkpoint_config(folders[0]);
  const TrainerBlock trainer = read_trainer_block(config.value("dstrain", nlohmann::json::object()));
  const ModelChoice choice = choose_model(trainer.model);
  const std::vector<int64_t> prompt = encode_prompt(options, choice.vocab_size());
  const int64_t fit = choice.max_sequence_length() - static_cast<int64_t>(prompt.size()) + 1;
  const int64_t max_new_tokens = options.max_new_tokens > 0 ? options.max_new_tokens : std::clamp<int64_t>(fit, 1, 100);
  check_length(static_cast<int64_t>(prompt.size()), max_new_tokens, choice);
  const CausalLM model = choice.build();
  load_checkpoint_weights(folders, *model);

  std::fwrite(options.prompt.data(), 1, options.prompt.size(), stdout);
  std::fflush(stdout);
  std::unique_ptr<Codec> decoder;
  if (!options.tokenizer.empty()) {
    // The prompt's ids too: a token's text can depend on those before it (hf:DIR's decoders).
    std::string after;
    for (const int64_t id : prompt) after += (after.empty() ? "" : " ") + std::to_string(id);
    decoder = std::make_unique<Codec>(options.tokenizer, std::vector<std::string>{"--decode", "--after", after},
                                      /*we_write=*/true);
  }
  auto write_token = [&](int64_t token) {
    if (decoder) {
      std::fprintf(decoder->stream(), "%lld\n", static_cast<long long>(token));
      std::fflush(decoder->stream());
    } else {
      std::fputc(static_cast<int>(token), stdout);  // byte tokens: ids >= 256 are not text
      std::fflush(stdout);
    }
  };
  const auto start = std::chrono::steady_clock::now();
  const std::vector<int64_t> generated =
      model.generate(prompt, max_new_tokens, {options.temperature, options.top_k}, options.seed, write_token);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  if (decoder && decoder->wait() != 0) throw Error("the tokenizer " + options.tokenizer + " cannot decode the tokens");
  std::printf("\n");
  std::fflush(stdout);
  std::fprintf(stderr, "generated %zu tokens in %.2f s: %.1f tokens/s\n", generated.size(), seconds,
               generated.size() / seconds);
}

}  // namespace

void add_generate_command(CLI::App& app) {
  auto* command = app.add_subcommand("generate", "sample text from a checkpoint's GPT or Llama (KV cache), streaming it");
  auto options = std::make_shared<GenerateOptions>();
  command->add_option("--checkpoint", options->dir, "checkpoint directory (as given to --save-dir; a pipeline's too)")->required();
  command->add_option("--tag", options->tag, "checkpoint tag (default: the directory's latest)");
  command->add_option("--prompt", options->prompt, "the text to continue")->required();
  command->add_option("--max-new-tokens", options->max_new_tokens,
                      "tokens to generate (default: as many as block_size allows, at most 100)")
      ->check(CLI::PositiveNumber);
  command->add_option("--temperature", options->temperature, "divides the logits; 0: greedy (default 1)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--top-k", options->top_k, "draw among the K likeliest tokens; 1: greedy, 0: all (default)")
      ->check(CLI::NonNegativeNumber);
  command->add_option("--seed", options->seed, "the sampler's seed: one seed, one text (default 0)");
  command->add_option("--tokenizer", options->tokenizer,
                      "spm:FILE, gpt2:DIR or hf:DIR, the one the training data was tokenized with (default: bytes)");
  command->callback([options] { generate_text(*options); });
}

}  // namespace ds::app
