// TensorBoardWriter read back by an independent reader (read_tfevents.py: Python's struct only, its
// own CRC-32C table, the protobuf fields decoded by hand): the framing and both CRCs of every
// record, the file_version record first, then each step's tags and values as the float given.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <random>

#include "caught_error.hpp"
#include "dstrain/monitor/tensorboard_writer.hpp"
#include "monitor_test_support.hpp"

using ds::monitor::Event;
using ds::monitor::TensorBoardWriter;
using namespace ds::monitor::test;

namespace {

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

void flip_byte(const std::string& path, std::streamoff offset) {
  std::fstream file(path, std::ios::in | std::ios::out | std::ios::binary);
  file.seekg(offset);
  const char byte = static_cast<char>(file.get() ^ 0x20);
  file.seekp(offset);
  file.put(byte);
}

}  // namespace

TEST_CASE("tensorboard: the reader gets back every step's tags and values, CRCs checked", "[monitor]") {
  ScratchFolder scratch;
  const double before = now_seconds();
  std::mt19937_64 random(11);
  std::normal_distribution<double> value(0.0, 100.0);
  std::vector<std::pair<int64_t, std::vector<Event>>> written;
  std::string path;
  {
    TensorBoardWriter writer(scratch.path() + "/logs/job");
    path = writer.path();
    // Steps past 2^31 and long tags take multi-byte varints.
    for (int64_t step : {int64_t{0}, int64_t{64}, int64_t{3} << 33}) {
      std::vector<Event> events = {{"Train/Samples/train_loss", value(random)},
                                   {"Train/Samples/lr", value(random) * 1e-6},
                                   {"Train/Samples/" + std::string(200, 'x'), value(random)}};
      writer.write_events(step, events);
      written.emplace_back(step, events);
    }
  }
  const double after = now_seconds();
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  const auto files = files_starting_with(scratch.path() + "/logs/job", "events.out.tfevents.");
  REQUIRE(files == std::vector<std::string>{path});
  CHECK(path.find(std::string(".") + host + "." + std::to_string(::getpid())) != std::string::npos);

  const ReaderResult read = read_event_file(path);
  INFO(read.output);
  REQUIRE(read.status == 0);
  REQUIRE(read.events.size() == written.size() + 1);
  CHECK(read.events[0]["file_version"] == "brain.Event:2");
  CHECK(read.events[0]["step"] == 0);
  for (const auto& event : read.events) {
    CHECK(event["wall_time"].get<double>() >= before - 1e-3);
    CHECK(event["wall_time"].get<double>() <= after + 1e-3);
  }
  for (size_t i = 0; i < written.size(); ++i) {
    const auto& event = read.events[i + 1];
    CHECK_FALSE(event.contains("file_version"));
    CHECK(event["step"].get<int64_t>() == written[i].first);
    const auto& values = event["values"];
    REQUIRE(values.size() == written[i].second.size());
    for (size_t v = 0; v < values.size(); ++v) {
      CHECK(values[v][0].get<std::string>() == written[i].second[v].name);
      // simple_value is a float: the reader's value is the double's nearest float, exactly.
      CHECK(values[v][1].get<double>() == static_cast<double>(static_cast<float>(written[i].second[v].value)));
    }
  }
}

TEST_CASE("tensorboard: the reader refuses a flipped bit in a length or in the data", "[monitor]") {
  ScratchFolder scratch;
  std::string path;
  {
    TensorBoardWriter writer(scratch.path());
    path = writer.path();
    writer.write_events(5, {{"Train/Samples/train_loss", 2.5}});
  }
  REQUIRE(read_event_file(path).status == 0);
  const std::string original = [&] {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }();
  const std::streamoff second_record = 16 + static_cast<std::streamoff>(original[0] & 0xff);
  for (const auto& [offset, message] : {std::pair{second_record + 1, "length CRC mismatch"},
                                        std::pair{second_record + 20, "data CRC mismatch"}}) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << original;
    flip_byte(path, offset);
    const ReaderResult read = read_event_file(path);
    CHECK(read.status == 1);
    CHECK_THAT(read.output, Catch::Contains(message));
  }
}

TEST_CASE("tensorboard: a process killed after a step keeps that step's event", "[monitor]") {
  ScratchFolder scratch;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    TensorBoardWriter writer(scratch.path());
    for (int step = 1; step <= 3; ++step) writer.write_events(step, {{"Train/Samples/train_loss", step * 0.5}});
    ::kill(::getpid(), SIGKILL);
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  const auto files = files_starting_with(scratch.path(), "events.out.tfevents.");
  REQUIRE(files.size() == 1);
  const ReaderResult read = read_event_file(files[0]);
  INFO(read.output);
  REQUIRE(read.status == 0);
  REQUIRE(read.events.size() == 4);
  for (int step = 1; step <= 3; ++step) {
    CHECK(read.events[step]["step"] == step);
    CHECK(read.events[step]["values"][0][1].get<double>() == step * 0.5);
  }
}

TEST_CASE("tensorboard: an uncreatable folder is an error naming the path", "[monitor]") {
  ScratchFolder scratch;
  std::ofstream(scratch.path() + "/file") << "x";
  const ds::Error error = caught_error([&] { TensorBoardWriter writer(scratch.path() + "/file/sub"); });
  CHECK(error.path() == scratch.path() + "/file/sub");
}
