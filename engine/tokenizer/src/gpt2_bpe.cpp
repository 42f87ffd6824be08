#include "dstrain/engine/tokenizer/gpt2_bpe.hpp"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <limits>
#include <nlohmann/json.hpp>

#include "dstrain/engine/tokenizer/byte_alphabet.hpp"
#include "dstrain/engine/tokenizer/text_file.hpp"
#include "dstrain/engine/tokenizer/utf8.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::tokenizer {
namespace {

// OpenAI's pattern; UCP makes \s, \p{L} and \p{N} Unicode classes, as in Python's `regex` module.
constexpr char kPattern[] = R"('s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+)";
constexpr size_t kProgressBytes = size_t{1} << 20;

uint64_t pair_key(uint32_t left, uint32_t right) { return uint64_t{left} << 32 | right; }

// The bytes a token spells as printable text, for messages.
std::string show(const std::string& bytes) {
  std::string out;
  for (const unsigned char byte : bytes) {
    if (byte >= 0x20 && byte < 0x7F) {
      out.push_back(static_cast<char>(byte));
    } else {
      char escaped[8];
      std::snprintf(escaped, sizeof escaped, "\\x%02X", byte);
      out += escaped;
    }
  }
  return out;
}

}  // namespace

struct Gpt2Bpe::Regex {
  pcre2_code* code = nullptr;
  pcre2_match_data* match = nullptr;

  Regex() {
    int error = 0;
    PCRE2_SIZE error_offset = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(kPattern), PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP, &error,
                         &error_offset, nullptr);
    if (!code) throw Error("PCRE2 rejects GPT-2's pattern (error " + std::to_string(error) + ")");
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // where JIT is unavailable the interpreter runs it
    match = pcre2_match_data_create_from_pattern(code, nullptr);
  }
  ~Regex() {
    pcre2_match_data_free(match);
    pcre2_code_free(code);
  }
};

Gpt2Bpe::~Gpt2Bpe() = default;

uint32_t Gpt2Bpe::intern(const std::string& bytes) {
  const auto [it, inserted] = symbol_of_bytes_.emplace(bytes, static_cast<uint32_t>(symbols_.size()));
  if (inserted) symbols_.push_back(bytes);
  return it->second;
}

Gpt2Bpe::Gpt2Bpe(const std::string& vocab_path, const std::string& merges_path)
    : vocab_path_(vocab_path), regex_(std::make_unique<Regex>()) {
  for (int byte = 0; byte < 256; ++byte) intern(std::string(1, static_cast<char>(byte)));

  nlohmann::json vocab;
  try {
    vocab = nlohmann::json::parse(read_text_file(vocab_path));
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("vocab.json is not valid JSON: ") + e.what()).with_path(vocab_path);
  }
  if (!vocab.is_object()) throw Error("vocab.json must be an object of token -> id").with_path(vocab_path);
  std::vector<std::pair<uint32_t, uint32_t>> symbol_ids;  // (symbol, id)
  std::vector<bool> id_taken;
  for (const auto& [token, id] : vocab.items()) {
    if (!id.is_number_unsigned() || id.get<uint64_t>() > std::numeric_limits<uint32_t>::max())
      throw Error("vocab.json: the id of token \"" + token + "\" is not a non-negative 32-bit integer")
          .with_path(vocab_path);
    const auto bytes = bytes_of_token(token);
    if (!bytes)
      throw Error("vocab.json: token \"" + token + "\" has a character outside GPT-2's byte alphabet")
          .with_path(vocab_path);
    const auto value = id.get<uint32_t>();
    if (value >= id_taken.size()) id_taken.resize(value + 1, false);
    if (id_taken[value])
      throw Error("vocab.json: id " + std::to_string(value) + " is given to two tokens").with_path(vocab_path);
    id_taken[value] = true;
    symbol_ids.emplace_back(intern(*bytes), value);
    if (token == "<|endoftext|>") end_of_text_ = value;
  }
  vocab_size_ = static_cast<int64_t>(id_taken.size());

  const std::string merges = read_text_file(merges_path);
  size_t line_number = 0;
  uint32_t rank = 0;
  for (size_t start = 0; start < merges.size();) {
    size_t end = merges.find('\n', start);
    if (end == std::string::npos) end = merges.size();
    std::string_view line(merges.data() + start, end - start);
    start = end + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (line.empty() || (line_number == 1 && line.rfind("#version", 0) == 0)) continue;
    const size_t space = line.find(' ');
    const std::string where = "merges.txt line " + std::to_string(line_number) + ": ";
    if (space == std::string_view::npos || space == 0 || space + 1 == line.size() ||
        line.find(' ', space + 1) != std::string_view::npos)
      throw Error(where + "expected two tokens separated by one space, got \"" + std::string(line) + "\"")
          .with_path(merges_path);
    const auto left = bytes_of_token(line.substr(0, space));
    const auto right = bytes_of_token(line.substr(space + 1));
    if (!left || !right)
      throw Error(where + "\"" + std::string(line) + "\" has a character outside GPT-2's byte alphabet")
          .with_path(merges_path);
    const uint32_t left_symbol = intern(*left), right_symbol = intern(*right);
    const uint32_t joined = intern(*left + *right);
    if (!merges_.emplace(pair_key(left_symbol, right_symbol), Merge{rank, joined}).second)
      throw Error(where + "the merge \"" + std::string(line) + "\" appears twice").with_path(merges_path);
    ++rank;
  }

  id_of_symbol_.assign(symbols_.size(), -1);
  for (const auto& [symbol, id] : symbol_ids) id_of_symbol_[symbol] = id;
}

std::string Gpt2Bpe::description() const {
  return "GPT-2 byte-level BPE (" + std::to_string(vocab_size_) + " ids, " + std::to_string(merges_.size()) +
         " merges) from " + vocab_path_;
}

void Gpt2Bpe::encode_piece(std::string_view piece, size_t offset, std::vector<uint32_t>& ids) const {
  auto cached = cache_.find(std::string(piece));
  if (cached == cache_.end()) {
    std::vector<uint32_t> word;
    for (const unsigned char byte : piece) word.push_back(byte);  // the symbol of byte b is b
    std::vector<uint32_t> joined;
    while (word.size() > 1) {
      const Merge* best = nullptr;
      uint64_t best_pair = 0;
      for (size_t i = 0; i + 1 < word.size(); ++i) {
        const auto merge = merges_.find(pair_key(word[i], word[i + 1]));
        if (merge != merges_.end() && (!best || merge->second.rank < best->rank)) {
          best = &merge->second;
          best_pair = merge->first;
        }
      }
      if (!best) break;
      const auto left = static_cast<uint32_t>(best_pair >> 32), right = static_cast<uint32_t>(best_pair);
      joined.clear();
      for (size_t i = 0; i < word.size(); ++i) {
        if (i + 1 < word.size() && word[i] == left && word[i + 1] == right) {
          joined.push_back(best->joined);
          ++i;
        } else {
          joined.push_back(word[i]);
        }
      }
      word.swap(joined);
    }
    size_t at = offset;
    for (uint32_t& symbol : word) {
      const int64_t id = id_of_symbol_[symbol];
      if (id < 0)
        throw Error("the vocabulary has no token for the bytes \"" + show(symbols_[symbol]) + "\"")
            .with_offset(static_cast<int64_t>(at));
      at += symbols_[symbol].size();
      symbol = static_cast<uint32_t>(id);
    }
    cached = cache_.emplace(std::string(piece), std::move(word)).first;
  }
  ids.insert(ids.end(), cached->second.begin(), cached->second.end());
}

void Gpt2Bpe::encode(std::string_view document, std::vector<uint32_t>& ids, const Progress& progress) const {
  require_utf8(document);
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(document.data());
  size_t at = 0, reported = 0;
  while (at < document.size()) {
    // Every character starts a match of one of the alternatives, so each match begins at `at`.
    const int found =
        pcre2_match(regex_->code, subject, document.size(), at, PCRE2_NO_UTF_CHECK, regex_->match, nullptr);
    const PCRE2_SIZE* span = pcre2_get_ovector_pointer(regex_->match);
    if (found < 0 || span[0] != at || span[1] <= at)
      throw Error("GPT-2's pattern found no piece (PCRE2 result " + std::to_string(found) + ")")
          .with_offset(static_cast<int64_t>(at));
    encode_piece(document.substr(at, span[1] - at), at, ids);
    at = span[1];
    if (progress && at - reported >= kProgressBytes) {
      progress(at);
      reported = at;
    }
  }
  if (progress) progress(document.size());
}

}  // namespace ds::tokenizer
