// Safetensors, Hugging Face's weight files, torch-free:
//
//   8 bytes   N, the header's length (unsigned, little-endian)
//   N bytes   JSON: {"<name>": {"dtype": "F32", "shape": [768, 2304], "data_offsets": [begin, end]},
//              ..., "__metadata__": {"format": "pt"}}, padded with spaces
//   the rest  the tensors' raw little-endian bytes, [begin, end) counted from the header's end
//
// The tensors tile the data area exactly (no gap, no overlap, nothing after the last), each
// holding numel x dtype size bytes. A folder of them (a model saved by transformers) is either one
// model.safetensors or shards listed by model.safetensors.index.json ({"weight_map": {"<name>":
// "<file>"}}). Readers read one tensor at a time with pread and never hold a file whole; writers
// take the whole header up front (names, dtypes, shapes) and then the data a piece at a time.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "dstrain/io/shard_file.hpp"

namespace ds::io {

struct SafetensorsTensor {
  std::string name;
  std::string dtype;  // "F32", "F16", "BF16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL", ...
  std::vector<int64_t> shape;
  int64_t begin = 0;  // bytes from the start of the data area
  int64_t end = 0;

  int64_t bytes() const { return end - begin; }
  int64_t numel() const;
};

// Bytes per element of a safetensors dtype name; 0 for a name the format does not have.
int64_t safetensors_dtype_size(const std::string& dtype);

struct SafetensorsHeader {
  std::vector<SafetensorsTensor> tensors;  // in the order of their data
  std::map<std::string, std::string> metadata;

  const SafetensorsTensor* find(const std::string& name) const;
  // Parses the header's JSON and checks it against a data area of `data_bytes`: every entry's
  // dtype, shape and offsets, the bytes its shape needs, the tiling. Any failure is a ds::Error
  // naming `path` and the tensor, e.g. "tensor 'h.0.attn.bias' overlaps 'h.0.attn.weight'".
  static SafetensorsHeader parse(const char* json, size_t size, int64_t data_bytes, const std::string& path);
};

class SafetensorsReader {
 public:
  // Opens the file and reads and checks its header; a ds::Error naming the file otherwise.
  explicit SafetensorsReader(std::string path);

  const SafetensorsHeader& header() const { return header_; }
  const std::string& path() const { return file_.path(); }
  // The tensor's bytes (tensor.bytes() of them) into `dst`.
  void read(const SafetensorsTensor& tensor, void* dst) const;

 private:
  ShardReader file_;
  int64_t data_start_ = 0;
  SafetensorsHeader header_;
};

class SafetensorsWriter {
 public:
  // Lays out `tensors` (name, dtype and shape; offsets are assigned here, in this order) and writes
  // the header to <path>.tmp.<host>.<pid>. A duplicate name or unknown dtype is a ds::Error.
  SafetensorsWriter(std::string path, std::vector<SafetensorsTensor> tensors,
                    std::map<std::string, std::string> metadata = {{"format", "pt"}});
  ~SafetensorsWriter();  // removes the temporary file of a writer never finished
  SafetensorsWriter(const SafetensorsWriter&) = delete;
  SafetensorsWriter& operator=(const SafetensorsWriter&) = delete;

  // The next `bytes` of the data, in the tensors' order, cut anywhere.
  void append(const void* data, int64_t bytes);
  // Checks that every tensor's bytes came, fsyncs and renames the file to its path.
  void finish();

  const std::vector<SafetensorsTensor>& tensors() const { return tensors_; }

 private:
  std::string path_;
  std::vector<SafetensorsTensor> tensors_;
  int64_t data_bytes_ = 0;
  int64_t header_bytes_ = 0;
  std::unique_ptr<ShardWriter> file_;
};

// The weights of a Hugging Face model folder: model.safetensors, or every shard that
// model.safetensors.index.json names (each tensor checked to be in the shard the index says).
class SafetensorsFolder {
 public:
  explicit SafetensorsFolder(std::string dir);
  ~SafetensorsFolder();

  std::vector<std::string> names() const;  // every tensor, sorted
  // The tensor `name` and the file it is in; a ds::Error naming the folder when there is none.
  const SafetensorsTensor& tensor(const std::string& name) const;
  const std::string& file_of(const std::string& name) const;
  void read(const std::string& name, void* dst) const;

 private:
  std::string dir_;
  std::vector<std::unique_ptr<SafetensorsReader>> files_;
  std::map<std::string, size_t> file_of_name_;
};

}  // namespace ds::io
