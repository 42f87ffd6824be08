// TensorBoardWriter: DeepSpeed's tensorboard monitor without TensorFlow or protobuf. It writes one
// event file, events.out.tfevents.<unix seconds>.<hostname>.<pid> (the pid, as PyTorch's
// SummaryWriter adds, keeps two runs started in the same second apart), in TFRecord framing:
//   uint64 length | uint32 masked CRC-32C of the length | data | uint32 masked CRC-32C of the data
// (little-endian; masked as TensorFlow: ((crc >> 15) | (crc << 17)) + 0xa282ead8). Each record's
// data is a tensorflow.Event encoded by hand: wall_time (field 1, double), step (2, int64),
// file_version (3, "brain.Event:2", the first record only) and summary (5): one Summary.Value per
// event, tag (1, string) and simple_value (2, float).
#pragma once

#include <memory>
#include <string>

#include "dstrain/monitor/monitor.hpp"

namespace ds::monitor {

class AppendFile;

class TensorBoardWriter : public Monitor {
 public:
  // Creates `folder` (and its parents) and the event file with its file_version record; ds::Error
  // with the path if it cannot.
  explicit TensorBoardWriter(std::string folder);
  ~TensorBoardWriter() override;

  // One Event record holding every event as a scalar at `step`.
  void write_events(int64_t step, const std::vector<Event>& events) override;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::unique_ptr<AppendFile> file_;
};

}  // namespace ds::monitor
