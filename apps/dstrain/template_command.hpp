// `dstrain template --tokenizer hf:DIR [--chat-template FILE] [--add-generation-prompt]
// [--arg KEY=JSON ...]`: renders conversations with the tokenizer's chat template as Hugging
// Face's apply_chat_template would (engine/chat_template, docs/chat-templates.md). Reads JSONL
// on stdin, one {"messages": [...], "tools": [...]} per line (blank lines skipped), and prints each
// rendering as one JSON string per line, all or nothing: an error names the input line.
#pragma once

#include <CLI/CLI.hpp>

namespace ds::app {

void add_template_command(CLI::App& app);

}  // namespace ds::app
