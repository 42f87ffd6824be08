// A sharded checkpoint on disk, as any reader sees it (see docs/checkpoints.md):
//
//   <dir>/<tag>/index.json   this description: layout, counters, config, and per shard its size,
//                            CRC-32C and sections; its own CRC-32C in "index_crc32c"
//   <dir>/<tag>/rank<r>.bin  rank r's shard: raw little-endian sections, back to back
//   <dir>/latest             the tag of the newest complete checkpoint
//
// A parameter's state (the fp32 master weights, each optimizer state) is cut as zero::ShardLayout
// cuts it: padded to `partitions` equal chunks, chunk k in rank k's section at `shard_offset`.
// ShardSet reads any element range of it from whichever shards hold it, straight into the
// caller's memory, which is how a checkpoint reloads under another world size or stage.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ds::io {
class ShardReader;
}

namespace ds::ckpt {

struct ShardSection {
  std::string name;   // "master", "optim/<state>", "local/<state>", "rng"
  std::string dtype;  // "float32", "uint8", ... (torch's names)
  int64_t offset = 0;  // bytes from the start of the shard file
  int64_t bytes = 0;
};

struct ShardEntry {
  std::string file;  // relative to the checkpoint folder
  int64_t bytes = 0;
  uint32_t crc32c = 0;
  std::vector<ShardSection> sections;
  const ShardSection* find(const std::string& name) const;
};

struct ParamEntry {
  std::string name;
  std::vector<int64_t> shape;
  int64_t numel = 0;
  int64_t chunk = 0;         // elements of this parameter in each partition's section
  int64_t shard_offset = 0;  // where that chunk starts in a section, in elements
};

struct CheckpointIndex {
  std::string tag;
  int world_size = 1;
  int zero_stage = 0;
  int partitions = 1;  // shards holding the sharded state: world_size under ZeRO 1-3, 1 under ZeRO 0
  int64_t shard_numel = 0;
  std::vector<ParamEntry> params;
  std::string optimizer;                     // the optimizer type, e.g. "AdamW"
  std::vector<std::string> optimizer_state;  // its shard-shaped state, e.g. exp_avg, exp_avg_sq
  nlohmann::json counters;                   // global_steps, optimizer_steps, ..., loss_scaler
  nlohmann::json config;                     // the effective config, "dstrain" block (the model) included
  std::vector<ShardEntry> shards;            // one per rank, in rank order

  int64_t global_steps() const { return counters.value("global_steps", int64_t{0}); }
  // The index as written, "index_crc32c" included: the CRC-32C of the rest, dumped compact with
  // sorted keys (Python: json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)).
  nlohmann::json to_json() const;
  // Parses `json` read from `path` and checks it before anyone trusts it: its checksum, then the
  // layout against the shapes (each parameter's numel, chunk and shard_offset; every shard's
  // sections back to back in their fixed order, sized to the layout, filling the file) and the
  // counters (non-negative, optimizer_steps + skipped_steps == global_steps). Any failure is a
  // ds::Error naming the path and the field, e.g. "params[3].shard_offset".
  static CheckpointIndex from_json(const nlohmann::json& json, const std::string& path);
  // Reads <folder>/index.json.
  static CheckpointIndex read(const std::string& folder);
};

// The folder of checkpoint `tag` in `dir`. An empty tag means the one <dir>/latest names or, when
// there is no latest file, the complete checkpoint (one with an index.json) of the highest step.
// Every failure (no checkpoint, an empty or dangling latest) is a ds::Error naming the file.
std::string checkpoint_folder(const std::string& dir, const std::string& tag);

// The tag of the newest checkpoint (highest global_steps) complete in every one of `dirs` (e.g. a
// pipeline's stage folders, which save on the same steps): a folder with a readable, valid
// index.json under the same tag in each. A ds::Error naming the folders when they share none.
std::string newest_common_tag(const std::vector<std::string>& dirs);

// The shard files of one checkpoint, each opened on first use.
class ShardSet {
 public:
  ShardSet(std::string folder, const CheckpointIndex& index);
  ~ShardSet();
  ShardSet(const ShardSet&) = delete;
  ShardSet& operator=(const ShardSet&) = delete;

  // Elements [begin, begin + count) of parameter `param`'s flattened fp32 state `section`
  // ("master", "optim/exp_avg", ...), read from the shards that hold them into `dst`.
  void read_elements(size_t param, const std::string& section, int64_t begin, int64_t count, float* dst);
  // The whole section `section` of shard `rank` into `dst` (`bytes` must equal its size).
  void read_section(int rank, const std::string& section, void* dst, int64_t bytes);
  // Checks shard `rank` against its size and CRC-32C in the index, reading it through `buffer`;
  // returns "" when it matches, else what is wrong (the caller names the file: path(rank)).
  std::string verify(int rank, void* buffer, int64_t buffer_size);
  std::string path(int rank) const;

 private:
  const io::ShardReader& reader(int rank);

  std::string folder_;
  const CheckpointIndex& index_;
  std::vector<std::unique_ptr<io::ShardReader>> readers_;
};

}  // namespace ds::ckpt
