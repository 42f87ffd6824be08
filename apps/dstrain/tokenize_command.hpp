// `dstrain tokenize --tokenizer (gpt2:DIR | spm:FILE) --input TEXT... --out PREFIX
// [--valid-fraction F]`: text files to the llm.c token files the trainer reads (data type
// "tokens"), PREFIX_train.bin and PREFIX_val.bin.
//
// Each input file is one document. Its ids follow the tokenizer's end-of-text id when it has one
// (llm.c's convention: the separator opens each document); the last floor(F x n) of a document's
// n ids go to the validation file, behind an end-of-text id of their own, the rest to the training
// file. So every document is in both files and the validation text is never trained on.
//
// .jsonl and .json inputs are instruction datasets instead (instruction_data.hpp): whole records,
// a loss mask and document offsets beside each token file.
//
// It runs as its own program, dstrain-tokenize, that `dstrain tokenize` executes
// (tokenize_exec.hpp): Debian's libsentencepiece carries its own protobuf 3.14, which cannot share
// a process with the protobuf 3.21 that LibTorch loads.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "instruction_data.hpp"
#include "progress.hpp"

namespace ds::app {

struct TokenizeOptions {
  std::string tokenizer;
  std::vector<std::string> inputs;
  std::string out_prefix;
  double valid_fraction = 0.1;
  ProgressMode progress = ProgressMode::Auto;
  InstructionOptions instruction;  // .jsonl/.json inputs (instruction_data.hpp)
};

void add_tokenize_options(CLI::App& app, TokenizeOptions& options);
// Throws ds::Error naming the file (and offset) at fault.
void run_tokenize(const TokenizeOptions& options);

}  // namespace ds::app
