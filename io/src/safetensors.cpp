#include "dstrain/io/safetensors.hpp"

#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "dstrain/runtime/error.hpp"

namespace ds::io {
namespace {

// safetensors' own limit: a larger header is refused before it is read.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;
const char* const kIndexFile = "model.safetensors.index.json";
const char* const kSingleFile = "model.safetensors";

Error bad(const std::string& path, const std::string& what) {
  Error error(what);
  error.with_path(path);
  return error;
}

std::string in_quotes(const std::string& name) { return "'" + name + "'"; }

int64_t non_negative(const nlohmann::json& value, const std::string& path, const std::string& what) {
  if (value.is_number_unsigned() && value.get<uint64_t>() <= static_cast<uint64_t>(INT64_MAX)) return value.get<int64_t>();
  if (value.is_number_unsigned()) throw bad(path, what + " is too large: " + value.dump());
  throw bad(path, what + " is not a non-negative integer: " + value.dump());
}

SafetensorsTensor parse_entry(const std::string& name, const nlohmann::json& entry, const std::string& path) {
  const std::string what = "tensor " + in_quotes(name);
  if (!entry.is_object()) throw bad(path, what + " is not an object");
  SafetensorsTensor tensor;
  tensor.name = name;
  const auto dtype = entry.find("dtype");
  if (dtype == entry.end() || !dtype->is_string()) throw bad(path, what + " has no dtype string");
  tensor.dtype = dtype->get<std::string>();
  if (safetensors_dtype_size(tensor.dtype) == 0) throw bad(path, what + " has unknown dtype " + in_quotes(tensor.dtype));
  const auto shape = entry.find("shape");
  if (shape == entry.end() || !shape->is_array()) throw bad(path, what + " has no shape array");
  for (const auto& dim : *shape) tensor.shape.push_back(non_negative(dim, path, what + " shape entry"));
  const auto offsets = entry.find("data_offsets");
  if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2)
    throw bad(path, what + " has no data_offsets [begin, end]");
  tensor.begin = non_negative((*offsets)[0], path, what + " data_offsets[0]");
  tensor.end = non_negative((*offsets)[1], path, what + " data_offsets[1]");
  if (tensor.end < tensor.begin) throw bad(path, what + " ends before it begins: " + offsets->dump());
  int64_t bytes = safetensors_dtype_size(tensor.dtype);
  for (int64_t dim : tensor.shape)
    if (__builtin_mul_overflow(bytes, dim, &bytes)) throw bad(path, what + " has a shape too large: " + shape->dump());
  if (bytes != tensor.bytes())
    throw bad(path, what + " holds " + std::to_string(tensor.bytes()) + " bytes, its dtype and shape need " +
                        std::to_string(bytes));
  return tensor;
}

std::string temporary_name(const std::string& path) {
  char host[256] = "host";
  ::gethostname(host, sizeof host - 1);
  return path + ".tmp." + host + "." + std::to_string(::getpid());
}

}  // namespace

int64_t SafetensorsTensor::numel() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

int64_t safetensors_dtype_size(const std::string& dtype) {
  static const std::map<std::string, int64_t> sizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"F8_E4M3", 1}, {"F8_E5M2", 1}, {"I64", 8}, {"I32", 4},
      {"I16", 2}, {"I8", 1},  {"U64", 8}, {"U32", 4},  {"U16", 2},  {"U8", 1},          {"BOOL", 1}};
  const auto it = sizes.find(dtype);
  return it == sizes.end() ? 0 : it->second;
}

const SafetensorsTensor* SafetensorsHeader::find(const std::string& name) const {
  for (const SafetensorsTensor& tensor : tensors)
    if (tensor.name == name) return &tensor;
  return nullptr;
}

SafetensorsHeader SafetensorsHeader::parse(const char* json, size_t size, int64_t data_bytes, const std::string& path) {
  const nlohmann::json header = nlohmann::json::parse(json, json + size, nullptr, /*allow_exceptions=*/false);
  if (header.is_discarded() || !header.is_object()) throw bad(path, "safetensors header is not a JSON object");
  SafetensorsHeader parsed;
  for (const auto& item : header.items()) {
    if (item.key() == "__metadata__") {
      if (!item.value().is_object()) throw bad(path, "safetensors __metadata__ is not an object");
      for (const auto& entry : item.value().items()) {
        if (!entry.value().is_string()) throw bad(path, "safetensors __metadata__ " + in_quotes(entry.key()) + " is not a string");
        parsed.metadata[entry.key()] = entry.value().get<std::string>();
      }
      continue;
    }
    parsed.tensors.push_back(parse_entry(item.key(), item.value(), path));
  }
  std::sort(parsed.tensors.begin(), parsed.tensors.end(),
            [](const SafetensorsTensor& a, const SafetensorsTensor& b) { return a.begin != b.begin ? a.begin < b.begin : a.end < b.end; });
  int64_t covered = 0;
  const SafetensorsTensor* previous = nullptr;
  for (const SafetensorsTensor& tensor : parsed.tensors) {
    if (tensor.begin < covered)
      throw bad(path, "tensor " + in_quotes(tensor.name) + " overlaps " + in_quotes(previous->name) + " (bytes " +
                          std::to_string(tensor.begin) + " < " + std::to_string(covered) + ")");
    if (tensor.begin > covered)
      throw bad(path, "bytes " + std::to_string(covered) + ".." + std::to_string(tensor.begin) +
                          " of the data belong to no tensor (before " + in_quotes(tensor.name) + ")");
    covered = tensor.end;
    previous = &tensor;
  }
  if (covered > data_bytes)
    throw bad(path, "tensor " + in_quotes(previous->name) + " ends at byte " + std::to_string(covered) +
                        " of the data, the file holds " + std::to_string(data_bytes) + ": the file is truncated");
  if (covered < data_bytes)
    throw bad(path, "the file holds " + std::to_string(data_bytes - covered) + " bytes after the last tensor's data");
  return parsed;
}

SafetensorsReader::SafetensorsReader(std::string path) : file_(std::move(path)) {
  unsigned char length[8];
  if (file_.size() < 8) throw bad(file_.path(), "not a safetensors file: " + std::to_string(file_.size()) + " bytes");
  file_.read(0, length, 8);
  uint64_t header_bytes = 0;
  for (int i = 7; i >= 0; --i) header_bytes = header_bytes << 8 | length[i];
  if (header_bytes > kMaxHeaderBytes || header_bytes > static_cast<uint64_t>(file_.size() - 8))
    throw bad(file_.path(), "safetensors header length " + std::to_string(header_bytes) + " exceeds the file (" +
                                std::to_string(file_.size()) + " bytes) or the format's 100 MB limit");
  std::string json(header_bytes, '\0');
  file_.read(8, json.data(), static_cast<int64_t>(header_bytes));
  data_start_ = 8 + static_cast<int64_t>(header_bytes);
  header_ = SafetensorsHeader::parse(json.data(), json.size(), file_.size() - data_start_, file_.path());
}

void SafetensorsReader::read(const SafetensorsTensor& tensor, void* dst) const {
  file_.read(data_start_ + tensor.begin, dst, tensor.bytes());
}

SafetensorsWriter::SafetensorsWriter(std::string path, std::vector<SafetensorsTensor> tensors,
                                     std::map<std::string, std::string> metadata)
    : path_(std::move(path)), tensors_(std::move(tensors)) {
  nlohmann::json header = nlohmann::json::object();
  if (!metadata.empty()) header["__metadata__"] = metadata;
  for (SafetensorsTensor& tensor : tensors_) {
    const int64_t element = safetensors_dtype_size(tensor.dtype);
    if (element == 0) throw bad(path_, "tensor " + in_quotes(tensor.name) + " has unknown dtype " + in_quotes(tensor.dtype));
    if (tensor.name == "__metadata__" || header.contains(tensor.name))
      throw bad(path_, "tensor name " + in_quotes(tensor.name) + " is used twice or reserved");
    tensor.begin = data_bytes_;
    tensor.end = data_bytes_ + element * tensor.numel();
    data_bytes_ = tensor.end;
    header[tensor.name] = {{"dtype", tensor.dtype}, {"shape", tensor.shape}, {"data_offsets", {tensor.begin, tensor.end}}};
  }
  std::string json = header.dump();
  // Spaces up to a multiple of 8, so that the data starts aligned for every dtype.
  json.append((8 - json.size() % 8) % 8, ' ');
  header_bytes_ = 8 + static_cast<int64_t>(json.size());
  unsigned char length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<unsigned char>(static_cast<uint64_t>(json.size()) >> (8 * i));
  file_ = std::make_unique<ShardWriter>(temporary_name(path_), header_bytes_ + data_bytes_);
  file_->append(length, 8);
  file_->append(json.data(), static_cast<int64_t>(json.size()));
}

SafetensorsWriter::~SafetensorsWriter() {
  if (!file_) return;
  const std::string temporary = file_->path();
  file_.reset();
  std::remove(temporary.c_str());
}

void SafetensorsWriter::append(const void* data, int64_t bytes) {
  if (file_->bytes() + bytes > header_bytes_ + data_bytes_)
    throw bad(path_, "more data than the tensors hold (" + std::to_string(data_bytes_) + " bytes)");
  file_->append(data, bytes);
}

void SafetensorsWriter::finish() {
  if (file_->bytes() != header_bytes_ + data_bytes_)
    throw bad(path_, "finished after " + std::to_string(file_->bytes() - header_bytes_) + " of the tensors' " +
                         std::to_string(data_bytes_) + " data bytes");
  file_->finish();
  const std::string temporary = file_->path();
  if (std::rename(temporary.c_str(), path_.c_str()) != 0) {
    const int err = errno;
    std::remove(temporary.c_str());
    file_.reset();
    throw Error("cannot rename the safetensors file into place").with_path(path_).with_errno(err);
  }
  file_.reset();
}

SafetensorsFolder::SafetensorsFolder(std::string dir) : dir_(std::move(dir)) {
  namespace fs = std::filesystem;
  const fs::path index_path = fs::path(dir_) / kIndexFile;
  std::vector<std::string> files;
  std::map<std::string, std::string> listed;  // tensor -> file, from the index
  const bool indexed = fs::exists(index_path);
  if (indexed) {
    std::FILE* in = std::fopen(index_path.c_str(), "rb");
    if (!in) throw Error("cannot open the safetensors index").with_path(index_path.string()).with_errno(errno);
    const nlohmann::json index = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
    std::fclose(in);
    if (index.is_discarded() || !index.is_object() || !index.contains("weight_map") || !index["weight_map"].is_object())
      throw bad(index_path.string(), "safetensors index has no weight_map object");
    for (const auto& item : index["weight_map"].items()) {
      if (!item.value().is_string()) throw bad(index_path.string(), "weight_map " + in_quotes(item.key()) + " is not a file name");
      const std::string file = item.value().get<std::string>();
      if (file.empty() || file.find('/') != std::string::npos || file == "." || file == "..")
        throw bad(index_path.string(), "weight_map " + in_quotes(item.key()) + " names " + in_quotes(file) +
                                           ", not a file of this folder");
      listed[item.key()] = file;
      if (std::find(files.begin(), files.end(), file) == files.end()) files.push_back(file);
    }
  } else if (fs::exists(fs::path(dir_) / kSingleFile)) {
    files.push_back(kSingleFile);
  } else {
    throw Error(std::string("no ") + kSingleFile + " or " + kIndexFile + " in the folder").with_path(dir_);
  }
  for (const std::string& file : files) {
    if (indexed && !fs::exists(fs::path(dir_) / file)) {
      const auto first = std::find_if(listed.begin(), listed.end(), [&](const auto& item) { return item.second == file; });
      throw bad((fs::path(dir_) / file).string(), "the index puts tensor " + in_quotes(first->first) +
                                                      " in this file; the file is missing");
    }
    files_.push_back(std::make_unique<SafetensorsReader>((fs::path(dir_) / file).string()));
    for (const SafetensorsTensor& tensor : files_.back()->header().tensors) {
      // A shard may hold tensors its index maps elsewhere or not at all: the index decides.
      if (indexed && (!listed.count(tensor.name) || listed[tensor.name] != file)) continue;
      if (!file_of_name_.emplace(tensor.name, files_.size() - 1).second)
        throw bad(files_.back()->path(), "tensor " + in_quotes(tensor.name) + " is also in " +
                                             files_[file_of_name_[tensor.name]]->path());
    }
  }
  for (const auto& [name, file] : listed)
    if (!file_of_name_.count(name))
      throw bad((fs::path(dir_) / file).string(), "the index puts tensor " + in_quotes(name) + " in this file; it is not there");
}

SafetensorsFolder::~SafetensorsFolder() = default;

std::vector<std::string> SafetensorsFolder::names() const {
  std::vector<std::string> names;
  for (const auto& item : file_of_name_) names.push_back(item.first);
  return names;
}

const SafetensorsTensor& SafetensorsFolder::tensor(const std::string& name) const {
  const auto it = file_of_name_.find(name);
  if (it == file_of_name_.end()) throw Error("no tensor " + in_quotes(name) + " in the safetensors weights").with_path(dir_);
  return *files_[it->second]->header().find(name);
}

const std::string& SafetensorsFolder::file_of(const std::string& name) const {
  tensor(name);
  return files_[file_of_name_.at(name)]->path();
}

void SafetensorsFolder::read(const std::string& name, void* dst) const {
  const SafetensorsTensor& entry = tensor(name);
  files_[file_of_name_.at(name)]->read(entry, dst);
}

}  // namespace ds::io
