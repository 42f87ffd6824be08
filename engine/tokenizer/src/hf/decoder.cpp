#include "hf/decoder.hpp"

#include <memory>
#include <optional>

#include "dstrain/engine/tokenizer/byte_alphabet.hpp"
#include "dstrain/engine/tokenizer/utf8.hpp"
#include "hf/pattern.hpp"
#include "hf/unicode.hpp"

namespace ds::tokenizer::hf {
namespace {

// "<0xXX>" as its byte.
std::optional<unsigned char> byte_of_token(const std::string& token) {
  if (token.size() != 6 || token.compare(0, 3, "<0x") != 0 || token[5] != '>') return std::nullopt;
  const auto hex = [](char c) -> int {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  const int high = hex(token[3]), low = hex(token[4]);
  if (high < 0 || low < 0) return std::nullopt;
  return static_cast<unsigned char>(high * 16 + low);
}

std::vector<std::string> split_chars(const std::string& text) {
  std::vector<std::string> chars;
  for (size_t at = 0; at < text.size();) {
    const size_t begin = at;
    next_code_point(text, at);
    chars.push_back(text.substr(begin, at - begin));
  }
  return chars;
}

}  // namespace

Decoder make_decoder(const Field& field) {
  if (field.value.is_null()) return {};
  const std::string type = field["type"].string();
  if (type == "Sequence") {
    const Field list = field["decoders"];
    list.array();
    std::vector<Decoder> steps;
    for (size_t i = 0; i < list.size(); ++i)
      if (auto step = make_decoder(list.item(i))) steps.push_back(std::move(step));
    return [steps](std::vector<std::string> tokens) {
      for (const auto& step : steps) tokens = step(std::move(tokens));
      return tokens;
    };
  }
  if (type == "ByteLevel")
    // Each token's characters back to bytes; a token with a character outside the alphabet (an
    // added token such as "<|eot_id|> x") stays as its own bytes. Invalid UTF-8 becomes U+FFFD.
    return [](std::vector<std::string> tokens) {
      std::string bytes;
      for (const std::string& token : tokens) bytes += bytes_of_token(token).value_or(token);
      return std::vector<std::string>{utf8_lossy(bytes)};
    };
  if (type == "Metaspace") {
    const std::string replacement = field["replacement"].string_or("\xE2\x96\x81");
    std::string scheme = "always";
    if (field.has("prepend_scheme"))
      scheme = field["prepend_scheme"].string();
    else if (field.has("add_prefix_space"))
      scheme = field["add_prefix_space"].boolean_or(true) ? "always" : "never";
    // Every replacement becomes a space, except in the first token, where (unless the scheme is
    // "never") every one goes: Rust's rule; tokenizers.js drops only a leading one.
    return [replacement, scheme](std::vector<std::string> tokens) {
      for (size_t i = 0; i < tokens.size(); ++i) {
        std::string text;
        for (size_t at = 0; at < tokens[i].size();)
          if (tokens[i].compare(at, replacement.size(), replacement) == 0) {
            if (i != 0 || scheme == "never") text += ' ';
            at += replacement.size();
          } else {
            text += tokens[i][at++];
          }
        tokens[i] = std::move(text);
      }
      return tokens;
    };
  }
  if (type == "Replace") {
    auto pattern = std::make_shared<Pattern>(field["pattern"]);
    const std::string content = field["content"].string();
    return [pattern, content](std::vector<std::string> tokens) {
      for (std::string& token : tokens) token = pattern->replace_all(token, content);
      return tokens;
    };
  }
  if (type == "ByteFallback")
    // Runs of <0xXX> tokens become their bytes; a run that is not UTF-8 becomes one U+FFFD per byte
    // (Rust; tokenizers.js replaces maximal subparts instead, docs/tokenizers.md).
    return [](std::vector<std::string> tokens) {
      std::vector<std::string> out;
      std::string run;
      size_t run_tokens = 0;
      const auto flush = [&] {
        if (run_tokens == 0) return;
        if (first_invalid_utf8(run)) {
          for (size_t i = 0; i < run_tokens; ++i) out.emplace_back("\xEF\xBF\xBD");
        } else {
          out.push_back(run);
        }
        run.clear();
        run_tokens = 0;
      };
      for (std::string& token : tokens) {
        if (const auto byte = byte_of_token(token)) {
          run.push_back(static_cast<char>(*byte));
          ++run_tokens;
        } else {
          flush();
          out.push_back(std::move(token));
        }
      }
      flush();
      return out;
    };
  if (type == "Fuse")
    return [](std::vector<std::string> tokens) {
      std::string all;
      for (const std::string& token : tokens) all += token;
      return std::vector<std::string>{all};
    };
  if (type == "Strip") {
    const std::string content = field["content"].string();
    const uint32_t start = field["start"].count_or(0), stop = field["stop"].count_or(0);
    return [content, start, stop](std::vector<std::string> tokens) {
      for (std::string& token : tokens) {
        const std::vector<std::string> chars = split_chars(token);
        size_t begin = 0, end = chars.size();
        while (begin < start && begin < end && chars[begin] == content) ++begin;
        for (uint32_t i = 0; i < stop && end > begin && chars[end - 1] == content; ++i) --end;
        std::string text;
        for (size_t i = begin; i < end; ++i) text += chars[i];
        token = std::move(text);
      }
      return tokens;
    };
  }
  throw field["type"].error("decoder \"" + type +
                            "\" is not supported (supported: Sequence, ByteLevel, Metaspace, Replace, ByteFallback, "
                            "Fuse, Strip)");
}

}  // namespace ds::tokenizer::hf
