// MonitorSet: DeepSpeed's tensorboard and csv_monitor blocks choose what is written where.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "caught_error.hpp"
#include "dstrain/monitor/monitor_set.hpp"
#include "monitor_test_support.hpp"

using ds::monitor::MonitorSet;
using nlohmann::json;
using namespace ds::monitor::test;
namespace fs = std::filesystem;

TEST_CASE("monitor set: each enabled block writes under output_path/job_name, on rank 0 only", "[monitor]") {
  ScratchFolder scratch;
  const json blocks = {
      {"tensorboard", {{"enabled", true}, {"output_path", scratch.path() + "/tb/"}, {"job_name", "run"}}},
      {"csv_monitor", {{"enabled", true}, {"output_path", scratch.path() + "/csv"}, {"job_name", "run"}}},
      {"wandb", {{"enabled", true}}}};
  MonitorSet other_rank(blocks, 1);
  CHECK(other_rank.empty());
  other_rank.write_events(4, {{"Train/Samples/train_loss", 1.0}});
  CHECK(fs::is_empty(scratch.path()));

  MonitorSet set(blocks, 0);
  REQUIRE(set.destinations().size() == 2);
  set.write_events(4, {{"Train/Samples/train_loss", 1.25}});
  CHECK(lines_of(scratch.path() + "/csv/run/Train_Samples_train_loss.csv") ==
        std::vector<std::string>{"step,train_loss", "4,1.25"});
  const auto events = files_starting_with(scratch.path() + "/tb/run", "events.out.tfevents.");
  REQUIRE(events.size() == 1);
  CHECK(set.destinations()[0] == "tensorboard events in " + events[0]);
  const ReaderResult read = read_event_file(events[0]);
  INFO(read.output);
  REQUIRE(read.status == 0);
  CHECK(read.events.back()["values"] == json::parse(R"([["Train/Samples/train_loss", 1.25]])"));
}

TEST_CASE("monitor set: disabled or absent blocks write nothing; DeepSpeed's defaults otherwise", "[monitor]") {
  ScratchFolder scratch;
  CHECK(MonitorSet(json::object(), 0).empty());
  const json disabled = {{"tensorboard", {{"enabled", false}, {"output_path", scratch.path()}}}, {"csv_monitor", nullptr}};
  CHECK(MonitorSet(disabled, 0).empty());
  CHECK(fs::is_empty(scratch.path()));
  // No output_path: the working folder; no job_name: DeepSpeedJobName.
  const fs::path previous = fs::current_path();
  fs::current_path(scratch.path());
  {
    MonitorSet set({{"csv_monitor", {{"enabled", true}}}}, 0);
    set.write_events(2, {{"Train/Samples/lr", 0.5}});
  }
  fs::current_path(previous);
  CHECK(lines_of(scratch.path() + "/DeepSpeedJobName/Train_Samples_lr.csv") ==
        std::vector<std::string>{"step,lr", "2,0.5"});
}

TEST_CASE("monitor set: bad blocks are errors naming the key, and the path they could not create", "[monitor]") {
  ScratchFolder scratch;
  CHECK(caught_error([] { MonitorSet({{"tensorboard", {{"enabled", true}, {"outputpath", "x"}}}}, 0); }).key() ==
        "tensorboard.outputpath");
  CHECK(caught_error([] { MonitorSet({{"csv_monitor", {{"enabled", "yes"}}}}, 1); }).key() == "csv_monitor.enabled");
  CHECK(caught_error([] { MonitorSet({{"csv_monitor", {{"job_name", 3}}}}, 0); }).key() == "csv_monitor.job_name");
  CHECK(caught_error([] { MonitorSet({{"tensorboard", true}}, 0); }).key() == "tensorboard");
  std::ofstream(scratch.path() + "/file") << "x";
  const ds::Error error = caught_error([&] {
    MonitorSet({{"tensorboard", {{"enabled", true}, {"output_path", scratch.path() + "/file"}, {"job_name", "j"}}}}, 0);
  });
  CHECK(error.key() == "tensorboard.output_path");
  CHECK(error.path() == scratch.path() + "/file/j");
}
