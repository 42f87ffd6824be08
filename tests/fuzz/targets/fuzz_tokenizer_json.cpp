// The tokenizer.json reader (HfTokenizer): the input up to its first NUL byte is tokenizer.json,
// the rest a text to encode, whose ids are then decoded. Whatever the bytes, the result is a
// tokenizer whose ids decode, or a ds::Error (naming the file, when the file is refused).
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <memory>
#include <string>

#include "dstrain/engine/tokenizer/hf_tokenizer.hpp"
#include "expect_named.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string json = input.substr(0, nul);
  const std::string text = nul == std::string::npos ? "Hello world 123 <s>" : input.substr(nul + 1);
  expect_named([&] {
    std::unique_ptr<ds::tokenizer::HfTokenizer> tokenizer;
    try {
      tokenizer =
          std::make_unique<ds::tokenizer::HfTokenizer>(json, "fuzz/tokenizer.json", "", "fuzz/tokenizer_config.json");
    } catch (const ds::Error& e) {
      if (!e.path()) {  // a refused file names itself
        std::fprintf(stderr, "fuzz: a refusal that names no file: %s\n", e.what());
        std::abort();
      }
      throw;
    }
    // The text may be refused too (not UTF-8, a character without a token), with a ds::Error.
    for (const bool special : {false, true}) {
      const auto ids = tokenizer->encode(text, special);
      for (const uint32_t id : ids)
        if (static_cast<int64_t>(id) >= tokenizer->vocab_size()) std::abort();  // outside the vocabulary it reports
      tokenizer->decode(ids, false);
      tokenizer->decode(ids, true);
    }
  });
  return 0;
}
