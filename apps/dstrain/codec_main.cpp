// dstrain-codec: the tokenizer half of `dstrain generate`, a torch-free program for the reason
// dstrain-tokenize is one (SentencePiece's protobuf cannot share a process with LibTorch's).
//   dstrain-codec SPEC --encode TEXT   prints TEXT's ids on one line, space-separated
//   dstrain-codec SPEC --decode [--after IDS]  reads ids, one a line, and writes each one's text at
//                                      once; IDS (space-separated) come before them, their text written
//   dstrain-codec encode|decode ...  `dstrain encode` and `dstrain decode` (codec_commands.hpp)
// SPEC is gpt2:DIR, spm:FILE or hf:DIR (tokenizer.hpp). Errors go to stderr, naming the byte offset
// of text the tokenizer cannot encode, or an id outside the vocabulary; the exit status is then 1.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>
#include <sentencepiece_processor.h>

#include <cerrno>
#include <cstdio>
#include <exception>
#include <fstream>
#include <functional>
#include <iostream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "codec_commands.hpp"
#include "dstrain/engine/tokenizer/byte_alphabet.hpp"
#include "dstrain/engine/tokenizer/hf_tokenizer.hpp"
#include "dstrain/engine/tokenizer/tokenizer.hpp"
#include "dstrain/runtime/error.hpp"

namespace {

using TextOf = std::function<std::string(uint32_t id)>;

// GPT-2: vocab.json's token spelled in the byte alphabet, as bytes.
TextOf gpt2_text(const std::string& dir) {
  const std::string path = dir + "/vocab.json";
  std::ifstream file(path);
  if (!file) throw ds::Error("cannot open the vocabulary").with_path(path).with_errno(errno);
  const nlohmann::json vocab = nlohmann::json::parse(file);
  auto text = std::make_shared<std::vector<std::string>>();
  for (const auto& [token, id] : vocab.items()) {
    const uint32_t index = id.get<uint32_t>();
    if (text->size() <= index) text->resize(index + 1);
    (*text)[index] = ds::tokenizer::bytes_of_token(token).value_or("");
  }
  return [text](uint32_t id) {
    if (id >= text->size()) throw ds::Error("id " + std::to_string(id) + " is outside the vocabulary");
    return (*text)[id];
  };
}

// SentencePiece: the piece with its word-start mark as a space, byte pieces as their byte, control
// pieces (<s>, </s>) as nothing.
TextOf spm_text(const std::string& path) {
  auto processor = std::make_shared<sentencepiece::SentencePieceProcessor>();
  if (!processor->Load(path).ok()) throw ds::Error("not a SentencePiece model").with_path(path);
  return [processor](uint32_t id) -> std::string {
    if (static_cast<int>(id) >= processor->GetPieceSize())
      throw ds::Error("id " + std::to_string(id) + " is outside the vocabulary");
    if (processor->IsControl(id)) return "";
    const std::string piece = processor->IdToPiece(id);
    if (processor->IsByte(id)) return std::string(1, static_cast<char>(std::stoi(piece.substr(3, 2), nullptr, 16)));
    const std::string mark = "\xe2\x96\x81";  // U+2581
    std::string text;
    for (size_t i = 0; i < piece.size();)
      if (piece.compare(i, mark.size(), mark) == 0) text += ' ', i += mark.size();
      else text += piece[i++];
    return text;
  };
}

// Whether decoded text ends in U+FFFD: ids that end inside a character.
bool ends_in_replacement(const std::string& text) {
  return text.size() >= 3 && text.compare(text.size() - 3, 3, "\xEF\xBF\xBD") == 0;
}

// hf:DIR decodes a whole sequence (a Metaspace decoder drops the first token's space, byte tokens
// join into characters): each new id's text is what the decoding of all ids so far, `after`'s
// first, adds, written once that decoding does not end inside a character.

void hf_decode_stream(const std::string& dir, const std::string& after) {
  const ds::tokenizer::HfTokenizer tokenizer(dir);
  std::vector<uint32_t> ids;
  std::istringstream before(after);
  for (uint32_t id; before >> id;) ids.push_back(id);
  // A character cut at the end of `after` is not written yet: it is written when it ends.
  std::string written = tokenizer.decode(ids, /*skip_special_tokens=*/false);
  while (ends_in_replacement(written)) written.resize(written.size() - 3);
  for (uint32_t id; std::cin >> id;) {
    ids.push_back(id);
    const std::string text = tokenizer.decode(ids, /*skip_special_tokens=*/false);
    if (ends_in_replacement(text) || text.compare(0, written.size(), written) != 0) continue;
    std::fwrite(text.data() + written.size(), 1, text.size() - written.size(), stdout);
    std::fflush(stdout);
    written = text;
  }
}

TextOf text_of(const std::string& spec) {
  const size_t colon = spec.find(':');
  const std::string kind = spec.substr(0, colon), where = colon == std::string::npos ? "" : spec.substr(colon + 1);
  if (kind == "gpt2") return gpt2_text(where);
  if (kind == "spm") return spm_text(where);
  throw ds::Error("unknown tokenizer \"" + spec + "\": expected gpt2:DIR, spm:FILE or hf:DIR").with_key("--tokenizer");
}

}  // namespace

int main(int argc, char** argv) {
  if (argc > 1 && (std::string(argv[1]) == "encode" || std::string(argv[1]) == "decode"))
    return ds::app::run_codec_command(argc - 1, argv + 1, [](const std::string& spec) -> ds::app::DecodeIds {
      const TextOf piece = text_of(spec);
      return [piece](const std::vector<uint32_t>& ids) {
        std::string text;
        for (const uint32_t id : ids) text += piece(id);
        return text;
      };
    });
  CLI::App app{"dstrain-codec: token ids to text and back for dstrain generate"};
  std::string spec, text, after;
  bool decode = false;
  app.add_option("spec", spec, "gpt2:DIR, spm:FILE or hf:DIR")->required();
  auto* encode = app.add_option("--encode", text, "print this text's ids");
  app.add_flag("--decode", decode, "read ids from stdin, write their text")->excludes(encode);
  app.add_option("--after", after, "with --decode: the ids before those on stdin (their text is written)");
  try {
    app.parse(argc, argv);
    const bool hf = spec.rfind("hf:", 0) == 0;
    if (!decode) {
      // A prompt is encoded as transformers encodes it: with the post-processor's BOS, for hf:DIR.
      std::vector<uint32_t> ids;
      if (hf) ids = ds::tokenizer::HfTokenizer(spec.substr(3)).encode(text, /*add_special_tokens=*/true);
      else ds::tokenizer::load_tokenizer(spec)->encode(text, ids);
      for (size_t i = 0; i < ids.size(); ++i) std::printf(i ? " %u" : "%u", ids[i]);
      std::printf("\n");
      return 0;
    }
    if (hf) {
      hf_decode_stream(spec.substr(3), after);
      return 0;
    }
    const TextOf text_of_id = text_of(spec);
    for (uint32_t id; std::cin >> id;) {
      const std::string piece = text_of_id(id);
      std::fwrite(piece.data(), 1, piece.size(), stdout);
      std::fflush(stdout);
    }
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dstrain generate: %s\n", e.what());
    return 1;
  }
  return 0;
}
