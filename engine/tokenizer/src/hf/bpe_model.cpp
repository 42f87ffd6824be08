#include "hf/bpe_model.hpp"

#include <cstdio>
#include <queue>

#include "hf/unicode.hpp"

namespace ds::tokenizer::hf {
namespace {

uint64_t pair_key(uint32_t left, uint32_t right) { return uint64_t{left} << 32 | right; }
constexpr size_t kCachedWordBytes = 256;
constexpr size_t kCacheWords = 100000;

}  // namespace

BpeModel::BpeModel(const Field& model) {
  const Field vocab = model["vocab"];
  for (const auto& [token, id] : vocab.object().items()) {
    const Field entry{id, vocab.key + "." + token, model.path};
    const uint32_t value = entry.id();
    if (!token_of_id_.emplace(value, token).second)
      throw entry.error("id " + std::to_string(value) + " is given to two tokens");
    vocab_.emplace(token, value);
  }
  if (model.has("dropout") && model["dropout"].value.is_number() && model["dropout"].value.get<double>() > 0)
    throw model["dropout"].error("BPE dropout samples a different split each time: not supported for encoding");
  if (model.has("unk_token")) {
    const std::string unk = model["unk_token"].string();
    const auto id = id_of(unk);
    if (!id) throw model["unk_token"].error("\"" + unk + "\" is not in the vocabulary");
    unk_ = *id;
  }
  fuse_unk_ = model["fuse_unk"].boolean_or(false);
  byte_fallback_ = model["byte_fallback"].boolean_or(false);
  ignore_merges_ = model["ignore_merges"].boolean_or(false);
  continuing_subword_prefix_ = model["continuing_subword_prefix"].string_or("");
  end_of_word_suffix_ = model["end_of_word_suffix"].string_or("");
  for (int byte = 0; byte < 256; ++byte) {
    char name[8];
    std::snprintf(name, sizeof name, "<0x%02X>", byte);
    byte_token_[byte] = byte_fallback_ ? id_of(name).value_or(kNone) : kNone;
  }

  const Field merges = model["merges"];
  merges.array();
  const size_t prefix = continuing_subword_prefix_.size();
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const Field merge = merges.item(rank);
    std::string left, right;
    if (merge.value.is_string()) {  // "a b"
      const std::string text = merge.string();
      const size_t space = text.find(' ');
      if (space == std::string::npos || text.find(' ', space + 1) != std::string::npos)
        throw merge.error("expected two tokens separated by one space, got \"" + text + "\"");
      left = text.substr(0, space), right = text.substr(space + 1);
    } else if (merge.value.is_array() && merge.size() == 2) {  // ["a", "b"]
      left = merge.item(0).string(), right = merge.item(1).string();
    } else {
      throw merge.error("expected \"a b\" or [\"a\", \"b\"]");
    }
    const auto left_id = id_of(left), right_id = id_of(right);
    if (!left_id || !right_id)
      throw merge.error("the merge names \"" + (left_id ? right : left) + "\", which is not in the vocabulary");
    // The joined token drops the right side's continuing-subword prefix (Rust's BPE builder).
    const std::string joined =
        left + (right.compare(0, prefix, continuing_subword_prefix_) == 0 && prefix ? right.substr(prefix) : right);
    const auto joined_id = id_of(joined);
    if (!joined_id) throw merge.error("the merged token \"" + joined + "\" is not in the vocabulary");
    merges_.emplace(pair_key(*left_id, *right_id), Merge{static_cast<uint32_t>(rank), *joined_id});  // first wins
  }
}

std::optional<uint32_t> BpeModel::id_of(const std::string& token) const {
  const auto it = vocab_.find(token);
  return it == vocab_.end() ? std::nullopt : std::optional<uint32_t>(it->second);
}

void BpeModel::merge_word(const std::string& word, std::vector<uint32_t>& ids) const {
  // The symbols, each a token id, linked as a list; a merged-away symbol has id kNone.
  std::vector<uint32_t> symbol;
  bool last_was_unk = false;
  for (size_t at = 0; at < word.size();) {
    const size_t begin = at;
    next_code_point(word, at);
    std::string text = word.substr(begin, at - begin);
    if (begin > 0) text = continuing_subword_prefix_ + text;
    if (at == word.size()) text += end_of_word_suffix_;
    if (const auto id = id_of(text)) {
      symbol.push_back(*id);
      last_was_unk = false;
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (size_t i = begin; i < at; ++i) all = all && byte_token_[static_cast<unsigned char>(word[i])] != kNone;
      if (all) {
        for (size_t i = begin; i < at; ++i) symbol.push_back(byte_token_[static_cast<unsigned char>(word[i])]);
        last_was_unk = false;
        continue;
      }
    }
    if (!unk_)
      throw Error("the tokenizer has no token for \"" + word.substr(begin, at - begin) +
                  "\" (no byte_fallback, no unk_token)");
    if (!(fuse_unk_ && last_was_unk)) symbol.push_back(*unk_);
    last_was_unk = true;
  }

  const size_t n = symbol.size();
  std::vector<size_t> prev(n), next(n);
  for (size_t i = 0; i < n; ++i) prev[i] = i - 1, next[i] = i + 1;  // prev[0] wraps: never read as valid
  struct Candidate {
    uint32_t rank;
    size_t pos;
    uint32_t joined;
    bool operator>(const Candidate& other) const { return rank != other.rank ? rank > other.rank : pos > other.pos; }
  };
  std::priority_queue<Candidate, std::vector<Candidate>, std::greater<Candidate>> queue;
  const auto consider = [&](size_t left) {
    if (left >= n || next[left] >= n) return;
    const auto merge = merges_.find(pair_key(symbol[left], symbol[next[left]]));
    if (merge != merges_.end()) queue.push({merge->second.rank, left, merge->second.joined});
  };
  for (size_t i = 0; i + 1 < n; ++i) consider(i);
  while (!queue.empty()) {
    const Candidate top = queue.top();
    queue.pop();
    if (symbol[top.pos] == kNone || next[top.pos] >= n) continue;
    const size_t right = next[top.pos];
    const auto merge = merges_.find(pair_key(symbol[top.pos], symbol[right]));
    if (merge == merges_.end() || merge->second.rank != top.rank) continue;  // stale: a side changed
    symbol[top.pos] = top.joined;
    symbol[right] = kNone;
    next[top.pos] = next[right];
    if (next[right] < n) prev[next[right]] = top.pos;
    if (top.pos > 0 && prev[top.pos] < n) consider(prev[top.pos]);
    consider(top.pos);
  }
  for (size_t i = 0; i < n; i = next[i])
    if (symbol[i] != kNone) ids.push_back(symbol[i]);
}

void BpeModel::encode_word(const std::string& word, std::vector<uint32_t>& ids) const {
  if (word.empty()) return;
  if (ignore_merges_)
    if (const auto id = id_of(word)) {
      ids.push_back(*id);
      return;
    }
  if (word.size() > kCachedWordBytes) return merge_word(word, ids);
  auto cached = cache_.find(word);
  if (cached == cache_.end()) {
    if (cache_.size() >= kCacheWords) cache_.clear();
    std::vector<uint32_t> word_ids;
    merge_word(word, word_ids);
    cached = cache_.emplace(word, std::move(word_ids)).first;
  }
  ids.insert(ids.end(), cached->second.begin(), cached->second.end());
}

}  // namespace ds::tokenizer::hf
