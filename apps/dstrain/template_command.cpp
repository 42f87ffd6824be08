#include "template_command.hpp"

#include <iostream>
#include <string>
#include <vector>

#include "dstrain/engine/chat_template/chat_template.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::app {
namespace {

using chat_template::ChatTemplate;
using chat_template::Json;

struct TemplateOptions {
  std::string tokenizer;
  std::string chat_template;
  bool add_generation_prompt = false;
  std::vector<std::string> args;
};

// --arg KEY=JSON: a template variable such as enable_thinking=false or date_string="26 Jul 2024".
Json parse_args(const std::vector<std::string>& args) {
  Json extra = Json::object();
  for (const std::string& arg : args) {
    const size_t eq = arg.find('=');
    if (eq == std::string::npos || eq == 0) throw Error("expected KEY=JSON, got \"" + arg + "\"").with_key("--arg");
    Json value = Json::parse(arg.substr(eq + 1), nullptr, /*allow_exceptions=*/false);
    if (value.is_discarded())
      throw Error("the value of " + arg.substr(0, eq) + " is not JSON (a string needs its quotes: KEY='\"text\"')")
          .with_key("--arg");
    extra[arg.substr(0, eq)] = std::move(value);
  }
  return extra;
}

void run_template(const TemplateOptions& options) {
  if (options.tokenizer.rfind("hf:", 0) != 0)
    throw Error("expected hf:DIR (a Hugging Face tokenizer folder), got \"" + options.tokenizer + "\"").with_key("--tokenizer");
  const ChatTemplate templ = ChatTemplate::from_hf_folder(options.tokenizer.substr(3), options.chat_template);
  chat_template::RenderOptions render;
  render.add_generation_prompt = options.add_generation_prompt;
  render.extra = parse_args(options.args);

  std::string out, line;
  for (size_t number = 1; std::getline(std::cin, line); ++number) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = "stdin line " + std::to_string(number) + ": ";
    Json record = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    if (record.is_discarded() || !record.is_object()) throw Error(where + "not a JSON object");
    if (!record.contains("messages") || !record["messages"].is_array())
      throw Error(where + "no \"messages\" list").with_key("messages");
    render.tools = record.contains("tools") ? record["tools"] : Json();
    try {
      out += Json(templ.render(record["messages"], render).text).dump(-1, ' ', false, Json::error_handler_t::strict);
    } catch (const Error& e) {
      throw Error(where + e.what());
    }
    out += '\n';
  }
  if (std::cin.bad()) throw Error("cannot read stdin");
  std::cout << out << std::flush;
}

}  // namespace

void add_template_command(CLI::App& app) {
  auto options = std::make_shared<TemplateOptions>();
  CLI::App* cmd = app.add_subcommand(
      "template", "Render JSONL conversations on stdin with a tokenizer's chat template, one JSON string per line");
  cmd->add_option("--tokenizer", options->tokenizer, "hf:DIR, a Hugging Face tokenizer folder")->required();
  cmd->add_option("--chat-template", options->chat_template, "a template file used instead of the folder's")
      ->check(CLI::ExistingFile);
  cmd->add_flag("--add-generation-prompt", options->add_generation_prompt, "end with the assistant's turn opened");
  cmd->add_option("--arg", options->args, "KEY=JSON: a template variable, e.g. enable_thinking=false (repeatable)");
  cmd->callback([options] { run_template(*options); });
}

}  // namespace ds::app
