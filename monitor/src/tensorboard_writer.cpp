#include "dstrain/monitor/tensorboard_writer.hpp"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <ctime>

#include "append_file.hpp"
#include "create_folder.hpp"
#include "dstrain/io/crc32c.hpp"

namespace ds::monitor {
namespace {

// Protobuf wire types.
constexpr uint32_t kVarint = 0, kFixed64 = 1, kLengthDelimited = 2, kFixed32 = 5;

void put_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

void put_little_endian(std::string& out, uint64_t value, int bytes) {
  for (int i = 0; i < bytes; ++i) out.push_back(static_cast<char>((value >> (8 * i)) & 0xff));
}

void put_key(std::string& out, uint32_t field, uint32_t wire_type) { put_varint(out, (field << 3) | wire_type); }

void put_bytes(std::string& out, uint32_t field, const std::string& bytes) {
  put_key(out, field, kLengthDelimited);
  put_varint(out, bytes.size());
  out += bytes;
}

void put_double(std::string& out, uint32_t field, double value) {
  uint64_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed64);
  put_little_endian(out, bits, 8);
}

void put_float(std::string& out, uint32_t field, float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  put_key(out, field, kFixed32);
  put_little_endian(out, bits, 4);
}

// tensorflow.Event with its wall_time, step and either file_version or a summary.
std::string event_header(int64_t step) {
  std::string event;
  const double now = std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
  put_double(event, 1, now);
  put_key(event, 2, kVarint);
  put_varint(event, static_cast<uint64_t>(step));  // int64: two's complement, as protobuf
  return event;
}

std::string summary_of(const std::vector<Event>& events) {
  std::string summary;
  for (const Event& e : events) {
    std::string value;
    put_bytes(value, 1, e.name);
    put_float(value, 2, static_cast<float>(e.value));
    put_bytes(summary, 1, value);
  }
  return summary;
}

// TensorFlow masks the CRCs it stores, since a CRC over data that holds CRCs is weak.
uint32_t masked_crc(const std::string& bytes) {
  const uint32_t crc = io::crc32c(0, bytes.data(), bytes.size());
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

std::string record(const std::string& data) {
  std::string length;
  put_little_endian(length, data.size(), 8);
  std::string out = length;
  put_little_endian(out, masked_crc(length), 4);
  out += data;
  put_little_endian(out, masked_crc(data), 4);
  return out;
}

std::string event_file_name() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  return "events.out.tfevents." + std::to_string(std::time(nullptr)) + "." + host + "." + std::to_string(::getpid());
}

}  // namespace

TensorBoardWriter::TensorBoardWriter(std::string folder) {
  create_folder(folder);
  path_ = folder + "/" + event_file_name();
  file_ = std::make_unique<AppendFile>(path_);
  std::string first = event_header(0);
  put_bytes(first, 3, "brain.Event:2");
  file_->append(record(first));
}

TensorBoardWriter::~TensorBoardWriter() = default;

void TensorBoardWriter::write_events(int64_t step, const std::vector<Event>& events) {
  std::string event = event_header(step);
  put_bytes(event, 5, summary_of(events));
  file_->append(record(event));
}

}  // namespace ds::monitor
