// `dstrain generate --checkpoint DIR --prompt TEXT [--max-new-tokens N] [--temperature T]
// [--top-k K] [--seed S] [--tokenizer spm:FILE|gpt2:DIR] [--tag T]`: samples from a checkpoint's
// GPT or Llama with the KV cache (gpt_inference.hpp, llama_inference.hpp), in one process whatever world size wrote it
// (DIR may be a pipeline's save folder: model_checkpoint.hpp). The
// prompt is echoed, then each token's text is written to stdout as it is chosen; the rate goes to
// stderr at the end. Without --tokenizer tokens are bytes (data type "text"); with one, dstrain-codec
// encodes and decodes (SentencePiece cannot share a process with LibTorch). One seed, one text.
#pragma once

#include <CLI/CLI.hpp>

namespace ds::app {

void add_generate_command(CLI::App& app);

}  // namespace ds::app
