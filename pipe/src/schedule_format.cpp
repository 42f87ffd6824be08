#include "dstrain/pipe/schedule_format.hpp"

#include <algorithm>
#include <cstdio>
#include <memory>
#include <numeric>
#include <vector>

namespace ds::pipe {

namespace {

using Row = std::vector<std::string>;

// "F3", "B3", "F3B3" when a step does both (data parallel), "." when it computes nothing.
std::string work_label(const PipeSchedule& schedule, int step_id) {
  std::string label;
  for (const Instruction& instruction : schedule.steps()[step_id]) {
    if (instruction.op == Op::ForwardPass) label += "F" + std::to_string(schedule.micro_batch_id(step_id));
    if (instruction.op == Op::BackwardPass) label += "B" + std::to_string(schedule.micro_batch_id(step_id));
  }
  return label.empty() ? "." : label;
}

// Left-aligned columns two spaces apart, as wide as their widest cell; no trailing blanks.
std::string render_table(const std::vector<Row>& rows) {
  std::vector<size_t> widths;
  for (const Row& row : rows) {
    widths.resize(std::max(widths.size(), row.size()), 0);
    for (size_t column = 0; column < row.size(); ++column) widths[column] = std::max(widths[column], row[column].size());
  }
  std::string out;
  for (const Row& row : rows) {
    std::string line;
    for (size_t column = 0; column < row.size(); ++column) {
      line += row[column];
      if (column + 1 < row.size()) line += std::string(widths[column] - row[column].size() + 2, ' ');
    }
    line.erase(line.find_last_not_of(' ') + 1);
    out += line + "\n";
  }
  return out;
}

}  // namespace

nlohmann::ordered_json to_json(const PipeSchedule& schedule) {
  nlohmann::ordered_json steps = nlohmann::ordered_json::array();
  for (const Step& step : schedule) {
    nlohmann::ordered_json instructions = nlohmann::ordered_json::array();
    for (const Instruction& instruction : step) {
      nlohmann::ordered_json entry = {{"op", to_string(instruction.op)}};
      if (is_buffer_op(instruction.op)) entry["buffer_id"] = instruction.buffer_id;
      instructions.push_back(std::move(entry));
    }
    steps.push_back(std::move(instructions));
  }
  return {{"num_pipe_buffers", schedule.num_pipe_buffers()}, {"steps", std::move(steps)}};
}

std::string format_steps(const PipeSchedule& schedule) {
  const int num_steps = static_cast<int>(schedule.steps().size());
  std::string out = "stage " + std::to_string(schedule.stage()) + " of " + std::to_string(schedule.num_stages()) +
                    ": micro-batches " + std::to_string(schedule.num_micro_batches()) + ", steps " +
                    std::to_string(num_steps) + ", pipe buffers " + std::to_string(schedule.num_pipe_buffers()) + "\n";
  std::vector<Row> rows = {{"step", "work", "instructions"}};
  for (int step_id = 0; step_id < num_steps; ++step_id) {
    std::string instructions;
    for (const Instruction& instruction : schedule.steps()[step_id]) {
      instructions += (instructions.empty() ? "" : ", ") + to_string(instruction);
    }
    rows.push_back({std::to_string(step_id), work_label(schedule, step_id), instructions});
  }
  return out + render_table(rows);
}

std::string format_timeline(ScheduleKind kind, int micro_batches, int stages) {
  std::vector<std::unique_ptr<PipeSchedule>> schedules;
  schedules.push_back(make_schedule(kind, micro_batches, stages, 0));  // throws on a bad shape
  for (int stage_id = 1; stage_id < stages; ++stage_id) {
    schedules.push_back(make_schedule(kind, micro_batches, stages, stage_id));
  }
  // Every stage of a pipeline runs the same number of steps; that is what keeps them in lockstep.
  const int num_steps = static_cast<int>(schedules.front()->steps().size());

  std::vector<Row> rows{Row{"step"}};
  for (int stage_id = 0; stage_id < stages; ++stage_id) rows[0].push_back("stage " + std::to_string(stage_id));
  std::vector<int> idle(stages, 0);
  for (int step_id = 0; step_id < num_steps; ++step_id) {
    Row row{std::to_string(step_id)};
    for (int stage_id = 0; stage_id < stages; ++stage_id) {
      row.push_back(work_label(*schedules[stage_id], step_id));
      if (row.back() == ".") ++idle[stage_id];
    }
    rows.push_back(std::move(row));
  }
  Row idle_row{"idle"};
  for (int count : idle) idle_row.push_back(std::to_string(count) + "/" + std::to_string(num_steps));
  rows.push_back(std::move(idle_row));

  const int total_idle = std::accumulate(idle.begin(), idle.end(), 0);
  const int stage_steps = stages * num_steps;
  char bubble[96];
  std::snprintf(bubble, sizeof bubble, "bubble: %d of %d stage-steps idle (%.1f%%)\n", total_idle, stage_steps,
                100.0 * total_idle / stage_steps);
  const std::string header = to_string(kind) + " schedule: stages " + std::to_string(stages) + ", micro-batches " +
                             std::to_string(micro_batches) + ", steps " + std::to_string(num_steps) +
                             "\nF<k> / B<k>: forward / backward of micro-batch k, .: idle\n";
  return header + render_table(rows) + bubble;
}

}  // namespace ds::pipe
