// Safetensors files against an independent writer and reader: a few lines of Python (struct, json,
// numpy; the tests' Python, tests/support/python.hpp) write files our reader must read (dtypes, padding, metadata, a sharded
// folder) and read the files our writer makes. Malformed headers fail naming the file and tensor.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <optional>

#include "dstrain/io/safetensors.hpp"
#include "dstrain/runtime/error.hpp"
#include "io_test_support.hpp"
#include "python.hpp"

using namespace ds::io;
using namespace ds::io::testing;

namespace {

// The writer of the format as its specification reads, independent of ours: the header unpadded
// (or with `pad` spaces), tensors in the order given.
const char* const kPythonWriter = R"PY(
import json, struct, numpy as np

def write(path, tensors, metadata=None, pad=0):
    header, blobs, offset = {}, [], 0
    for name, dtype, array in tensors:
        data = array.tobytes()
        header[name] = {"dtype": dtype, "shape": list(array.shape), "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    if metadata is not None:
        header["__metadata__"] = metadata
    text = json.dumps(header).encode() + b" " * pad
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for data in blobs:
            f.write(data)

def bf16(values):
    return (np.array(values, dtype="<f4").view("<u4") >> 16).astype("<u2")
)PY";

void run_python(const TempDir& dir, const std::string& body) {
  const std::string script = dir.file("script.py");
  std::ofstream(script) << kPythonWriter << body;
  const std::string command = ds::testing::python() + " " + script + " " + dir.path();
  REQUIRE(std::system(command.c_str()) == 0);
}

std::optional<ds::Error> error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const ds::Error& e) {
    return e;
  }
  return std::nullopt;
}

// A safetensors file from a header text and `data_bytes` zero bytes of data.
void write_raw(const std::string& path, const std::string& header, size_t data_bytes, int64_t declared_length = -1) {
  std::ofstream out(path, std::ios::binary);
  const uint64_t length = declared_length >= 0 ? static_cast<uint64_t>(declared_length) : header.size();
  for (int i = 0; i < 8; ++i) out.put(static_cast<char>(length >> (8 * i)));
  out << header << std::string(data_bytes, '\0');
}

template <class T>
std::vector<T> read_as(const SafetensorsReader& in, const std::string& name) {
  const SafetensorsTensor* tensor = in.header().find(name);
  REQUIRE(tensor != nullptr);
  std::vector<T> values(static_cast<size_t>(tensor->bytes()) / sizeof(T));
  in.read(*tensor, values.data());
  return values;
}

}  // namespace

TEST_CASE("safetensors written by Python read back: dtypes, shapes, padding, metadata", "[io][safetensors]") {
  TempDir dir;
  run_python(dir, R"PY(
import sys
out = sys.argv[1]
write(out + "/model.safetensors", [
    ("w.f32", "F32", (np.arange(12, dtype="<f4") * 0.25).reshape(3, 4)),
    ("empty", "F32", np.zeros((0, 5), dtype="<f4")),
    ("w.f16", "F16", (np.arange(6, dtype="<f4") - 1.5).astype("<f2").reshape(2, 3)),
    ("w.bf16", "BF16", bf16([1.0, -2.0, 0.5])),
    ("ids", "I64", np.array([[-1, 2**40], [7, 0]], dtype="<i8")),
    ("scalar", "F32", np.array(3.0, dtype="<f4")),
], metadata={"format": "pt", "note": "python"}, pad=5)
)PY");
  SafetensorsReader in(dir.file("model.safetensors"));
  REQUIRE(in.header().tensors.size() == 6);
  REQUIRE(in.header().metadata == std::map<std::string, std::string>{{"format", "pt"}, {"note", "python"}});
  const SafetensorsTensor& f32 = *in.header().find("w.f32");
  REQUIRE(f32.dtype == "F32");
  REQUIRE(f32.shape == std::vector<int64_t>{3, 4});
  const std::vector<float> quarters = read_as<float>(in, "w.f32");
  for (size_t i = 0; i < 12; ++i) REQUIRE(quarters[i] == 0.25f * static_cast<float>(i));
  REQUIRE(in.header().find("empty")->shape == std::vector<int64_t>{0, 5});
  REQUIRE(in.header().find("empty")->bytes() == 0);
  // IEEE half: -1.5, -0.5, 0.5, 1.5, 2.5, 3.5; bfloat16: the top halves of 1, -2 and 0.5 in fp32.
  REQUIRE(read_as<uint16_t>(in, "w.f16") == std::vector<uint16_t>{0xBE00, 0xB800, 0x3800, 0x3E00, 0x4100, 0x4300});
  REQUIRE(read_as<uint16_t>(in, "w.bf16") == std::vector<uint16_t>{0x3F80, 0xC000, 0x3F00});
  REQUIRE(read_as<int64_t>(in, "ids") == std::vector<int64_t>{-1, int64_t{1} << 40, 7, 0});
  REQUIRE(in.header().find("scalar")->shape.empty());
  REQUIRE(read_as<float>(in, "scalar") == std::vector<float>{3.0f});
}

TEST_CASE("a sharded folder: the index decides which shard holds each tensor", "[io][safetensors]") {
  TempDir dir;
  run_python(dir, R"PY(
import sys
out = sys.argv[1]
write(out + "/model-00001-of-00002.safetensors",
      [("a", "F32", np.full(4, 1.0, dtype="<f4")), ("b", "F32", np.full(2, 2.0, dtype="<f4"))])
write(out + "/model-00002-of-00002.safetensors",
      [("c", "F32", np.full(3, 3.0, dtype="<f4")), ("stray", "F32", np.full(1, 9.0, dtype="<f4"))])
json.dump({"metadata": {"total_size": 36},
           "weight_map": {"a": "model-00001-of-00002.safetensors", "b": "model-00001-of-00002.safetensors",
                          "c": "model-00002-of-00002.safetensors"}},
          open(out + "/model.safetensors.index.json", "w"))
)PY");
  SafetensorsFolder folder(dir.path());
  REQUIRE(folder.names() == std::vector<std::string>{"a", "b", "c"});
  REQUIRE(folder.file_of("c") == dir.file("model-00002-of-00002.safetensors"));
  std::vector<float> c(3);
  folder.read("c", c.data());
  REQUIRE(c == std::vector<float>{3, 3, 3});
  std::vector<float> b(2);
  folder.read("b", b.data());
  REQUIRE(b == std::vector<float>{2, 2});
  const auto missing = error_of([&] { folder.tensor("stray"); });
  REQUIRE(missing);
  REQUIRE_THAT(missing->what(), Catch::Contains("no tensor 'stray'") && Catch::Contains(dir.path()));

  // An index naming a tensor its shard does not hold, or a file outside the folder.
  std::ofstream(dir.file("model.safetensors.index.json"))
      << R"({"weight_map": {"a": "model-00001-of-00002.safetensors", "d": "model-00002-of-00002.safetensors"}})";
  const auto absent = error_of([&] { SafetensorsFolder again(dir.path()); });
  REQUIRE(absent);
  REQUIRE_THAT(absent->what(), Catch::Contains("tensor 'd'") && Catch::Contains("model-00002-of-00002.safetensors"));
  std::ofstream(dir.file("model.safetensors.index.json")) << R"({"weight_map": {"a": "../model.safetensors"}})";
  const auto outside = error_of([&] { SafetensorsFolder again(dir.path()); });
  REQUIRE(outside);
  REQUIRE_THAT(outside->what(), Catch::Contains("not a file of this folder") &&
                                    Catch::Contains("model.safetensors.index.json"));
}

TEST_CASE("our writer's files read in Python with struct, json and numpy", "[io][safetensors]") {
  TempDir dir;
  std::vector<SafetensorsTensor> tensors = {{"weight", "F32", {2, 3}}, {"ids", "I64", {4}}, {"mask", "U8", {5}}};
  SafetensorsWriter out(dir.file("ours.safetensors"), tensors);
  const float weight[6] = {-1.0f, 0.5f, 2.0f, 3.5f, 5.0f, 6.5f};
  const int64_t ids[4] = {-3, 0, int64_t{1} << 50, 9};
  const uint8_t mask[5] = {1, 2, 3, 4, 5};
  // Cut across tensor boundaries: the writer takes the data in any pieces.
  std::vector<char> data(sizeof weight + sizeof ids + sizeof mask);
  std::memcpy(data.data(), weight, sizeof weight);
  std::memcpy(data.data() + sizeof weight, ids, sizeof ids);
  std::memcpy(data.data() + sizeof weight + sizeof ids, mask, sizeof mask);
  out.append(data.data(), 10);
  out.append(data.data() + 10, static_cast<int64_t>(data.size()) - 10);
  REQUIRE_FALSE(std::filesystem::exists(dir.file("ours.safetensors")));  // only once finished
  out.finish();
  run_python(dir, R"PY(
import sys
path = sys.argv[1] + "/ours.safetensors"
raw = open(path, "rb").read()
(n,) = struct.unpack("<Q", raw[:8])
assert (8 + n) % 8 == 0, n
header = json.loads(raw[8:8 + n])
assert header.pop("__metadata__") == {"format": "pt"}
data = raw[8 + n:]
def tensor(name, dtype):
    entry = header[name]
    begin, end = entry["data_offsets"]
    return np.frombuffer(data[begin:end], dtype=dtype).reshape(entry["shape"])
assert (tensor("weight", "<f4") == np.array([[-1, 0.5, 2], [3.5, 5, 6.5]], dtype="<f4")).all()
assert tensor("ids", "<i8").tolist() == [-3, 0, 2**50, 9]
assert tensor("mask", "u1").tolist() == [1, 2, 3, 4, 5]
assert header["weight"]["dtype"] == "F32" and header["ids"]["dtype"] == "I64" and header["mask"]["dtype"] == "U8"
assert max(e["data_offsets"][1] for e in header.values()) == len(data)
)PY");
}

TEST_CASE("the writer refuses too much or too little data and leaves nothing unfinished", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("w.safetensors");
  const float four[4] = {1, 2, 3, 4};
  {
    SafetensorsWriter out(path, {{"x", "F32", {3}}});
    const auto over = error_of([&] { out.append(four, sizeof four); });
    REQUIRE(over);
    REQUIRE_THAT(over->what(), Catch::Contains("more data than the tensors hold") && Catch::Contains(path));
    out.append(four, 8);
    const auto under = error_of([&] { out.finish(); });
    REQUIRE(under);
    REQUIRE_THAT(under->what(), Catch::Contains("8 of the tensors' 12 data bytes"));
  }
  REQUIRE(std::filesystem::is_empty(dir.path()));
  const auto dtype = error_of([&] { SafetensorsWriter out(path, {{"x", "F31", {3}}}); });
  REQUIRE(dtype);
  REQUIRE_THAT(dtype->what(), Catch::Contains("tensor 'x' has unknown dtype 'F31'"));
  const auto twice = error_of([&] { SafetensorsWriter out(path, {{"x", "F32", {1}}, {"x", "F32", {1}}}); });
  REQUIRE(twice);
  REQUIRE_THAT(twice->what(), Catch::Contains("'x' is used twice"));
}

TEST_CASE("malformed safetensors headers fail naming the file and the tensor", "[io][safetensors]") {
  TempDir dir;
  const std::string path = dir.file("bad.safetensors");
  struct Case {
    const char* header;
    size_t data_bytes;
    const char* expected;
  };
  const Case cases[] = {
      {R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
           "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})", 12, "tensor 'b' overlaps 'a'"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]},
           "b": {"dtype": "F32", "shape": [1], "data_offsets": [8, 12]}})", 12, "bytes 4..8 of the data belong to no tensor"},
      {R"({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 16]}})", 8, "tensor 'a' ends at byte 16 of the data, the file holds 8"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4]}})", 8, "4 bytes after the last tensor"},
      {R"({"a": {"dtype": "F17", "shape": [1], "data_offsets": [0, 4]}})", 4, "tensor 'a' has unknown dtype 'F17'"},
      {R"({"a": {"dtype": "F32", "shape": [3], "data_offsets": [0, 8]}})", 8, "tensor 'a' holds 8 bytes, its dtype and shape need 12"},
      {R"({"a": {"dtype": "F32", "shape": [4611686018427387904, 4], "data_offsets": [0, 8]}})", 8, "tensor 'a' has a shape too large"},
      {R"({"a": {"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]}})", 4, "tensor 'a' shape entry is not a non-negative integer"},
      {R"({"a": {"dtype": "F32", "shape": [1], "data_offsets": [8, 4]}})", 8, "tensor 'a' ends before it begins"},
      {R"({"a": {"dtype": "F32", "shape": [1]}})", 4, "tensor 'a' has no data_offsets"},
      {R"({"__metadata__": {"format": 3}})", 0, "__metadata__ 'format' is not a string"},
      {R"([1, 2])", 0, "not a JSON object"},
      {R"({"a": )", 0, "not a JSON object"},
  };
  for (const Case& c : cases) {
    INFO(c.header);
    write_raw(path, c.header, c.data_bytes);
    const auto error = error_of([&] { SafetensorsReader in(path); });
    REQUIRE(error);
    REQUIRE_THAT(error->what(), Catch::Contains(c.expected) && Catch::Contains(path));
  }
  write_raw(path, "{}", 0, /*declared_length=*/1000);
  const auto long_header = error_of([&] { SafetensorsReader in(path); });
  REQUIRE(long_header);
  REQUIRE_THAT(long_header->what(), Catch::Contains("header length 1000 exceeds the file"));
  std::ofstream(path) << "abc";
  const auto tiny = error_of([&] { SafetensorsReader in(path); });
  REQUIRE(tiny);
  REQUIRE_THAT(tiny->what(), Catch::Contains("not a safetensors file: 3 bytes"));
}
