// The tokenizer.json reader (HfTokenizer): the input up to its first NUL byte is tokenizer.json,
// the rest a text to encode, whose ids are then decoded. Whatever the bytes, the result is a
// tokenizer whose ids decode, or a ds::Error naming the file.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "dstrain/engine/tokenizer/hf_tokenizer.hpp"
#include "expect_named.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string input(reinterpret_cast<const char*>(data), size);
  const size_t nul = input.find('\0');
  const std::string json = input.substr(0, nul);
  const std::string text = nul == std::string::npos ? "Hello world 123 <s>" : input.substr(nul + 1);
  expect_named([&] {
    try {
      const ds::tokenizer::HfTokenizer tokenizer(json, "fuzz/tokenizer.json", "", "fuzz/tokenizer_config.json");
      for (const bool special : {false, true}) {
        const auto ids = tokenizer.encode(text, special);
        for (const uint32_t id : ids)
          if (static_cast<int64_t>(id) >= tokenizer.vocab_size())
            std::abort();  // an id outside the vocabulary it reports
        tokenizer.decode(ids, false);
        tokenizer.decode(ids, true);
      }
    } catch (const ds::Error& e) {
      if (!e.path()) std::abort();  // every refusal names the file
      throw;
    }
  });
  return 0;
}
