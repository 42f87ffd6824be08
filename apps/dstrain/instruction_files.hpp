// The files of one split of an instruction dataset (docs/instruction-data.md), beside each other:
//   SPLIT.bin   llm.c's token file (engine/data token_file.hpp): 256 int32 header, uint16 ids
//   SPLIT.mask  int32 magic kMaskMagic, int32 version 1, int64 tokens; then one byte per token,
//               1 where the token is a target of the loss, else 0
//   SPLIT.docs  int32 magic kDocsMagic, int32 version 1, int64 tokens, int64 documents; then each
//               document's first token as an int64 offset, ascending, the first 0
// All little-endian. `tokens` equals the token file's count: a reader checks the three belong together.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace ds::app {

constexpr int32_t kMaskMagic = 0x4B53414D;  // "MASK"
constexpr int32_t kDocsMagic = 0x53434F44;  // "DOCS"
constexpr int32_t kInstructionFileVersion = 1;

struct SplitData {
  std::vector<uint16_t> tokens;
  std::vector<uint8_t> mask;
  std::vector<int64_t> doc_starts;
};

// Writes and then renames temporary files, so that no file at the final paths is ever half
// written: stage() writes PATH.tmp files (throws ds::Error naming the file), commit() renames
// them all; a Writer destroyed before commit() removes what it wrote.
class SplitWriter {
 public:
  SplitWriter() = default;
  SplitWriter(const SplitWriter&) = delete;
  SplitWriter& operator=(const SplitWriter&) = delete;
  ~SplitWriter();

  // Stages PREFIX.bin, PREFIX.mask and PREFIX.docs.
  void stage(const std::string& prefix, const SplitData& split);
  void commit();

 private:
  std::vector<std::pair<std::string, std::string>> staged_;  // temporary, final
};

}  // namespace ds::app
