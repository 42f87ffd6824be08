// `dstrain encode ...` and `dstrain decode ...`: run dstrain-codec, installed beside dstrain, with
// the same arguments (codec_commands.hpp: tokenizers stay out of the LibTorch process).
#pragma once

#include <CLI/CLI.hpp>

namespace ds::app {

void add_codec_commands(CLI::App& app);

}  // namespace ds::app
