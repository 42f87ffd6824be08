#include "dstrain/engine/tokenizer/hf_tokenizer.hpp"

#include <sys/stat.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>

#include "dstrain/engine/tokenizer/text_file.hpp"
#include "dstrain/engine/tokenizer/utf8.hpp"
#include "dstrain/runtime/error.hpp"
#include "hf/added_vocabulary.hpp"
#include "hf/bpe_model.hpp"
#include "hf/decoder.hpp"
#include "hf/json_field.hpp"
#include "hf/normalizer.hpp"
#include "hf/pre_tokenizer.hpp"

namespace ds::tokenizer {
using namespace hf;

namespace {

nlohmann::json parse_json(const std::string& text, const std::string& path) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("not valid JSON: ") + e.what()).with_path(path);
  }
}

AddedToken added_token_of(const Field& field) {
  AddedToken token;
  token.content = field["content"].string();
  token.single_word = field["single_word"].boolean_or(false);
  token.lstrip = field["lstrip"].boolean_or(false);
  token.rstrip = field["rstrip"].boolean_or(false);
  token.special = field["special"].boolean_or(false);
  token.normalized = field["normalized"].boolean_or(!token.special);
  return token;
}

// bos_token / eos_token in tokenizer_config.json: "<s>" or {"content": "<s>", ...}; null: none.
std::optional<std::string> token_text(const Field& field) {
  if (field.value.is_null()) return std::nullopt;
  if (field.value.is_object()) return field["content"].string();
  return field.string();
}

// Ids the post-processor puts around the sequence when special tokens are asked for.
using PostProcessor = std::function<std::vector<uint32_t>(std::vector<uint32_t>)>;

PostProcessor make_post_processor(const Field& field) {
  if (field.value.is_null()) return {};
  const std::string type = field["type"].string();
  if (type == "ByteLevel") return {};  // offsets only
  if (type == "Sequence") {
    const Field list = field["processors"];
    list.array();
    std::vector<PostProcessor> steps;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto step = make_post_processor(list.item(i))) steps.push_back(std::move(step));
    return [steps](std::vector<uint32_t> ids) {
      for (const auto& step : steps) ids = step(std::move(ids));
      return ids;
    };
  }
  if (type == "TemplateProcessing") {
    // The single-sequence template: special tokens (ids from `special_tokens`) around $A.
    const Field single = field["single"];
    single.array();
    std::vector<std::vector<uint32_t>> before, after;  // before and after $A
    bool seen_a = false;
    for (size_t i = 0; i < single.size(); ++i) {
      const Field item = single.item(i);
      if (item.has("Sequence")) {
        const std::string id = item["Sequence"]["id"].string();
        if (id != "A" || seen_a) throw item["Sequence"]["id"].error("a single-sequence template holds $A once");
        seen_a = true;
      } else if (item.has("SpecialToken")) {
        const std::string name = item["SpecialToken"]["id"].string();
        const Field special = field["special_tokens"][name.c_str()];
        if (special.value.is_null()) throw special.error("the template names \"" + name + "\", which is not here");
        const Field id_list = special["ids"];
        id_list.array();
        std::vector<uint32_t> ids;
        for (size_t k = 0; k < id_list.size(); ++k) ids.push_back(id_list.item(k).id());
        (seen_a ? after : before).push_back(ids);
      } else {
        throw item.error("expected {\"SpecialToken\": ...} or {\"Sequence\": ...}");
      }
    }
    if (!seen_a) throw single.error("the template has no $A");
    return [before, after](std::vector<uint32_t> ids) {
      std::vector<uint32_t> out;
      for (const auto& part : before) out.insert(out.end(), part.begin(), part.end());
      out.insert(out.end(), ids.begin(), ids.end());
      for (const auto& part : after) out.insert(out.end(), part.begin(), part.end());
      return out;
    };
  }
  if (type == "RobertaProcessing" || type == "BertProcessing") {
    const uint32_t cls = field["cls"].item(1).id(), sep = field["sep"].item(1).id();
    return [cls, sep](std::vector<uint32_t> ids) {
      ids.insert(ids.begin(), cls);
      ids.push_back(sep);
      return ids;
    };
  }
  throw field["type"].error("post-processor \"" + type +
                            "\" is not supported (supported: TemplateProcessing, ByteLevel, Sequence, "
                            "RobertaProcessing, BertProcessing)");
}

// transformers' clean_up_tokenization: spaces before punctuation and contractions go.
std::string clean_up_tokenization(std::string text) {
  static const std::pair<const char*, const char*> kRules[] = {
      {" .", "."},     {" ?", "?"},   {" !", "!"},   {" ,", ","},     {" ' ", "'"},
      {" n't", "n't"}, {" 'm", "'m"}, {" 's", "'s"}, {" 've", "'ve"}, {" 're", "'re"}};
  for (const auto& [from, to] : kRules) {
    std::string out;
    const std::string_view needle(from);
    size_t done = 0;
    for (size_t at = text.find(needle); at != std::string::npos; at = text.find(needle, done)) {
      out.append(text, done, at - done);
      out.append(to);
      done = at + needle.size();
    }
    out.append(text, done);
    text = std::move(out);
  }
  return text;
}

}  // namespace

struct HfTokenizer::Impl {
  std::string json_path;
  std::unique_ptr<BpeModel> model;
  Normalizer normalizer;
  PreTokenizer pre_tokenizer;
  PostProcessor post_processor;
  Decoder decoder;
  std::map<uint32_t, AddedToken> added;  // by id
  std::unique_ptr<AddedMatcher> raw_matcher, normalized_matcher;
  std::optional<uint32_t> eos;
  bool clean_up_spaces = false;
  int64_t vocab_size = 0;

  std::optional<uint32_t> id_of(const std::string& token) const {
    for (const auto& [id, added_token] : added)
      if (added_token.content == token) return id;
    return model->id_of(token);
  }

  void encode_section(const std::string& text, bool first_section, std::vector<uint32_t>& ids) const {
    std::vector<std::string> words{text};
    if (pre_tokenizer) words = pre_tokenizer(std::move(words), first_section);
    for (const std::string& word : words) model->encode_word(word, ids);
  }
};

HfTokenizer::HfTokenizer(const std::string& dir)
    : HfTokenizer(
          [&] {
            const std::string path = dir + "/tokenizer.json";
            struct stat info {};
            if (::stat(path.c_str(), &info) != 0)
              throw Error("a Hugging Face tokenizer folder needs tokenizer.json").with_path(path).with_errno(errno);
            return read_text_file(path);
          }(),
          dir + "/tokenizer.json",
          [&] {
            const std::string path = dir + "/tokenizer_config.json";
            struct stat info {};
            return ::stat(path.c_str(), &info) == 0 ? read_text_file(path) : std::string();
          }(),
          dir + "/tokenizer_config.json") {}

HfTokenizer::HfTokenizer(const std::string& json_text, const std::string& json_path, const std::string& config_text,
                         const std::string& config_path)
    : impl_(std::make_unique<Impl>()) {
  Impl& t = *impl_;
  t.json_path = json_path;
  const nlohmann::json json = parse_json(json_text, json_path);
  const Field root{json, "", json_path};
  root.object();

  const Field model = root["model"];
  model.object();
  // Rust writes "type"; files from old versions leave it out for BPE.
  const std::string type = model.has("type") ? model["type"].string() : (model.has("merges") ? "BPE" : "");
  if (type != "BPE")
    throw model["type"].error("model type \"" + type +
                              "\" is not supported: only BPE is (WordPiece, Unigram and "
                              "WordLevel tokenizers are not read)");
  t.model = std::make_unique<BpeModel>(model);
  t.normalizer = make_normalizer(root["normalizer"]);
  t.pre_tokenizer = make_pre_tokenizer(root["pre_tokenizer"]);
  t.post_processor = make_post_processor(root["post_processor"]);
  t.decoder = make_decoder(root["decoder"]);
  // "truncation" and "padding" are left alone: transformers sets both per call (by default off)
  // before it encodes, so what the file holds never shapes its ids.

  const Field added = root["added_tokens"];
  if (!added.value.is_null()) {
    added.array();
    for (size_t i = 0; i < added.size(); ++i) {
      AddedToken token = added_token_of(added.item(i));
      token.id = added.item(i)["id"].id();
      t.added[token.id] = token;
    }
  }

  nlohmann::json config_json = nlohmann::json::object();
  if (!config_text.empty()) config_json = parse_json(config_text, config_path);
  const Field config{config_json, "", config_path};
  config.object();
  if (config.has("added_tokens_decoder")) {
    const Field decoder = config["added_tokens_decoder"];
    for (const auto& [key, value] : decoder.object().items()) {
      const Field entry{value, decoder.key + "." + key, config_path};
      uint32_t id = 0;
      try {
        size_t used = 0;
        const unsigned long parsed = std::stoul(key, &used);
        if (used != key.size() || parsed > 0xFFFFFFFFul) throw std::invalid_argument(key);
        id = static_cast<uint32_t>(parsed);
      } catch (const std::exception&) {
        throw entry.error("the key is not a token id");
      }
      AddedToken token = added_token_of(entry);
      token.id = id;
      const auto known = t.added.find(id);
      if (known != t.added.end() && known->second.content != token.content)
        throw entry["content"].error("id " + key + " is \"" + known->second.content + "\" in tokenizer.json");
      if (known == t.added.end()) t.added[id] = token;
    }
  }
  // Ids of added tokens are the model's where the model has the token (Llama's <s>); others extend it.
  for (const auto& [id, token] : t.added) {
    const auto in_model = t.model->token_of_id().find(id);
    if (in_model != t.model->token_of_id().end() && in_model->second != token.content)
      throw Error("added token \"" + token.content + "\" has id " + std::to_string(id) +
                  ", which the vocabulary gives to \"" + in_model->second + "\"")
          .with_path(json_path)
          .with_key("added_tokens");
  }

  // The matchers: raw-text tokens, and normalized ones with their normalized content.
  std::vector<AddedToken> raw, normalized;
  std::vector<std::string> raw_patterns, normalized_patterns;
  for (const auto& [id, token] : t.added) {
    if (token.normalized && t.normalizer) {
      normalized.push_back(token);
      normalized_patterns.push_back(t.normalizer(token.content));
    } else {
      raw.push_back(token);
      raw_patterns.push_back(token.content);
    }
  }
  t.raw_matcher = std::make_unique<AddedMatcher>(raw, raw_patterns);
  t.normalized_matcher = std::make_unique<AddedMatcher>(normalized, normalized_patterns);

  for (const auto& [id, token] : t.model->token_of_id())
    t.vocab_size = std::max<int64_t>(t.vocab_size, int64_t{id} + 1);
  for (const auto& [id, token] : t.added) t.vocab_size = std::max<int64_t>(t.vocab_size, int64_t{id} + 1);

  const auto resolve = [&](const char* name) -> std::optional<uint32_t> {
    const auto text = token_text(config[name]);
    if (!text) return std::nullopt;
    const auto id = t.id_of(*text);
    if (!id) throw config[name].error("\"" + *text + "\" is not a token of tokenizer.json");
    return id;
  };
  const auto bos = resolve("bos_token");
  t.eos = resolve("eos_token");
  if (!t.eos) t.eos = t.id_of("<|endoftext|>");
  if (config.has("add_bos_token") || config.has("add_eos_token")) {
    const bool add_bos = config["add_bos_token"].boolean_or(false), add_eos = config["add_eos_token"].boolean_or(false);
    if (add_bos && !bos) throw config["add_bos_token"].error("true, but bos_token is not set");
    if (add_eos && !t.eos) throw config["add_eos_token"].error("true, but eos_token is not set");
    const std::optional<uint32_t> first = add_bos ? bos : std::nullopt, last = add_eos ? t.eos : std::nullopt;
    t.post_processor = [first, last](std::vector<uint32_t> ids) {
      if (first) ids.insert(ids.begin(), *first);
      if (last) ids.push_back(*last);
      return ids;
    };
  }
  t.clean_up_spaces = config["clean_up_tokenization_spaces"].boolean_or(false);
}

HfTokenizer::~HfTokenizer() = default;

std::vector<uint32_t> HfTokenizer::encode(std::string_view text, bool add_special_tokens) const {
  require_utf8(text);
  const Impl& t = *impl_;
  std::vector<uint32_t> ids;
  for (const Section& section : t.raw_matcher->split(text)) {
    if (section.id) {
      ids.push_back(*section.id);
      continue;
    }
    const std::string normalized = t.normalizer ? t.normalizer(section.text) : section.text;
    const auto pieces = t.normalized_matcher->split(normalized);
    for (size_t i = 0; i < pieces.size(); ++i) {
      if (pieces[i].id)
        ids.push_back(*pieces[i].id);
      else
        t.encode_section(pieces[i].text, section.offset == 0 && i == 0, ids);
    }
  }
  if (add_special_tokens && t.post_processor) ids = t.post_processor(std::move(ids));
  return ids;
}

std::string HfTokenizer::decode(const std::vector<uint32_t>& ids, bool skip_special_tokens) const {
  const Impl& t = *impl_;
  std::vector<std::string> tokens;
  for (const uint32_t id : ids) {
    const auto added = t.added.find(id);
    if (added != t.added.end()) {
      if (!(skip_special_tokens && added->second.special)) tokens.push_back(added->second.content);
      continue;
    }
    const auto token = t.model->token_of_id().find(id);
    if (token == t.model->token_of_id().end())
      throw Error("id " + std::to_string(id) + " is outside the vocabulary").with_path(t.json_path);
    tokens.push_back(token->second);
  }
  std::string text;
  if (t.decoder) {
    for (const std::string& piece : t.decoder(std::move(tokens))) text += piece;
  } else {
    for (size_t i = 0; i < tokens.size(); ++i) text += (i ? " " : "") + tokens[i];
  }
  return t.clean_up_spaces ? clean_up_tokenization(std::move(text)) : text;
}

void HfTokenizer::encode(std::string_view document, std::vector<uint32_t>& ids, const Progress& progress) const {
  const auto encoded = encode(document, false);
  ids.insert(ids.end(), encoded.begin(), encoded.end());
  if (progress) progress(document.size());
}

int64_t HfTokenizer::vocab_size() const { return impl_->vocab_size; }
std::optional<uint32_t> HfTokenizer::end_of_text() const { return impl_->eos; }

std::string HfTokenizer::description() const {
  return "Hugging Face BPE (" + std::to_string(impl_->vocab_size) + " ids) from " + impl_->json_path;
}

}  // namespace ds::tokenizer
