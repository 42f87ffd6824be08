// The two on-disk token formats the trainer reads.
//
// llm.c's token files (dev/data/data_common.py): a header of 256 little-endian int32 values,
// [0] magic 20240520, [1] version 1, [2] the number of tokens; then the tokens as little-endian
// uint16 (GPT-2's vocabulary fits). The file is exactly 1024 + 2 * count bytes.
//
// Plain text: each byte is a token (vocabulary 256).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace ds::data {

constexpr int32_t kTokenFileMagic = 20240520;
constexpr int32_t kTokenFileVersion = 1;
constexpr int64_t kTokenFileHeaderInts = 256;

// Throws ds::Error with the path (and the field's offset) for a missing file, a bad magic,
// version or count, or a size that disagrees with the count.
std::vector<uint16_t> read_token_file(const std::string& path);
// Writes `tokens` in llm.c's format, replacing any file at `path`.
void write_token_file(const std::string& path, const std::vector<uint16_t>& tokens);

std::vector<uint16_t> read_text_tokens(const std::string& path);

}  // namespace ds::data
