#include "dstrain/engine/checkpoint/index.hpp"

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "dstrain/io/shard_file.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::ckpt {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "dstrain-sharded-checkpoint";
constexpr int kVersion = 1;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error("cannot open").with_path(path).with_errno(errno ? errno : ENOENT);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string trimmed(std::string text) {
  const auto space = [](unsigned char c) { return std::isspace(c) != 0; };
  text.erase(text.begin(), std::find_if_not(text.begin(), text.end(), space));
  text.erase(std::find_if_not(text.rbegin(), text.rend(), space).base(), text.end());
  return text;
}

// The error for a tag whose folder has no index.json; an earlier dstrain's single-file <tag>.pt is
// named as such.
Error missing_checkpoint(const fs::path& dir, const std::string& tag, const std::string& how) {
  const fs::path legacy = dir / (tag + ".pt");
  if (fs::exists(legacy))
    return Error(how + " is a single-file checkpoint of an earlier dstrain; this version reads sharded checkpoints "
                 "(docs/checkpoints.md)").with_path(legacy.string());
  return Error(how + " has no index.json (incomplete, or not a checkpoint)")
      .with_path((dir / tag / "index.json").string())
      .with_errno(ENOENT);
}

}  // namespace

const ShardSection* ShardEntry::find(const std::string& name) const {
  for (const ShardSection& section : sections)
    if (section.name == name) return &section;
  return nullptr;
}

nlohmann::json CheckpointIndex::to_json() const {
  nlohmann::json json = {{"format", kFormat},         {"version", kVersion},       {"tag", tag},
                         {"world_size", world_size},  {"zero_stage", zero_stage},  {"partitions", partitions},
                         {"shard_numel", shard_numel}, {"counters", counters}};
  json["optimizer"] = {{"type", optimizer}, {"state", optimizer_state}};
  for (const ParamEntry& p : params)
    json["params"].push_back(
        {{"name", p.name}, {"shape", p.shape}, {"numel", p.numel}, {"chunk", p.chunk}, {"shard_offset", p.shard_offset}});
  for (const ShardEntry& s : shards) {
    nlohmann::json entry = {{"file", s.file}, {"bytes", s.bytes}, {"crc32c", s.crc32c}, {"sections", nlohmann::json::array()}};
    for (const ShardSection& section : s.sections)
      entry["sections"].push_back(
          {{"name", section.name}, {"dtype", section.dtype}, {"offset", section.offset}, {"bytes", section.bytes}});
    json["shards"].push_back(entry);
  }
  json["config"] = config;
  return json;
}

CheckpointIndex CheckpointIndex::from_json(const nlohmann::json& json, const std::string& path) {
  CheckpointIndex index;
  try {
    if (json.value("format", "") != kFormat) throw Error("not a dstrain checkpoint index (no \"format\": \"" + std::string(kFormat) + "\")").with_path(path);
    if (json.at("version").get<int>() != kVersion)
      throw Error("checkpoint index version " + json.at("version").dump() + " is not " + std::to_string(kVersion) +
                  ", the one this build reads").with_path(path);
    index.tag = json.at("tag").get<std::string>();
    index.world_size = json.at("world_size").get<int>();
    index.zero_stage = json.at("zero_stage").get<int>();
    index.partitions = json.at("partitions").get<int>();
    index.shard_numel = json.at("shard_numel").get<int64_t>();
    index.counters = json.at("counters");
    index.optimizer = json.at("optimizer").at("type").get<std::string>();
    index.optimizer_state = json.at("optimizer").at("state").get<std::vector<std::string>>();
    for (const auto& p : json.at("params"))
      index.params.push_back({p.at("name").get<std::string>(), p.at("shape").get<std::vector<int64_t>>(),
                              p.at("numel").get<int64_t>(), p.at("chunk").get<int64_t>(),
                              p.at("shard_offset").get<int64_t>()});
    for (const auto& s : json.at("shards")) {
      ShardEntry entry{s.at("file").get<std::string>(), s.at("bytes").get<int64_t>(), s.at("crc32c").get<uint32_t>(), {}};
      for (const auto& section : s.at("sections"))
        entry.sections.push_back({section.at("name").get<std::string>(), section.at("dtype").get<std::string>(),
                                  section.at("offset").get<int64_t>(), section.at("bytes").get<int64_t>()});
      index.shards.push_back(std::move(entry));
    }
    index.config = json.at("config");
  } catch (const nlohmann::json::exception& e) {
    throw Error(std::string("malformed checkpoint index: ") + e.what()).with_path(path);
  }
  if (index.world_size < 1 || static_cast<int>(index.shards.size()) != index.world_size ||
      index.partitions < 1 || index.partitions > index.world_size)
    throw Error("malformed checkpoint index: world_size " + std::to_string(index.world_size) + ", " +
                std::to_string(index.shards.size()) + " shards, " + std::to_string(index.partitions) + " partitions")
        .with_path(path);
  return index;
}

CheckpointIndex CheckpointIndex::read(const std::string& folder) {
  const std::string path = (fs::path(folder) / "index.json").string();
  if (!fs::exists(path)) throw Error("checkpoint has no index.json (incomplete or not a checkpoint)").with_path(path).with_errno(ENOENT);
  const std::string text = read_text(path);
  if (text.empty()) throw Error("checkpoint index is empty").with_path(path);
  nlohmann::json json = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded()) throw Error("checkpoint index is not valid JSON (truncated or corrupted?)").with_path(path);
  return from_json(json, path);
}

std::string checkpoint_folder(const std::string& dir, const std::string& tag) {
  if (!tag.empty()) {
    const std::string folder = (fs::path(dir) / tag).string();
    if (!fs::exists(fs::path(folder) / "index.json")) throw missing_checkpoint(dir, tag, "checkpoint '" + tag + "'");
    return folder;
  }
  const std::string latest = (fs::path(dir) / "latest").string();
  if (fs::exists(latest)) {
    const std::string name = trimmed(read_text(latest));
    if (name.empty()) throw Error("'latest' is empty: it names no checkpoint").with_path(latest);
    const fs::path folder = fs::path(dir) / name;
    if (!fs::exists(folder / "index.json"))
      throw missing_checkpoint(dir, name, "checkpoint '" + name + "', which 'latest' names,");
    return folder.string();
  }
  // No latest file (deleted by hand): the complete checkpoint of the highest step.
  std::string best;
  int64_t best_step = -1;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || name[0] == '.' || !fs::exists(entry.path() / "index.json")) continue;
    const int64_t step = CheckpointIndex::read(entry.path().string()).global_steps();
    if (step > best_step) best_step = step, best = entry.path().string();
  }
  if (best.empty())
    throw Error("no checkpoint to resume: no 'latest' file and no complete checkpoint").with_path(dir).with_errno(ec ? ec.value() : ENOENT);
  return best;
}

ShardSet::ShardSet(std::string folder, const CheckpointIndex& index)
    : folder_(std::move(folder)), index_(index), readers_(index.shards.size()) {}

ShardSet::~ShardSet() = default;

std::string ShardSet::path(int rank) const { return (fs::path(folder_) / index_.shards.at(rank).file).string(); }

const io::ShardReader& ShardSet::reader(int rank) {
  auto& reader = readers_.at(rank);
  if (!reader) reader = std::make_unique<io::ShardReader>(path(rank));
  return *reader;
}

void ShardSet::read_elements(size_t param, const std::string& section, int64_t begin, int64_t count, float* dst) {
  const ParamEntry& p = index_.params.at(param);
  if (begin < 0 || count < 0 || begin + count > p.numel)
    throw Error("elements [" + std::to_string(begin) + ", " + std::to_string(begin + count) + ") outside parameter '" +
                p.name + "' of " + std::to_string(p.numel)).with_path(folder_);
  for (int64_t at = begin; at < begin + count;) {
    const int k = static_cast<int>(at / p.chunk);  // the partition holding element `at`
    const int64_t end = std::min(begin + count, (k + 1) * p.chunk);
    const ShardSection* s = index_.shards.at(k).find(section);
    if (s == nullptr) throw Error("checkpoint shard has no section '" + section + "'").with_path(path(k));
    const int64_t within = p.shard_offset + (at - k * p.chunk);
    if ((within + (end - at)) * int64_t{sizeof(float)} > s->bytes)
      throw Error("section '" + section + "' is too small for parameter '" + p.name + "'").with_path(path(k));
    reader(k).read(s->offset + within * int64_t{sizeof(float)}, dst + (at - begin), (end - at) * int64_t{sizeof(float)});
    at = end;
  }
}

void ShardSet::read_section(int rank, const std::string& section, void* dst, int64_t bytes) {
  const ShardSection* s = index_.shards.at(rank).find(section);
  if (s == nullptr) throw Error("checkpoint shard has no section '" + section + "'").with_path(path(rank));
  if (s->bytes != bytes)
    throw Error("section '" + section + "' has " + std::to_string(s->bytes) + " bytes, " + std::to_string(bytes) +
                " expected").with_path(path(rank));
  reader(rank).read(s->offset, dst, bytes);
}

std::string ShardSet::verify(int rank, void* buffer, int64_t buffer_size) {
  const ShardEntry& entry = index_.shards.at(rank);
  const io::ShardReader& file = reader(rank);
  if (file.size() != entry.bytes)
    return "checkpoint shard has " + std::to_string(file.size()) + " bytes, the index says " +
           std::to_string(entry.bytes) + (file.size() < entry.bytes ? " (truncated)" : "");
  const uint32_t crc = file.crc32c(buffer, buffer_size);
  if (crc != entry.crc32c) {
    std::ostringstream message;
    message << "checkpoint shard is corrupted: CRC-32C 0x" << std::hex << crc << ", the index says 0x" << entry.crc32c;
    return message.str();
  }
  return "";
}

}  // namespace ds::ckpt
