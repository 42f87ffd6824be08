// The tokenizers against references made by other programs (tests/data/tokenizer/README.md):
// corpus.txt's ids from OpenAI's encoder.py restated in Python and from Python's SentencePiece
// must be ours exactly; then every bad input must fail naming the file, line or byte offset.
#include <catch2/catch.hpp>

#include "dstrain/engine/tokenizer/gpt2_bpe.hpp"
#include "dstrain/engine/tokenizer/sentencepiece_tokenizer.hpp"
#include "dstrain/engine/tokenizer/text_file.hpp"
#include "dstrain/engine/tokenizer/tokenizer.hpp"
#include "dstrain/engine/tokenizer/utf8.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/remove_tree.hpp"

#include <nlohmann/json.hpp>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using ds::tokenizer::load_tokenizer;

namespace {

const std::string kData = std::string(DSTRAIN_SOURCE_DIR) + "/tests/data/tokenizer";

class TempDir {
 public:
  TempDir() {
    std::string pattern = (fs::temp_directory_path() / "dstrain_tokenizer_test_XXXXXX").string();
    if (!::mkdtemp(pattern.data())) throw std::runtime_error("mkdtemp failed");
    path_ = pattern;
  }
  ~TempDir() { ds::remove_tree(path_); }
  std::string file(const std::string& name, const std::string& contents) const {
    const std::string path = path_ + "/" + name;
    std::ofstream(path, std::ios::binary) << contents;
    return path;
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// An llm.c token file read by hand: 256 int32 of header ([2] the count), then uint16 ids.
std::vector<uint32_t> reference_ids(const std::string& name) {
  const std::string bytes = ds::tokenizer::read_text_file(kData + "/" + name);
  int32_t header[3];
  REQUIRE(bytes.size() >= 1024);
  std::memcpy(header, bytes.data(), sizeof header);
  REQUIRE(header[0] == 20240520);
  REQUIRE(bytes.size() == 1024 + 2 * static_cast<size_t>(header[2]));
  std::vector<uint32_t> ids(header[2]);
  for (size_t i = 0; i < ids.size(); ++i) {
    uint16_t id;
    std::memcpy(&id, bytes.data() + 1024 + 2 * i, 2);
    ids[i] = id;
  }
  return ids;
}

std::vector<uint32_t> encode(const ds::tokenizer::Tokenizer& tokenizer, const std::string& text) {
  std::vector<uint32_t> ids;
  tokenizer.encode(text, ids);
  return ids;
}

// The ds::Error that `run` throws.
template <typename Run>
ds::Error error_of(Run run) {
  try {
    run();
  } catch (const ds::Error& e) {
    return e;
  }
  FAIL("no ds::Error thrown");
  return ds::Error("");
}

const std::string kCorpus = ds::tokenizer::read_text_file(kData + "/corpus.txt");

}  // namespace

TEST_CASE("GPT-2 BPE: corpus.txt's ids are the Python encoder's") {
  const auto gpt2 = load_tokenizer("gpt2:" + kData + "/gpt2");
  CHECK(encode(*gpt2, kCorpus) == reference_ids("expected_gpt2.bin"));

  const auto vocab = nlohmann::json::parse(ds::tokenizer::read_text_file(kData + "/gpt2/vocab.json"));
  CHECK(gpt2->vocab_size() == static_cast<int64_t>(vocab.size()));
  REQUIRE(gpt2->end_of_text());
  CHECK(*gpt2->end_of_text() == vocab["<|endoftext|>"].get<uint32_t>());
}

TEST_CASE("SentencePiece: corpus.txt's ids are Python SentencePiece's, line by line") {
  const auto spm = load_tokenizer("spm:" + kData + "/spm.model");
  CHECK(encode(*spm, kCorpus) == reference_ids("expected_spm.bin"));
  CHECK(spm->vocab_size() == 800);  // spm_train's --vocab_size in make_tokenizer_data.py
}

TEST_CASE("a long document is encoded as the sum of its parts, with progress to the last byte") {
  // corpus.txt ends with a newline and starts with '#': no piece spans the seam, so the ids of 20
  // copies are 20 copies of the ids (and the piece cache must not change them).
  std::string document;
  std::vector<uint32_t> expected;
  const auto one = reference_ids("expected_gpt2.bin");
  for (int copy = 0; copy < 20; ++copy) {
    document += kCorpus;
    expected.insert(expected.end(), one.begin(), one.end());
  }
  const auto gpt2 = load_tokenizer("gpt2:" + kData + "/gpt2");
  std::vector<size_t> reports;
  std::vector<uint32_t> ids;
  gpt2->encode(document, ids, [&](size_t done) { reports.push_back(done); });
  CHECK(ids == expected);
  REQUIRE(reports.size() >= 2);
  CHECK(std::is_sorted(reports.begin(), reports.end()));
  CHECK(reports.back() == document.size());
}

TEST_CASE("UTF-8 validity follows RFC 3629") {
  using ds::tokenizer::first_invalid_utf8;
  CHECK_FALSE(first_invalid_utf8(kCorpus));
  CHECK_FALSE(first_invalid_utf8("\xF0\x9F\x9A\x80 \xE2\x82\xAC \xC3\xA9"));  // U+1F680, U+20AC, U+00E9
  CHECK(first_invalid_utf8("ab\xC0\xAF") == 2u);          // overlong '/'
  CHECK(first_invalid_utf8("a\xED\xA0\x80") == 1u);       // a surrogate
  CHECK(first_invalid_utf8("\xF4\x90\x80\x80") == 0u);    // above U+10FFFF
  CHECK(first_invalid_utf8("abc\xE2\x82") == 3u);         // cut short at the end
  CHECK(first_invalid_utf8("x\x80y") == 1u);              // a lone continuation byte
  CHECK(first_invalid_utf8("\xE2\x28\xA1") == 0u);        // a bad continuation
}

TEST_CASE("bytes that are not UTF-8 are refused at their offset by both tokenizers") {
  const std::string text = "valid text, then \xFF here";
  for (const std::string& spec : {"gpt2:" + kData + "/gpt2", "spm:" + kData + "/spm.model"}) {
    const auto tokenizer = load_tokenizer(spec);
    const ds::Error e = error_of([&] { encode(*tokenizer, text); });
    CHECK(e.offset() == static_cast<int64_t>(text.find('\xFF')));
    CHECK_THAT(e.what(), Catch::Contains("not UTF-8"));
  }
}

TEST_CASE("text the vocabulary cannot spell is refused at its offset") {
  SECTION("GPT-2: a byte with no token") {
    TempDir dir;
    auto vocab = nlohmann::json::parse(ds::tokenizer::read_text_file(kData + "/gpt2/vocab.json"));
    vocab.erase("\xC4\x87");  // U+0107: byte 0x07 in GPT-2's alphabet (the 8th unprintable byte)
    dir.file("vocab.json", vocab.dump());
    dir.file("merges.txt", ds::tokenizer::read_text_file(kData + "/gpt2/merges.txt"));
    const auto gpt2 = load_tokenizer("gpt2:" + dir.path());
    CHECK(encode(*gpt2, "ring the bell") == encode(*load_tokenizer("gpt2:" + kData + "/gpt2"), "ring the bell"));
    const std::string text = "ring the \a bell";
    const ds::Error e = error_of([&] { encode(*gpt2, text); });
    CHECK(e.offset() == static_cast<int64_t>(text.find('\a')));
    CHECK_THAT(e.what(), Catch::Contains("no token for the bytes \"\\x07\""));
  }
  SECTION("SentencePiece without byte fallback: a character that would be <unk>") {
    const auto spm = load_tokenizer("spm:" + kData + "/spm_no_fallback.model");
    const std::string text = "the pipeline\nschedule \xCA\x98 runs";  // U+0298 is nowhere in corpus.txt
    const ds::Error e = error_of([&] { encode(*spm, text); });
    CHECK(e.offset() == static_cast<int64_t>(text.find("\xCA\x98")));
    CHECK_THAT(e.what(), Catch::Contains("<unk>"));
  }
}

TEST_CASE("a corrupt or missing tokenizer file is named with what is wrong") {
  TempDir dir;
  const std::string merges = ds::tokenizer::read_text_file(kData + "/gpt2/merges.txt");
  const std::string vocab = ds::tokenizer::read_text_file(kData + "/gpt2/vocab.json");
  auto gpt2_error = [&](const std::string& vocab_text, const std::string& merges_text) {
    const std::string vocab_path = dir.file("vocab.json", vocab_text);
    const std::string merges_path = dir.file("merges.txt", merges_text);
    return error_of([&] { ds::tokenizer::Gpt2Bpe(vocab_path, merges_path); });
  };

  ds::Error e = gpt2_error(vocab.substr(0, vocab.size() / 2), merges);
  CHECK(e.path() == dir.path() + "/vocab.json");
  CHECK_THAT(e.what(), Catch::Contains("not valid JSON"));

  e = gpt2_error(R"({"a": 0, "b": -1})", merges);
  CHECK_THAT(e.what(), Catch::Contains("\"b\" is not a non-negative 32-bit integer"));

  e = gpt2_error(R"({"a": 0, "b": 0})", merges);
  CHECK_THAT(e.what(), Catch::Contains("id 0 is given to two tokens"));

  e = gpt2_error(R"({"a": 0, "日": 1})", merges);
  CHECK_THAT(e.what(), Catch::Contains("outside GPT-2's byte alphabet"));

  e = gpt2_error(vocab, "#version: 0.2\nt h\nth e x\n");
  CHECK(e.path() == dir.path() + "/merges.txt");
  CHECK_THAT(e.what(), Catch::Contains("merges.txt line 3: expected two tokens"));

  e = gpt2_error(vocab, "t h\nt h\n");
  CHECK_THAT(e.what(), Catch::Contains("line 2: the merge \"t h\" appears twice"));

  e = error_of([&] { load_tokenizer("gpt2:" + dir.path() + "/missing"); });
  CHECK(e.path() == dir.path() + "/missing/vocab.json");
  CHECK(e.errnum() == ENOENT);

  const std::string model = ds::tokenizer::read_text_file(kData + "/spm.model");
  const std::string truncated = dir.file("truncated.model", model.substr(0, model.size() / 3));
  e = error_of([&] { load_tokenizer("spm:" + truncated); });
  CHECK(e.path() == truncated);
  CHECK_THAT(e.what(), Catch::Contains("not a SentencePiece model"));

  e = error_of([&] { load_tokenizer("spm:" + dir.path() + "/missing.model"); });
  CHECK(e.errnum() == ENOENT);

  e = error_of([&] { load_tokenizer("bpe:" + kData); });
  CHECK_THAT(e.what(), Catch::Contains("expected gpt2:DIR"));
}
