#include "instruction_data.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <optional>
#include <sstream>

#include "dstrain/engine/chat_template/chat_template.hpp"
#include "dstrain/engine/tokenizer/text_file.hpp"
#include "dstrain/engine/tokenizer/utf8.hpp"
#include "dstrain/runtime/error.hpp"
#include "instruction_files.hpp"

namespace ds::app {
namespace {

using chat_template::ChatTemplate;
using chat_template::Json;

// A record we skip: `kind` is what the summary counts it as.
struct Skip {
  std::string kind, message;
};

struct Record {
  bool conversation = true;
  Json messages;                        // conversation
  std::optional<size_t> completion_at;  // conversational prompt/completion: the completion's first message
  std::string prompt, completion;       // prompt/completion
};

// --column-map: the dataset's field for each of our names.
class Columns {
 public:
  explicit Columns(const std::vector<std::string>& entries) {
    for (const std::string& entry : entries) {
      const size_t eq = entry.find('=');
      if (eq == std::string::npos || eq == 0 || eq + 1 == entry.size())
        throw Error("expected KEY=FIELD, got \"" + entry + "\"").with_key("--column-map");
      map_[entry.substr(0, eq)] = entry.substr(eq + 1);
    }
  }
  std::string operator()(const std::string& key) const {
    auto it = map_.find(key);
    return it == map_.end() ? key : it->second;
  }

 private:
  std::map<std::string, std::string> map_;
};

const Json& field(const Json& object, const std::string& name, const char* what) {
  if (!object.is_object()) throw Skip{"missing fields", std::string(what) + " is not a JSON object"};
  auto it = object.find(name);
  if (it == object.end() || it->is_null())
    throw Skip{"missing fields", std::string(what) + " has no \"" + name + "\""};
  return *it;
}

std::string string_field(const Json& object, const std::string& name, const char* what) {
  const Json& value = field(object, name, what);
  if (!value.is_string()) throw Skip{"missing fields", std::string(what) + "'s \"" + name + "\" is not a string"};
  return value.get<std::string>();
}

bool blank(const std::string& text) { return text.find_first_not_of(" \t\r\n") == std::string::npos; }

// The text of a message's content: a string, or the "text" of a list of parts.
bool content_blank(const Json& content) {
  if (content.is_string()) return blank(content.get<std::string>());
  if (content.is_array()) {
    for (const Json& part : content)
      if (part.is_object() && part.contains("text") && part["text"].is_string() &&
          !blank(part["text"].get<std::string>()))
        return false;
    return true;
  }
  throw Skip{"missing fields", "a message's content is neither a string nor a list of parts"};
}

Json message(const std::string& role, Json content) {
  Json m = Json::object();
  m["role"] = role;
  m["content"] = std::move(content);
  return m;
}

std::string detect(const Json& record, const Columns& columns) {
  if (!record.is_object()) throw Skip{"missing fields", "the record is not a JSON object"};
  if (record.contains(columns("messages"))) return "messages";
  if (record.contains(columns("conversations"))) return "sharegpt";
  if (record.contains(columns("instruction")) && record.contains(columns("output"))) return "alpaca";
  if (record.contains(columns("prompt")) && record.contains(columns("completion"))) return "prompt_completion";
  throw Skip{"missing fields",
             "no known fields: \"messages\", \"conversations\", \"instruction\"/\"output\" or \"prompt\"/\"completion\""};
}

Record to_record(const Json& json, const std::string& format_option, const Columns& columns) {
  const std::string format = format_option == "auto" ? detect(json, columns) : format_option;
  Record record;
  record.messages = Json::array();
  if (format == "messages") {
    const Json& list = field(json, columns("messages"), "the record");
    if (!list.is_array()) throw Skip{"missing fields", "\"messages\" is not a list"};
    for (const Json& m : list) {
      Json out = m;
      out["role"] = string_field(m, columns("role"), "a message");
      out["content"] = field(m, columns("content"), "a message");
      record.messages.push_back(std::move(out));
    }
  } else if (format == "sharegpt") {
    const Json& list = field(json, columns("conversations"), "the record");
    if (!list.is_array()) throw Skip{"missing fields", "\"conversations\" is not a list"};
    static const std::map<std::string, std::string> roles = {
        {"human", "user"}, {"user", "user"}, {"gpt", "assistant"}, {"assistant", "assistant"}, {"system", "system"}};
    for (const Json& m : list) {
      const std::string from = string_field(m, columns("from"), "a turn");
      auto role = roles.find(from);
      if (role == roles.end())
        throw Skip{"missing fields", "a ShareGPT turn from \"" + from + "\" (known: human, gpt, system)"};
      record.messages.push_back(message(role->second, field(m, columns("value"), "a turn")));
    }
  } else if (format == "alpaca") {
    std::string user = string_field(json, columns("instruction"), "the record");
    auto input = json.find(columns("input"));
    if (input != json.end() && !input->is_null()) {
      if (!input->is_string()) throw Skip{"missing fields", "\"input\" is not a string"};
      if (!input->get<std::string>().empty()) user += "\n\n" + input->get<std::string>();
    }
    record.messages.push_back(message("user", user));
    record.messages.push_back(message("assistant", string_field(json, columns("output"), "the record")));
  } else if (format == "prompt_completion" && field(json, columns("prompt"), "the record").is_array()) {
    // TRL's conversational prompt/completion: lists of messages, the completion's are the targets.
    const Json& completion = field(json, columns("completion"), "the record");
    if (!completion.is_array()) throw Skip{"missing fields", "\"prompt\" is a list of messages but \"completion\" is not"};
    for (const Json* list : {&json[columns("prompt")], &completion}) {
      if (list == &completion) record.completion_at = record.messages.size();
      for (const Json& m : *list) {
        Json out = m;
        out["role"] = string_field(m, columns("role"), "a message");
        out["content"] = field(m, columns("content"), "a message");
        record.messages.push_back(std::move(out));
      }
    }
  } else if (format == "prompt_completion") {
    record.conversation = false;
    record.prompt = string_field(json, columns("prompt"), "the record");
    record.completion = string_field(json, columns("completion"), "the record");
    if (blank(record.completion)) throw Skip{"empty assistant turn", "the completion is empty"};
    return record;
  } else {
    throw Error("unknown --format \"" + format + "\"").with_key("--format");
  }
  bool any_assistant = false;
  for (const Json& m : record.messages) {
    if (m["role"] != "assistant") continue;
    any_assistant = true;
    if (content_blank(m["content"])) throw Skip{"empty assistant turn", "an assistant turn is empty"};
  }
  if (!any_assistant) throw Skip{"missing fields", "the conversation has no assistant turn"};
  return record;
}

// One document: its ids and their mask.
struct Document {
  std::vector<uint32_t> ids;
  std::vector<uint8_t> mask;
};

class Tokenizing {
 public:
  Tokenizing(const tokenizer::Tokenizer& tokenizer, const std::string& tokenizer_spec, const InstructionOptions& options)
      : tokenizer_(tokenizer), spec_(tokenizer_spec), options_(options), columns_(options.column_map) {
    for (const std::string& arg : options.template_args) {
      const size_t eq = arg.find('=');
      if (eq == std::string::npos || eq == 0) throw Error("expected KEY=JSON, got \"" + arg + "\"").with_key("--template-arg");
      try {
        render_.extra[arg.substr(0, eq)] = Json::parse(arg.substr(eq + 1));
      } catch (const nlohmann::json::exception&) {
        throw Error("not JSON: \"" + arg.substr(eq + 1) + "\" (a string is written \"\\\"text\\\"\")").with_key("--template-arg");
      }
    }
  }

  Document tokenize(const Json& json) {
    const Record record = to_record(json, options_.format, columns_);
    return record.conversation ? conversation(record.messages, record.completion_at) : prompt_completion(record);
  }

 private:
  const ChatTemplate& chat() {
    if (!template_) {
      if (spec_.rfind("hf:", 0) == 0) {
        template_ = ChatTemplate::from_hf_folder(spec_.substr(3), options_.chat_template);
      } else if (!options_.chat_template.empty()) {
        template_ = ChatTemplate::parse(tokenizer::read_text_file(options_.chat_template), options_.chat_template);
      } else {
        throw Error("conversations need a chat template: an hf:DIR tokenizer's, or --chat-template FILE")
            .with_key("--chat-template");
      }
    }
    return *template_;
  }

  chat_template::Rendered render(const Json& messages, bool add_generation_prompt) {
    chat_template::RenderOptions o = render_;
    o.add_generation_prompt = add_generation_prompt;
    const ChatTemplate& t = chat();  // no template, or one that does not parse: an error, not a skip
    try {
      return t.render(messages, o);
    } catch (const Error& e) {
      throw Skip{"refused by the chat template", e.what()};
    }
  }

  std::vector<uint32_t> encode(std::string_view text) const {
    std::vector<uint32_t> ids;
    try {
      tokenizer_.encode(text, ids);
    } catch (const Error& e) {
      throw Skip{"not encodable", e.what()};
    }
    return ids;
  }

  // The number of `ids` (the whole text's) that cover text[0, at): the ids of text[0, at) must
  // begin `ids`, else a token crosses the boundary and the mask would be off by part of a token.
  size_t token_boundary(const std::string& text, size_t at, const std::vector<uint32_t>& ids) const {
    if (at == 0) return 0;
    if (at == text.size()) return ids.size();
    const std::vector<uint32_t> head = encode(std::string_view(text).substr(0, at));
    if (head.size() > ids.size() || !std::equal(head.begin(), head.end(), ids.begin())) {
      const size_t from = at >= 20 ? at - 20 : 0;
      throw Skip{"target boundary inside a token",
                 "a token crosses the boundary of a target at byte " + std::to_string(at) + " of the rendered text (" +
                     Json(text.substr(from, at - from)).dump() + " | " + Json(text.substr(at, 20)).dump() +
                     "); the mask cannot be exact"};
    }
    return head.size();
  }

  Document masked(const std::string& text, const std::vector<std::pair<size_t, size_t>>& spans) const {
    Document doc;
    doc.ids = encode(text);
    doc.mask.assign(doc.ids.size(), 0);
    for (const auto& [begin, end] : spans) {
      const size_t first = token_boundary(text, begin, doc.ids), last = token_boundary(text, end, doc.ids);
      std::fill(doc.mask.begin() + static_cast<std::ptrdiff_t>(first), doc.mask.begin() + static_cast<std::ptrdiff_t>(last), 1);
    }
    return doc;
  }

  // The prefix of `whole` that `messages[0, end)` renders to, with or without the generation prompt.
  size_t rendered_prefix(const Json& messages, size_t end, bool add_generation_prompt, const std::string& whole) {
    const std::string text =
        render(Json(messages.begin(), messages.begin() + static_cast<std::ptrdiff_t>(end)), add_generation_prompt).text;
    if (whole.compare(0, text.size(), text) != 0)
      throw Skip{"refused by the chat template",
                 "the template renders the turns before message " + std::to_string(end) +
                     " differently from the whole conversation (it rewrites earlier turns), so the "
                     "targets cannot be found; give it {% generation %} blocks"};
    return text.size();
  }

  Document conversation(const Json& messages, std::optional<size_t> completion_at) {
    const chat_template::Rendered whole = render(messages, false);
    std::vector<std::pair<size_t, size_t>> spans;
    if (completion_at) {
      // TRL's completion_only_loss: everything past the prompt rendered with the generation prompt.
      spans.emplace_back(rendered_prefix(messages, *completion_at, true, whole.text), whole.text.size());
      return masked(whole.text, spans);
    }
    for (const auto& span : whole.generation) spans.emplace_back(span.begin, span.end);
    if (spans.empty()) {
      // No {% generation %} blocks: each assistant turn is what rendering it adds to the
      // conversation before it with the generation prompt, its end-of-turn included.
      for (size_t k = 0; k < messages.size(); ++k) {
        if (messages[k]["role"] != "assistant") continue;
        const size_t head = rendered_prefix(messages, k, true, whole.text);
        const size_t tail = rendered_prefix(messages, k + 1, false, whole.text);
        if (tail > head) spans.emplace_back(head, tail);
      }
    }
    return masked(whole.text, spans);
  }

  // TRL's completion_only_loss: the completion's tokens and the EOS after it are the targets (TRL
  // appends eos_token unless the completion ends with it).
  Document prompt_completion(const Record& record) {
    const auto eos = tokenizer_.end_of_text();
    if (!eos) throw Error("prompt/completion records need an EOS; the tokenizer has none").with_path(spec_);
    Document doc = masked(record.prompt + record.completion, {{record.prompt.size(), record.prompt.size() + record.completion.size()}});
    if (doc.ids.back() != *eos) {
      doc.ids.push_back(*eos);
      doc.mask.push_back(1);
    }
    return doc;
  }

  const tokenizer::Tokenizer& tokenizer_;
  std::string spec_;
  const InstructionOptions& options_;
  Columns columns_;
  chat_template::RenderOptions render_;
  std::optional<ChatTemplate> template_;
};

// Where a record is: "FILE line N" (JSONL, 1-based) or "FILE index I" (a JSON array).
struct Source {
  std::string where;
  std::optional<Json> record;  // unset: the text was refused (skip set)
  std::optional<Skip> skip;
};

std::vector<Source> read_records(const std::string& path) {
  const std::string text = tokenizer::read_text_file(path);
  std::vector<Source> out;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '[') {
    if (auto bad = tokenizer::first_invalid_utf8(text)) {
      const auto line = 1 + std::count(text.begin(), text.begin() + static_cast<std::ptrdiff_t>(*bad), '\n');
      throw Error("invalid UTF-8 on line " + std::to_string(line)).with_path(path).with_offset(static_cast<int64_t>(*bad));
    }
    Json array;
    try {
      array = Json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      throw Error(std::string("not valid JSON: ") + e.what()).with_path(path);
    }
    for (size_t i = 0; i < array.size(); ++i) out.push_back({path + " index " + std::to_string(i), array[i], {}});
    return out;
  }
  std::istringstream lines(text);
  std::string line;
  for (size_t number = 1; std::getline(lines, line); ++number) {
    if (blank(line)) continue;
    Source source{path + " line " + std::to_string(number), {}, {}};
    if (auto bad = tokenizer::first_invalid_utf8(line)) {
      source.skip = Skip{"invalid UTF-8", "invalid UTF-8 at byte " + std::to_string(*bad) + " of the line"};
    } else {
      try {
        source.record = Json::parse(line);
      } catch (const nlohmann::json::exception& e) {
        source.skip = Skip{"not JSON", std::string("not valid JSON: ") + e.what()};
      }
    }
    out.push_back(std::move(source));
  }
  return out;
}

}  // namespace

void add_instruction_options(CLI::App& app, InstructionOptions& options) {
  app.add_option("--chat-template", options.chat_template,
                 "a Jinja2 chat template file for conversations (default: the hf:DIR tokenizer's)");
  app.add_option("--template-arg", options.template_args, "KEY=JSON passed to the chat template, e.g. enable_thinking=false");
  app.add_option("--column-map", options.column_map, "KEY=FIELD: read KEY (messages, prompt, role, ...) from FIELD");
  app.add_option("--format", options.format, "record shape of .jsonl/.json inputs")
      ->check(CLI::IsMember({"auto", "messages", "sharegpt", "alpaca", "prompt_completion"}));
  app.add_option("--max-length", options.max_length, "longest document in tokens (default: no limit)")
      ->check(CLI::PositiveNumber);
  app.add_option("--on-too-long", options.on_too_long, "a longer document is cut at its end or skipped")
      ->check(CLI::IsMember({"truncate", "skip"}));
}

bool is_instruction_data(const std::vector<std::string>& inputs) {
  size_t records = 0;
  for (const std::string& input : inputs) {
    const std::string ext = std::filesystem::path(input).extension().string();
    records += ext == ".jsonl" || ext == ".json";
  }
  if (records > 0 && records < inputs.size())
    throw Error("--input mixes instruction data (.jsonl, .json) with text documents; tokenize them apart")
        .with_key("--input");
  return records > 0;
}

void run_instruction_tokenize(const tokenizer::Tokenizer& tokenizer, const std::string& tokenizer_spec,
                              const std::vector<std::string>& inputs, const std::string& out_prefix,
                              double valid_fraction, const InstructionOptions& options) {
  Tokenizing tokenizing(tokenizer, tokenizer_spec, options);
  SplitData train, valid;
  std::map<std::string, size_t> skipped;
  size_t records = 0, documents = 0, truncated = 0, targets_cut = 0;
  for (const std::string& input : inputs) {
    for (Source& source : read_records(input)) {
      ++records;
      Document doc;
      try {
        if (source.skip) throw *source.skip;
        doc = tokenizing.tokenize(*source.record);
        const auto limit = static_cast<size_t>(options.max_length);
        if (limit > 0 && doc.ids.size() > limit) {
          if (options.on_too_long == "skip")
            throw Skip{"too long", std::to_string(doc.ids.size()) + " tokens, more than --max-length " +
                                       std::to_string(limit)};
          ++truncated;
          const auto lost = std::count(doc.mask.begin() + static_cast<std::ptrdiff_t>(limit), doc.mask.end(), 1);
          if (lost > 0) {
            ++targets_cut;
            std::fprintf(stderr, "tokenize: %s: truncated from %zu to %zu tokens, %s %lld target tokens\n",
                         source.where.c_str(), doc.ids.size(), limit,
                         doc.mask[limit - 1] ? "cutting an assistant turn and dropping" : "dropping",
                         static_cast<long long>(lost));
          }
          doc.ids.resize(limit);
          doc.mask.resize(limit);
        }
      } catch (const Skip& skip) {
        std::fprintf(stderr, "tokenize: %s: %s (skipped)\n", source.where.c_str(), skip.message.c_str());
        ++skipped[skip.kind];
        continue;
      }
      // Whole documents go to validation, by position: document j when floor((j+1) F) > floor(j F),
      // so F of them, spread evenly, the same on every run.
      const auto j = static_cast<double>(documents++);
      SplitData& split = std::floor((j + 1) * valid_fraction) > std::floor(j * valid_fraction) ? valid : train;
      split.doc_starts.push_back(static_cast<int64_t>(split.tokens.size()));
      for (const uint32_t id : doc.ids) split.tokens.push_back(static_cast<uint16_t>(id));  // below 65536: checked
      split.mask.insert(split.mask.end(), doc.mask.begin(), doc.mask.end());
    }
  }
  size_t skipped_total = 0;
  std::string reasons;
  for (const auto& [kind, count] : skipped) {
    skipped_total += count;
    reasons += (reasons.empty() ? "" : ", ") + std::to_string(count) + " " + kind;
  }
  if (skipped_total > 0)
    std::fprintf(stderr, "tokenize: skipped %zu of %zu records: %s\n", skipped_total, records, reasons.c_str());
  if (truncated > 0)
    std::fprintf(stderr, "tokenize: truncated %zu documents to --max-length %lld (%zu of them lost target tokens)\n", truncated,
                 static_cast<long long>(options.max_length), targets_cut);
  if (documents == 0) throw Error("no record could be used; nothing written").with_path(inputs.front());

  const std::filesystem::path prefix(out_prefix);
  if (prefix.has_parent_path()) std::filesystem::create_directories(prefix.parent_path());
  SplitWriter writer;
  writer.stage(out_prefix + "_train", train);
  writer.stage(out_prefix + "_val", valid);
  writer.commit();
  for (const auto* split : {&train, &valid}) {
    const auto targets = std::count(split->mask.begin(), split->mask.end(), 1);
    std::printf("tokenize: %s_%s.{bin,mask,docs}: %zu documents, %zu tokens, %lld targets\n", out_prefix.c_str(),
                split == &train ? "train" : "val", split->doc_starts.size(), split->tokens.size(),
                static_cast<long long>(targets));
  }
}

}  // namespace ds::app
