// `dstrain encode` and `dstrain decode`, run by dstrain-codec (torch-free, as dstrain tokenize):
//   dstrain encode --tokenizer T [--add-special-tokens]   stdin: ["text", ...]  stdout: [[ids], ...]
//   dstrain decode --tokenizer T [--skip-special-tokens]  stdin: [[ids], ...]  stdout: ["text", ...]
// T is any tokenizer spec (tokenizer.hpp). Special tokens (the post-processor's BOS/EOS) are added,
// and skipped, for hf:DIR only; the other kinds have none to add. Errors name the array index.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace ds::app {

// The text of `ids` under a spec that is not hf:DIR (codec_main's decoders).
using DecodeIds = std::function<std::string(const std::vector<uint32_t>& ids)>;

// argv[0] is "encode" or "decode". Returns the exit status.
int run_codec_command(int argc, char** argv, const std::function<DecodeIds(const std::string& spec)>& decoder_of);

}  // namespace ds::app
