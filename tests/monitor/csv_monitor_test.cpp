// CsvMonitor against DeepSpeed's csv_monitor layout: one file per event name, header
// "step,<last part of the name>", then "step,value" lines holding exactly the values given.
#include <catch2/catch.hpp>

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <map>
#include <random>

#include "caught_error.hpp"
#include "dstrain/monitor/csv_monitor.hpp"
#include "monitor_test_support.hpp"

using ds::monitor::CsvMonitor;
using ds::monitor::Event;
using namespace ds::monitor::test;

namespace {

// Each "step,value" line after the header, parsed.
std::vector<std::pair<int64_t, double>> rows_of(const std::vector<std::string>& lines) {
  std::vector<std::pair<int64_t, double>> rows;
  for (size_t i = 1; i < lines.size(); ++i) {
    const size_t comma = lines[i].find(',');
    REQUIRE(comma != std::string::npos);
    rows.emplace_back(std::stoll(lines[i].substr(0, comma)), std::stod(lines[i].substr(comma + 1)));
  }
  return rows;
}

}  // namespace

TEST_CASE("csv monitor: a file per event name, DeepSpeed's header, the values given exactly", "[monitor]") {
  ScratchFolder scratch;
  const std::string folder = scratch.path() + "/out/job";  // created with its parents
  const std::vector<std::string> names = {"Train/Samples/train_loss", "Train/Samples/lr", "loss scale"};
  std::mt19937_64 random(7);
  std::uniform_real_distribution<double> value(-1e3, 1e3);
  std::map<std::string, std::vector<std::pair<int64_t, double>>> written;
  {
    CsvMonitor monitor(folder);
    for (int64_t step = 16; step <= 16 * 5; step += 16) {
      std::vector<Event> events;
      for (const std::string& name : names) {
        // Values of every magnitude, so that no formatting rounds one.
        const double v = value(random) * std::pow(10.0, static_cast<int>(step / 16) * 3 - 9);
        events.push_back({name, v});
        written[name].emplace_back(step, v);
      }
      monitor.write_events(step, events);
    }
  }
  CHECK(CsvMonitor::file_name("Train/Samples/train_loss") == "Train_Samples_train_loss.csv");
  CHECK(files_starting_with(folder, "").size() == names.size());
  const std::map<std::string, std::pair<std::string, std::string>> expected = {
      {"Train/Samples/train_loss", {"Train_Samples_train_loss.csv", "step,train_loss"}},
      {"Train/Samples/lr", {"Train_Samples_lr.csv", "step,lr"}},
      {"loss scale", {"loss_scale.csv", "step,loss scale"}}};
  for (const auto& [name, file] : expected) {
    const auto lines = lines_of(folder + "/" + file.first);
    REQUIRE(lines.size() == 6);
    CHECK(lines[0] == file.second);
    CHECK(rows_of(lines) == written[name]);
  }
}

TEST_CASE("csv monitor: a resumed run appends to the files without a second header", "[monitor]") {
  ScratchFolder scratch;
  CsvMonitor(scratch.path()).write_events(8, {{"Train/Samples/lr", 0.5}});
  CsvMonitor(scratch.path()).write_events(16, {{"Train/Samples/lr", 0.25}});
  const auto lines = lines_of(scratch.path() + "/Train_Samples_lr.csv");
  CHECK(lines == std::vector<std::string>{"step,lr", "8,0.5", "16,0.25"});
}

TEST_CASE("csv monitor: a process killed after a step keeps that step's lines", "[monitor]") {
  ScratchFolder scratch;
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    CsvMonitor monitor(scratch.path());
    for (int step = 1; step <= 3; ++step) monitor.write_events(step, {{"Train/Samples/train_loss", step * 1.5}});
    ::kill(::getpid(), SIGKILL);  // no destructor, no exit handler runs
  }
  int status = 0;
  REQUIRE(::waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  CHECK(lines_of(scratch.path() + "/Train_Samples_train_loss.csv") ==
        std::vector<std::string>{"step,train_loss", "1,1.5", "2,3", "3,4.5"});
}

TEST_CASE("csv monitor: an uncreatable folder and a full disk are errors naming the path", "[monitor]") {
  ScratchFolder scratch;
  const std::string file = scratch.path() + "/a_file";
  CsvMonitor(scratch.path()).write_events(1, {{"a_file", 1.0}});  // a_file.csv: a plain file
  std::filesystem::rename(file + ".csv", file);
  const ds::Error folder_error = caught_error([&] { CsvMonitor monitor(file + "/job"); });
  CHECK(folder_error.path() == file + "/job");

  // A file that takes no bytes: the monitor's file is a link to /dev/full.
  std::filesystem::create_symlink("/dev/full", scratch.path() + "/Train_Samples_lr.csv");
  CsvMonitor monitor(scratch.path());
  const ds::Error full = caught_error([&] { monitor.write_events(1, {{"Train/Samples/lr", 0.1}}); });
  CHECK(full.path() == scratch.path() + "/Train_Samples_lr.csv");
  CHECK(full.errnum() == ENOSPC);
}
