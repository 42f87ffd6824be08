// Instruction datasets to token files with a per-token loss mask: what `dstrain tokenize` does with
// .jsonl and .json inputs (docs/instruction-data.md is the user's guide and the file format).
//
// Records, one per JSONL line or JSON array element, in four shapes (--format auto tells them by
// their fields):
//   messages           {"messages": [{"role", "content"}, ...]}   content: a string or a list of parts
//   sharegpt           {"conversations": [{"from", "value"}, ...]} human/gpt/system -> user/assistant/system
//   alpaca             {"instruction", "input", "output"}          -> user "instruction\n\ninput", assistant output
//   prompt_completion  {"prompt", "completion"}                    TRL's: not templated, EOS appended
// --column-map KEY=FIELD reads KEY from FIELD, as torchtune's column_map does.
//
// Conversations go through the chat template and are encoded without adding special tokens (the
// template wrote them). The loss mask follows TRL: assistant_only_loss for conversations (the
// {% generation %} spans, else each assistant turn rendered as a prefix), completion_only_loss for
// prompt/completion (the completion and its EOS).
//
// A bad record is skipped with a message naming the file and line (or array index); the summary at
// the end counts what was skipped and why. Nothing is written unless every file is.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "dstrain/engine/tokenizer/tokenizer.hpp"

namespace ds::app {

struct InstructionOptions {
  std::string chat_template;               // --chat-template FILE
  std::vector<std::string> template_args;  // --template-arg KEY=JSON
  std::vector<std::string> column_map;     // --column-map KEY=FIELD
  std::string format = "auto";             // auto|messages|sharegpt|alpaca|prompt_completion
  int64_t max_length = 0;                  // 0: no limit
  std::string on_too_long = "truncate";    // truncate|skip
};

void add_instruction_options(CLI::App& app, InstructionOptions& options);

// True when the inputs are instruction data (.jsonl or .json), not plain text documents; throws
// ds::Error when they mix the two.
bool is_instruction_data(const std::vector<std::string>& inputs);

// Writes PREFIX_{train,val}.{bin,mask,docs}. `tokenizer_spec` is --tokenizer (an hf:DIR gives the
// chat template and its special tokens). Throws ds::Error naming the file at fault.
void run_instruction_tokenize(const tokenizer::Tokenizer& tokenizer, const std::string& tokenizer_spec,
                              const std::vector<std::string>& inputs, const std::string& out_prefix,
                              double valid_fraction, const InstructionOptions& options);

}  // namespace ds::app
