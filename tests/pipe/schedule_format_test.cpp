#include <catch2/catch.hpp>

#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "dstrain/pipe/schedule_format.hpp"
#include "dstrain/runtime/error.hpp"

using namespace ds::pipe;

namespace {

std::vector<std::string> lines_of(const std::string& text) {
  std::vector<std::string> lines;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> words_of(const std::string& line) {
  std::vector<std::string> words;
  std::istringstream in(line);
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

// Reads the JSON text back into steps, by the op names of the contract.
std::vector<Step> parse_steps(const std::string& text) {
  const std::map<std::string, Op> ops = {
      {"LoadMicroBatch", Op::LoadMicroBatch}, {"ForwardPass", Op::ForwardPass},
      {"BackwardPass", Op::BackwardPass},     {"SendActivation", Op::SendActivation},
      {"RecvActivation", Op::RecvActivation}, {"SendGrad", Op::SendGrad},
      {"RecvGrad", Op::RecvGrad},             {"ReduceTiedGrads", Op::ReduceTiedGrads},
      {"ReduceGrads", Op::ReduceGrads},       {"OptimizerStep", Op::OptimizerStep}};
  std::vector<Step> steps;
  const nlohmann::json parsed = nlohmann::json::parse(text);
  for (const auto& step : parsed.at("steps")) {
    steps.emplace_back();
    for (const auto& entry : step) {
      const Op op = ops.at(entry.at("op").get<std::string>());
      REQUIRE(entry.contains("buffer_id") == is_buffer_op(op));
      REQUIRE(entry.size() == (is_buffer_op(op) ? 2u : 1u));
      steps.back().push_back({op, entry.value("buffer_id", -1)});
    }
  }
  return steps;
}

}  // namespace

TEST_CASE("JSON of a schedule parses back into the same instruction stream", "[pipe]") {
  for (ScheduleKind kind : {ScheduleKind::Train, ScheduleKind::Inference, ScheduleKind::DataParallel}) {
    for (int stages = 1; stages <= 8; ++stages) {
      for (int micro_batches = 1; micro_batches <= 16; ++micro_batches) {
        for (int stage_id = 0; stage_id < stages; ++stage_id) {
          INFO(to_string(kind) << " stages " << stages << " micro-batches " << micro_batches << " stage " << stage_id);
          const auto schedule = make_schedule(kind, micro_batches, stages, stage_id);
          const std::string text = to_json(*schedule).dump();
          REQUIRE(parse_steps(text) == schedule->steps());
          REQUIRE(nlohmann::json::parse(text).at("num_pipe_buffers") == schedule->num_pipe_buffers());
        }
      }
    }
  }
}

TEST_CASE("JSON puts the op first and names buffers only on buffer ops", "[pipe]") {
  CHECK(to_json(DataParallelSchedule(1, 1, 0)).dump() ==
        R"({"num_pipe_buffers":1,"steps":[[{"op":"LoadMicroBatch","buffer_id":0},{"op":"ForwardPass","buffer_id":0},)"
        R"({"op":"BackwardPass","buffer_id":0},{"op":"ReduceGrads"},{"op":"OptimizerStep"}]]})");
}

TEST_CASE("Timeline shows each stage's passes at their 1F1B steps and the bubble", "[pipe]") {
  const int stages = GENERATE(1, 2, 4, 5);
  const int micro_batches = GENERATE(1, 3, 8);
  INFO("stages " << stages << ", micro-batches " << micro_batches);
  const int total_steps = 2 * (micro_batches + stages - 1);
  const std::vector<std::string> lines = lines_of(format_timeline(ScheduleKind::Train, micro_batches, stages));

  size_t row = 0;
  while (row < lines.size() && words_of(lines[row]).front() != "step") ++row;
  REQUIRE(row + total_steps + 2 < lines.size());
  CHECK(words_of(lines[row]).size() == static_cast<size_t>(1 + 2 * stages));  // "step" + "stage s" per stage
  for (int step = 0; step < total_steps; ++step) {
    const std::vector<std::string> cells = words_of(lines[row + 1 + step]);
    REQUIRE(cells.size() == static_cast<size_t>(1 + stages));
    CHECK(cells[0] == std::to_string(step));
    for (int stage = 0; stage < stages; ++stage) {
      std::string expected = ".";
      for (int k = 0; k < micro_batches; ++k) {
        if (step == 2 * k + stage) expected = "F" + std::to_string(k);
        if (step == 2 * k + 2 * stages - 1 - stage) expected = "B" + std::to_string(k);
      }
      CHECK(cells[1 + stage] == expected);
    }
  }
  // Each stage computes on 2 * micro_batches steps and idles on the other 2 * (stages - 1).
  const std::vector<std::string> idle = words_of(lines[row + 1 + total_steps]);
  REQUIRE(idle.size() == static_cast<size_t>(1 + stages));
  CHECK(idle[0] == "idle");
  for (int stage = 0; stage < stages; ++stage) {
    CHECK(idle[1 + stage] == std::to_string(2 * (stages - 1)) + "/" + std::to_string(total_steps));
  }
  CHECK_THAT(lines[row + 2 + total_steps],
             Catch::StartsWith("bubble: " + std::to_string(stages * 2 * (stages - 1)) + " of " +
                               std::to_string(stages * total_steps) + " stage-steps idle"));
}

TEST_CASE("Inference timeline runs micro-batch k on stage s at step k + s", "[pipe]") {
  const std::vector<std::string> lines = lines_of(format_timeline(ScheduleKind::Inference, 3, 3));
  size_t row = 0;
  while (row < lines.size() && words_of(lines[row]).front() != "step") ++row;
  for (int step = 0; step < 5; ++step) {
    const std::vector<std::string> cells = words_of(lines.at(row + 1 + step));
    for (int stage = 0; stage < 3; ++stage) {
      const int k = step - stage;
      CHECK(cells.at(1 + stage) == (0 <= k && k < 3 ? "F" + std::to_string(k) : std::string(".")));
    }
  }
}

TEST_CASE("Timeline refuses a shape that names no stage", "[pipe]") {
  CHECK_THROWS_AS(format_timeline(ScheduleKind::Train, 4, 0), ds::Error);
  CHECK_THROWS_AS(format_timeline(ScheduleKind::Inference, 0, 2), ds::Error);
}

TEST_CASE("Step listing shows every step's work and instructions in order", "[pipe]") {
  TrainSchedule schedule(4, 3, 1);
  const std::vector<std::string> lines = lines_of(format_steps(schedule));
  REQUIRE(lines.size() == 2 + schedule.steps().size());
  CHECK_THAT(lines[0], Catch::Contains("stage 1 of 3") && Catch::Contains("micro-batches 4") &&
                           Catch::Contains("pipe buffers " + std::to_string(schedule.num_pipe_buffers())));
  for (size_t step = 0; step < schedule.steps().size(); ++step) {
    const std::vector<std::string> words = words_of(lines[2 + step]);
    REQUIRE(words.size() >= 2);
    CHECK(words[0] == std::to_string(step));
    std::string instructions;
    for (size_t i = 2; i < words.size(); ++i) instructions += words[i];
    std::string expected;
    for (const Instruction& instruction : schedule.steps()[step]) {
      expected += (expected.empty() ? "" : ",") + to_string(instruction);
    }
    CHECK(instructions == expected);
  }
  // Stage 1 of 3 forwards micro-batch k at step 2k + 1 and backwards it at step 2k + 4.
  CHECK(words_of(lines[2 + 3])[1] == "F1");
  CHECK(words_of(lines[2 + 6])[1] == "B1");
  CHECK(words_of(lines[2 + 0])[1] == ".");
}
