#include "dstrain/engine/chat_template/chat_template.hpp"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "ast.hpp"
#include "evaluator.hpp"
#include "lexer.hpp"
#include "parser.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::chat_template {

struct ChatTemplate::Program {
  Body body;
};

ChatTemplate ChatTemplate::parse(const std::string& source, const std::string& name) {
  ChatTemplate t;
  auto program = std::make_shared<Program>();
  program->body = parse_template(tokenize(normalize_source(source), name), name);
  t.program_ = std::move(program);
  t.name_ = name;
  return t;
}

namespace {

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw ds::Error("cannot read the chat template file").with_path(path.string());
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw ds::Error("cannot read the chat template file").with_path(path.string());
  return ss.str();
}

// A special token as tokenizer_config.json writes it: a string or an AddedToken object.
std::optional<std::string> special_token(const nlohmann::json& config, const std::string& key, const std::string& path) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content") && (*it)["content"].is_string()) return (*it)["content"].get<std::string>();
  throw ds::Error("expected a string or an object with a string \"content\"").with_path(path).with_key(key);
}

}  // namespace

ChatTemplate ChatTemplate::from_hf_folder(const std::string& dir, const std::string& override_file) {
  namespace fs = std::filesystem;
  const fs::path config_path = fs::path(dir) / "tokenizer_config.json";
  nlohmann::json config = nlohmann::json::object();
  if (fs::exists(config_path)) {
    try {
      config = nlohmann::json::parse(read_file(config_path));
    } catch (const nlohmann::json::exception& e) {
      throw ds::Error(std::string("not valid JSON: ") + e.what()).with_path(config_path.string());
    }
    if (!config.is_object()) throw ds::Error("expected a JSON object").with_path(config_path.string());
  }
  std::string source, name;
  const fs::path jinja_path = fs::path(dir) / "chat_template.jinja";
  if (!override_file.empty()) {
    source = read_file(override_file);
    name = override_file;
  } else if (fs::exists(jinja_path)) {
    source = read_file(jinja_path);
    name = jinja_path.string();
  } else {
    auto it = config.find("chat_template");
    if (it == config.end() || it->is_null())
      throw ds::Error("the tokenizer has no chat template (no chat_template.jinja, no \"chat_template\" in "
                      "tokenizer_config.json); give one with --chat-template FILE")
          .with_path(config_path.string());
    name = config_path.string() + ":chat_template";
    if (it->is_string()) {
      source = it->get<std::string>();
    } else if (it->is_array()) {
      bool found = false;
      for (const auto& entry : *it) {
        if (!entry.is_object() || !entry.contains("name") || !entry.contains("template") || !entry["name"].is_string() ||
            !entry["template"].is_string())
          throw ds::Error("expected a list of {\"name\": ..., \"template\": ...}").with_path(config_path.string()).with_key("chat_template");
        if (entry["name"] == "default") {
          source = entry["template"].get<std::string>();
          found = true;
        }
      }
      if (!found) throw ds::Error("no template named \"default\" in the list").with_path(config_path.string()).with_key("chat_template");
      name += "[default]";
    } else {
      throw ds::Error("expected a string or a list of named templates").with_path(config_path.string()).with_key("chat_template");
    }
  }
  ChatTemplate t = parse(source, name);
  t.bos_token_ = special_token(config, "bos_token", config_path.string());
  t.eos_token_ = special_token(config, "eos_token", config_path.string());
  return t;
}

Rendered ChatTemplate::render(const Json& messages, const RenderOptions& options) const {
  // The variables apply_chat_template passes: the special tokens, messages, tools, documents,
  // add_generation_prompt, then the caller's own (which win, as **kwargs does).
  Json context = Json::object();
  const auto& bos = options.bos_token ? options.bos_token : bos_token_;
  const auto& eos = options.eos_token ? options.eos_token : eos_token_;
  if (bos) context["bos_token"] = *bos;
  if (eos) context["eos_token"] = *eos;
  context["messages"] = messages;
  context["tools"] = options.tools;
  context["documents"] = nullptr;
  context["add_generation_prompt"] = options.add_generation_prompt;
  if (!options.extra.is_null()) {
    if (!options.extra.is_object()) throw ds::Error("template arguments must be a JSON object");
    for (const auto& [k, v] : options.extra.items()) context[k] = v;
  }
  RenderResult r = evaluate(program_->body, context, name_);
  Rendered out;
  out.text = std::move(r.text);
  for (const auto& [b, e] : r.generation) out.generation.push_back({b, e});
  return out;
}

}  // namespace ds::chat_template
