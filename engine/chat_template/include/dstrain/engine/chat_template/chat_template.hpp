// Hugging Face chat templates, rendered as transformers' apply_chat_template renders them.
//
// A chat template is a Jinja2 program in a tokenizer's tokenizer_config.json ("chat_template") or
// chat_template.jinja. Hugging Face renders it in an ImmutableSandboxedEnvironment with
// trim_blocks, lstrip_blocks, loopcontrols, its own tojson (no HTML escaping, keys in their
// order), raise_exception(msg), strftime_now(fmt) and a {% generation %} tag marking the
// assistant's text. This is an interpreter of the subset real templates use; docs/chat-templates.md
// lists it. Anything outside it is a ds::Error naming the template, line and column (never a
// rendering that differs silently).
//
//   auto t = ds::chat_template::ChatTemplate::from_hf_folder("models/qwen");
//   ds::chat_template::RenderOptions o;
//   o.add_generation_prompt = true;
//   auto r = t.render(messages, o);   // r.text, r.generation
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ds::chat_template {

// Objects keep their key order: tojson prints keys as the conversation wrote them.
using Json = nlohmann::ordered_json;

struct RenderOptions {
  bool add_generation_prompt = false;
  // Unset: the template's own (from_hf_folder), else the variable is undefined, as when a
  // tokenizer has no such special token.
  std::optional<std::string> bos_token, eos_token;
  Json tools;                       // null is passed as None, as apply_chat_template passes it
  Json extra = Json::object();      // more variables, e.g. {"enable_thinking": false}
};

// [begin, end) in bytes of Rendered::text: the output of one {% generation %} block (HF's
// return_assistant_tokens_mask; HF counts code points, we count UTF-8 bytes).
struct Span {
  size_t begin, end;
};

struct Rendered {
  std::string text;
  std::vector<Span> generation;
};

class ChatTemplate {
 public:
  // Parses `source`; `name` (a path or "tokenizer_config.json:chat_template") is what errors name.
  static ChatTemplate parse(const std::string& source, const std::string& name);

  // A Hugging Face folder: `override_file` if given (a template file, like transformers'
  // --chat-template), else chat_template.jinja, else tokenizer_config.json's "chat_template" (a
  // string, or a list of {"name", "template"} from which "default" is taken). bos_token and
  // eos_token come from tokenizer_config.json (a string or an AddedToken object's "content").
  static ChatTemplate from_hf_folder(const std::string& dir, const std::string& override_file = "");

  // `messages` is a list of {"role", "content", ...}; content may be a string or a list of parts.
  // Throws ds::Error for raise_exception(msg) (its message included) and for every error above.
  Rendered render(const Json& messages, const RenderOptions& options) const;

  const std::string& name() const { return name_; }
  const std::optional<std::string>& bos_token() const { return bos_token_; }
  const std::optional<std::string>& eos_token() const { return eos_token_; }

 private:
  struct Program;
  std::shared_ptr<const Program> program_;
  std::string name_;
  std::optional<std::string> bos_token_, eos_token_;
};

}  // namespace ds::chat_template
