// WarmupCosineLR and LRRangeTest against lr_schedules_reference.py, a transcription of DeepSpeed's
// own formulas run by Debian's Python: every step of each trace, the warm-up edges included.
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dstrain/engine/optim/lr_schedule.hpp"
#include "dstrain/runtime/config.hpp"

namespace {

std::vector<double> reference_trace(const std::string& type, const nlohmann::json& params, double base_lr, int steps) {
  const std::string command = std::string("/usr/bin/python3 ") + DSTRAIN_SOURCE_DIR +
                              "/tests/engine/lr_schedules_reference.py " + type + " '" + params.dump() + "' " +
                              std::to_string(base_lr) + " " + std::to_string(steps);
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe);
  std::vector<double> trace;
  double lr = 0;
  while (std::fscanf(pipe, "%lf", &lr) == 1) trace.push_back(lr);
  REQUIRE(pclose(pipe) == 0);
  REQUIRE(trace.size() == static_cast<size_t>(steps));
  return trace;
}

// The config as a user writes it, read by ds::Config, so that the defaults are the reader's.
ds::SchedulerConfig scheduler(const std::string& type, const nlohmann::json& params) {
  nlohmann::json config = {{"train_batch_size", 1}, {"scheduler", {{"type", type}, {"params", params}}}};
  return ds::Config::from_json(config).scheduler();
}

void check_trace(const std::string& type, const nlohmann::json& params, double base_lr, int steps) {
  INFO(type << " " << params.dump() << " base lr " << base_lr);
  const ds::LrSchedule schedule(scheduler(type, params), base_lr);
  const std::vector<double> expected = reference_trace(type, params, base_lr, steps);
  for (int i = 0; i < steps; ++i) {
    INFO("iteration " << i);
    CHECK(schedule.lr(i) == Approx(expected[i]).epsilon(1e-12).margin(1e-300));
  }
}

}  // namespace

TEST_CASE("WarmupCosineLR is DeepSpeed's, warm-up edges and the floor after total_num_steps included", "[engine][lr]") {
  const double base_lr = 0.1;  // std::to_string keeps six digits: a base the reference reads exactly
  for (const nlohmann::json& params : {
           nlohmann::json{{"total_num_steps", 20}, {"warmup_num_steps", 5}},
           nlohmann::json{{"total_num_steps", 5}, {"warmup_num_steps", 5}},  // no cosine phase
           nlohmann::json{{"total_num_steps", 3}, {"warmup_num_steps", 5}},  // shorter than warm-up
           nlohmann::json{{"total_num_steps", 1}, {"warmup_num_steps", 1}},
           nlohmann::json{{"total_num_steps", 30}, {"warmup_num_steps", 4}, {"warmup_type", "linear"},
                          {"warmup_min_ratio", 0.25}, {"cos_min_ratio", 0.1}},
           nlohmann::json{{"total_num_steps", 12}},  // warm-up 1000: never leaves it
       })
    check_trace("WarmupCosineLR", params, base_lr, 40);
}

TEST_CASE("WarmupCosineLR with total == warmup gives cos_min_ratio x lr right after warm-up, and stays there",
          "[engine][lr]") {
  const ds::LrSchedule schedule(
      scheduler("WarmupCosineLR", {{"total_num_steps", 5}, {"warmup_num_steps", 5}, {"cos_min_ratio", 0.01}}), 0.5);
  CHECK(schedule.lr(4) == Approx(0.5));
  for (int i = 5; i < 50; ++i) CHECK(schedule.lr(i) == Approx(0.5 * 0.01));
}

TEST_CASE("LRRangeTest is DeepSpeed's, continuous and staircase", "[engine][lr]") {
  for (const nlohmann::json& params : {
           nlohmann::json::object(),
           nlohmann::json{{"lr_range_test_min_lr", 0.0001}, {"lr_range_test_step_size", 3},
                          {"lr_range_test_step_rate", 2.5}},
           nlohmann::json{{"lr_range_test_min_lr", 0.002}, {"lr_range_test_step_size", 4},
                          {"lr_range_test_step_rate", 0.5}, {"lr_range_test_staircase", true}},
       })
    check_trace("LRRangeTest", params, 0.1, 40);
}
