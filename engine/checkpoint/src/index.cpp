#include "dstrain/engine/checkpoint/index.hpp"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cerrno>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

#include "dstrain/io/crc32c.hpp"
#include "dstrain/io/shard_file.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds::ckpt {
namespace {

namespace fs = std::filesystem;

constexpr const char* kFormat = "dstrain-sharded-checkpoint";
// Version 2 added "index_crc32c"; version 1 indexes (no checksum) are still read, layout checked.
constexpr int kVersion = 2;
constexpr const char* kChecksumField = "index_crc32c";

uint32_t checksum_of(const nlohmann::json& body) {
  const std::string text = body.dump();  // compact; nlohmann's objects keep their keys sorted
  return io::crc32c(0, text.data(), text.size());
}

int64_t dtype_size(const std::string& dtype) {
  if (dtype == "float64" || dtype == "int64") return 8;
  if (dtype == "float32" || dtype == "int32") return 4;
  if (dtype == "float16" || dtype == "bfloat16") return 2;
  if (dtype == "uint8") return 1;
  return 0;
}

// Far beyond any real model (2^50 elements), small enough that sums and byte counts of such
// values never overflow an int64_t: a larger count in an index is corruption, refused as such.
constexpr int64_t kMaxElements = int64_t{1} << 50;

// A field of the index that does not hold: the message names the field and both values.
Error bad_field(const std::string& path, const std::string& field, const std::string& problem) {
  return Error("checkpoint index field " + field + ": " + problem).with_path(path);
}

// An integer field read in range: nlohmann's get<> turns a float into an integer by a cast that is
// undefined out of range, and narrows wide integers silently.
template <class Int>
Int whole(const nlohmann::json& value, const std::string& path, const std::string& field) {
  const bool fits = value.is_number_unsigned()
                        ? value.get<uint64_t>() <= static_cast<uint64_t>(std::numeric_limits<Int>::max())
                        : value.is_number_integer() && value.get<int64_t>() >= static_cast<int64_t>(std::numeric_limits<Int>::min()) &&
                              (std::numeric_limits<Int>::max() >= std::numeric_limits<int64_t>::max() ||
                               value.get<int64_t>() <= static_cast<int64_t>(std::numeric_limits<Int>::max()));
  if (!fits) throw bad_field(path, field, "must be an integer in range, got " + value.dump());
  return value.is_number_unsigned() ? static_cast<Int>(value.get<uint64_t>()) : static_cast<Int>(value.get<int64_t>());
}

// The layout as zero::ShardLayout cuts it: every parameter's numel from its shape, its chunk
// ceil(numel / partitions), and the chunks back to back in parameter order, filling shard_numel.
void check_params(const CheckpointIndex& index, const std::string& path) {
  int64_t end = 0;
  for (size_t i = 0; i < index.params.size(); ++i) {
    const ParamEntry& p = index.params[i];
    const std::string field = "params[" + std::to_string(i) + "] ('" + p.name + "')";
    int64_t numel = 1;
    for (int64_t dim : p.shape) {
      if (dim < 0 || __builtin_mul_overflow(numel, dim, &numel))
        throw bad_field(path, field + ".shape", "a negative or overflowing dimension in " + nlohmann::json(p.shape).dump());
    }
    if (numel > kMaxElements) throw bad_field(path, field + ".shape", "more elements than any checkpoint holds");
    if (p.numel != numel)
      throw bad_field(path, field + ".numel", std::to_string(p.numel) + ", but its shape " + nlohmann::json(p.shape).dump() +
                                                  " holds " + std::to_string(numel));
    const int64_t chunk = (numel + index.partitions - 1) / index.partitions;
    if (p.chunk != chunk)
      throw bad_field(path, field + ".chunk", std::to_string(p.chunk) + ", expected " + std::to_string(chunk) + " (" +
                                                  std::to_string(numel) + " elements in " +
                                                  std::to_string(index.partitions) + " partitions)");
    if (p.shard_offset != end)
      throw bad_field(path, field + ".shard_offset",
                      std::to_string(p.shard_offset) + ", expected " + std::to_string(end) +
                          " (chunks lie back to back in parameter order: overlapping or leaving a gap otherwise)");
    end += chunk;
    if (end > kMaxElements) throw bad_field(path, field + ".chunk", "the chunks add up to more than any shard holds");
  }
  if (index.shard_numel != end)
    throw bad_field(path, "shard_numel", std::to_string(index.shard_numel) + ", but the parameters' chunks add up to " +
                                             std::to_string(end));
}

// Every shard's sections lie back to back from offset 0 and fill the file; the partitions' shards
// begin with "master" and the optimizer state in its listed order, each shard_numel fp32 elements;
// the others hold none of them; every section is a whole number of its dtype; "rng" is in each.
void check_sections(const CheckpointIndex& index, const std::string& path) {
  for (size_t k = 0; k < index.shards.size(); ++k) {
    const ShardEntry& shard = index.shards[k];
    const std::string prefix = "shards[" + std::to_string(k) + "]";
    std::vector<std::string> leading;
    if (static_cast<int>(k) < index.partitions) {
      leading.push_back("master");
      for (const std::string& state : index.optimizer_state) leading.push_back("optim/" + state);
    }
    int64_t end = 0;
    bool rng = false;
    for (size_t j = 0; j < shard.sections.size(); ++j) {
      const ShardSection& s = shard.sections[j];
      const std::string field = prefix + ".sections[" + std::to_string(j) + "] ('" + s.name + "')";
      if (j < leading.size() && s.name != leading[j])
        throw bad_field(path, field + ".name", "'" + s.name + "', expected '" + leading[j] + "' in this place");
      const bool shard_shaped = s.name == "master" || s.name.rfind("optim/", 0) == 0;
      if (j >= leading.size() && shard_shaped)
        throw bad_field(path, field + ".name", "'" + s.name + "' out of place (or in a shard that holds no partition)");
      for (size_t other = 0; other < j; ++other)
        if (shard.sections[other].name == s.name) throw bad_field(path, field + ".name", "'" + s.name + "' twice");
      if (s.offset != end)
        throw bad_field(path, field + ".offset",
                        std::to_string(s.offset) + ", expected " + std::to_string(end) +
                            " (sections lie back to back in their listed order: overlapping or leaving a gap otherwise)");
      const int64_t size = dtype_size(s.dtype);
      if (size == 0) throw bad_field(path, field + ".dtype", "unknown dtype '" + s.dtype + "'");
      if (s.bytes < 0 || s.bytes % size != 0)
        throw bad_field(path, field + ".bytes", std::to_string(s.bytes) + " is not a whole number of " + s.dtype);
      if (shard_shaped && (s.dtype != "float32" || s.bytes != index.shard_numel * 4))
        throw bad_field(path, field + ".bytes",
                        std::to_string(s.bytes) + " bytes of " + s.dtype + ", expected " +
                            std::to_string(index.shard_numel * 4) + " (shard_numel " +
                            std::to_string(index.shard_numel) + " float32)");
      rng = rng || s.name == "rng";
      if (__builtin_add_overflow(end, s.bytes, &end))
        throw bad_field(path, field + ".bytes", "the sections end past any file's size");
    }
    if (shard.sections.size() < leading.size())
      throw bad_field(path, prefix + ".sections", "no section '" + leading[shard.sections.size()] + "'");
    if (!rng) throw bad_field(path, prefix + ".sections", "no section 'rng'");
    if (shard.bytes != end)
      throw bad_field(path, prefix + ".bytes", std::to_string(shard.bytes) + ", but its sections end at " +
                                                   std::to_string(end));
  }
}

int64_t counter(const nlohmann::json& counters, const std::string& name, const std::string& path, int64_t minimum = 0) {
  const nlohmann::json* value = counters.contains(name) ? &counters.at(name) : nullptr;
  if (value == nullptr || !value->is_number_integer())
    throw bad_field(path, "counters." + name, "missing or not an integer");
  const int64_t v = value->get<int64_t>();
  if (v < minimum)
    throw bad_field(path, "counters." + name, std::to_string(v) + " is below " + std::to_string(minimum));
  return v;
}

// The counters the engine restores, each in its range and consistent with the others: every
// global step is an optimizer step or a skipped one, and took at least one micro-step.
void check_counters(const nlohmann::json& counters, const std::string& path) {
  if (!counters.is_object()) throw bad_field(path, "counters", "not an object");
  const int64_t global = counter(counters, "global_steps", path);
  const int64_t optimizer = counter(counters, "optimizer_steps", path);
  const int64_t skipped = counter(counters, "skipped_steps", path);
  const int64_t micro = counter(counters, "micro_steps", path);
  if (optimizer + skipped != global)
    throw bad_field(path, "counters.global_steps",
                    std::to_string(global) + ", but optimizer_steps " + std::to_string(optimizer) +
                        " + skipped_steps " + std::to_string(skipped) + " = " + std::to_string(optimizer + skipped));
  if (micro < global)
    throw bad_field(path, "counters.micro_steps",
                    std::to_string(micro) + ", fewer than global_steps " + std::to_string(global));
  if (!counters.contains("loss_scaler") || !counters.at("loss_scaler").is_object())
    throw bad_field(path, "counters.loss_scaler", "missing or not an object");
  const nlohmann::json& scaler = counters.at("loss_scaler");
  const nlohmann::json* scale = scaler.contains("scale") ? &scaler.at("scale") : nullptr;
  if (scale == nullptr || !scale->is_number() || !(scale->get<double>() > 0) || !std::isfinite(scale->get<double>()))
    throw bad_field(path, "counters.loss_scaler.scale", "must be a finite number > 0");
  counter(scaler, "iteration", path);
  counter(scaler, "last_overflow_iteration", path, -1);
  counter(scaler, "hysteresis_left", path);
}

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
  json[kChecksumField] = checksum_of(json);
  return json;
}

CheckpointIndex CheckpointIndex::from_json(const nlohmann::json& json, const std::string& path) {
  CheckpointIndex index;
  try {
    if (json.value("format", "") != kFormat) throw Error("not a dstrain checkpoint index (no \"format\": \"" + std::string(kFormat) + "\")").with_path(path);
    const int version = json.at("version").get<int>();
    if (version != kVersion && version != 1)
      throw Error("checkpoint index version " + json.at("version").dump() + " is not 1 or " + std::to_string(kVersion) +
                  ", the ones this build reads").with_path(path);
    if (version >= 2) {
      if (!json.contains(kChecksumField) || !json.at(kChecksumField).is_number_unsigned())
        throw bad_field(path, kChecksumField, "missing: the index cannot be trusted");
      nlohmann::json body = json;
      body.erase(kChecksumField);
      const uint32_t stored = json.at(kChecksumField).get<uint32_t>();
      if (const uint32_t computed = checksum_of(body); computed != stored) {
        std::ostringstream message;
        message << "checkpoint index is corrupted or was edited: its CRC-32C is 0x" << std::hex << computed
                << ", index_crc32c says 0x" << stored;
        throw Error(message.str()).with_path(path);
      }
    } else {
      log::warn("checkpoint: ", path, " is a version 1 index, without a checksum of its own; its layout is checked");
    }
    index.tag = json.at("tag").get<std::string>();
    index.world_size = whole<int>(json.at("world_size"), path, "world_size");
    index.zero_stage = whole<int>(json.at("zero_stage"), path, "zero_stage");
    index.partitions = whole<int>(json.at("partitions"), path, "partitions");
    index.shard_numel = whole<int64_t>(json.at("shard_numel"), path, "shard_numel");
    index.counters = json.at("counters");
    index.optimizer = json.at("optimizer").at("type").get<std::string>();
    index.optimizer_state = json.at("optimizer").at("state").get<std::vector<std::string>>();
    for (const auto& p : json.at("params")) {
      const std::string field = "params[" + std::to_string(index.params.size()) + "]";
      ParamEntry entry{p.at("name").get<std::string>(), {}, whole<int64_t>(p.at("numel"), path, field + ".numel"),
                       whole<int64_t>(p.at("chunk"), path, field + ".chunk"),
                       whole<int64_t>(p.at("shard_offset"), path, field + ".shard_offset")};
      for (const auto& dim : p.at("shape")) entry.shape.push_back(whole<int64_t>(dim, path, field + ".shape"));
      index.params.push_back(std::move(entry));
    }
    for (const auto& s : json.at("shards")) {
      const std::string field = "shards[" + std::to_string(index.shards.size()) + "]";
      ShardEntry entry{s.at("file").get<std::string>(), whole<int64_t>(s.at("bytes"), path, field + ".bytes"),
                       whole<uint32_t>(s.at("crc32c"), path, field + ".crc32c"), {}};
      for (const auto& section : s.at("sections"))
        entry.sections.push_back({section.at("name").get<std::string>(), section.at("dtype").get<std::string>(),
                                  whole<int64_t>(section.at("offset"), path, field + ".sections.offset"),
                                  whole<int64_t>(section.at("bytes"), path, field + ".sections.bytes")});
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
  if (index.zero_stage < 0 || index.zero_stage > 3)
    throw bad_field(path, "zero_stage", std::to_string(index.zero_stage) + " is not 0 to 3");
  check_params(index, path);
  check_sections(index, path);
  check_counters(index.counters, path);
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

std::string newest_common_tag(const std::vector<std::string>& dirs) {
  // tag -> global_steps, for the complete checkpoints of the first folder; then kept only where
  // every other folder has the tag complete too.
  std::map<std::string, int64_t> common;
  std::string listed;
  for (size_t d = 0; d < dirs.size(); ++d) {
    listed += (listed.empty() ? "" : ", ") + dirs[d];
    std::map<std::string, int64_t> here;
    std::error_code ec;
    for (const auto& entry : fs::directory_iterator(dirs[d], ec)) {
      const std::string name = entry.path().filename().string();
      if (name.empty() || name[0] == '.' || !fs::exists(entry.path() / "index.json")) continue;
      if (d > 0 && !common.count(name)) continue;
      try {
        here[name] = CheckpointIndex::read(entry.path().string()).global_steps();
      } catch (const Error& e) {
        log::warn("checkpoint: not resuming from ", entry.path().string(), ": ", e.what());
      }
    }
    if (d == 0) common = here;
    for (auto it = common.begin(); it != common.end();)
      it = here.count(it->first) ? std::next(it) : common.erase(it);
  }
  if (common.empty())
    throw Error("no checkpoint is complete in every one of these folders: " + listed).with_errno(ENOENT);
  const auto newest = std::max_element(common.begin(), common.end(),
                                       [](const auto& a, const auto& b) { return a.second < b.second; });
  return newest->first;
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
