#include "codec_commands.hpp"

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <iterator>

#include "dstrain/engine/tokenizer/hf_tokenizer.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::app {
namespace {

bool is_hf(const std::string& spec) { return spec.rfind("hf:", 0) == 0; }

nlohmann::json read_stdin_array(const char* what) {
  const std::string input((std::istreambuf_iterator<char>(std::cin)), std::istreambuf_iterator<char>());
  nlohmann::json array;
  try {
    array = nlohmann::json::parse(input);
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("stdin is not JSON: ") + e.what());
  }
  if (!array.is_array()) throw Error(std::string("stdin must be a JSON array of ") + what);
  return array;
}

void encode(const std::string& spec, bool add_special_tokens) {
  if (add_special_tokens && !is_hf(spec))
    throw Error("--add-special-tokens needs an hf:DIR tokenizer (" + spec + " has no post-processor)")
        .with_key("--add-special-tokens");
  const auto tokenizer = tokenizer::load_tokenizer(spec);
  const auto* hf = dynamic_cast<const tokenizer::HfTokenizer*>(tokenizer.get());
  const nlohmann::json texts = read_stdin_array("strings");
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < texts.size(); ++i) {
    if (!texts[i].is_string()) throw Error("stdin[" + std::to_string(i) + "] is not a string");
    const std::string text = texts[i].get<std::string>();
    std::vector<uint32_t> ids;
    try {
      if (hf)
        ids = hf->encode(text, add_special_tokens);
      else
        tokenizer->encode(text, ids);
    } catch (const Error& e) {
      throw Error("stdin[" + std::to_string(i) + "]: " + e.what());
    }
    out.push_back(ids);
  }
  std::printf("%s\n", out.dump().c_str());
}

void decode(const std::string& spec, bool skip_special_tokens,
            const std::function<DecodeIds(const std::string& spec)>& decoder_of) {
  std::unique_ptr<tokenizer::HfTokenizer> hf;
  DecodeIds other;
  if (is_hf(spec))
    hf = std::make_unique<tokenizer::HfTokenizer>(spec.substr(3));
  else
    other = decoder_of(spec);
  const nlohmann::json lists = read_stdin_array("arrays of token ids");
  nlohmann::json out = nlohmann::json::array();
  for (size_t i = 0; i < lists.size(); ++i) {
    const std::string where = "stdin[" + std::to_string(i) + "]";
    if (!lists[i].is_array()) throw Error(where + " is not an array of token ids");
    std::vector<uint32_t> ids;
    for (const auto& id : lists[i]) {
      if (!id.is_number_unsigned() || id.get<uint64_t>() > 0xFFFFFFFFu)
        throw Error(where + " holds " + id.dump() + ", which is not a token id");
      ids.push_back(id.get<uint32_t>());
    }
    try {
      out.push_back(hf ? hf->decode(ids, skip_special_tokens) : other(ids));
    } catch (const Error& e) {
      throw Error(where + ": " + e.what());
    }
  }
  // Decoded text can hold U+FFFD where ids end inside a character; it is valid UTF-8 either way.
  std::printf("%s\n", out.dump().c_str());
}

}  // namespace

int run_codec_command(int argc, char** argv, const std::function<DecodeIds(const std::string& spec)>& decoder_of) {
  const std::string name = argv[0];
  const bool encoding = name == "encode";
  CLI::App app{encoding ? "dstrain encode: a JSON array of strings on stdin, their ids as a JSON array of arrays"
                        : "dstrain decode: a JSON array of id arrays on stdin, their text as a JSON array of strings"};
  app.name("dstrain " + name);
  std::string spec;
  bool special = false;
  app.add_option("--tokenizer", spec, "gpt2:DIR, spm:FILE or hf:DIR")->required();
  if (encoding)
    app.add_flag("--add-special-tokens", special, "add the post-processor's tokens (BOS/EOS)");
  else
    app.add_flag("--skip-special-tokens", special, "leave special tokens out of the text");
  try {
    app.parse(argc, argv);  // argv[0], the command's name, stands for the program
    if (encoding)
      encode(spec, special);
    else
      decode(spec, special, decoder_of);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dstrain %s: %s\n", name.c_str(), e.what());
    return 1;
  }
  return 0;
}

}  // namespace ds::app
