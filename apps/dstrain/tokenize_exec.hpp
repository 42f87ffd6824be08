// `dstrain tokenize ...`: runs dstrain-tokenize, installed beside dstrain, with the same arguments
// (tokenize_command.hpp: SentencePiece and LibTorch cannot share a process).
#pragma once

#include <CLI/CLI.hpp>

namespace ds::app {

void add_tokenize_command(CLI::App& app);

}  // namespace ds::app
