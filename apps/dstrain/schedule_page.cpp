#include "schedule_page.hpp"

#include <cstdio>
#include <memory>
#include <vector>

#include "dstrain/plot/grid_chart.hpp"
#include "dstrain/plot/html_page.hpp"

namespace ds::app {
namespace {

using pipe::Op;

// The legend's kinds; sends and receives of activations and of gradients share a colour each.
const std::vector<plot::GridKind> kKinds = {
    {"Load", "#999999"}, {"Forward", "#56B4E9"}, {"Backward", "#E69F00"}, {"Send", "#009E73"},
    {"Recv", "#CC79A7"}, {"Reduce", "#F0E442"},  {"Optimizer", "#D55E00"},
};

int kind_of(Op op) {
  switch (op) {
    case Op::LoadMicroBatch: return 0;
    case Op::ForwardPass: return 1;
    case Op::BackwardPass: return 2;
    case Op::SendActivation:
    case Op::SendGrad: return 3;
    case Op::RecvActivation:
    case Op::RecvGrad: return 4;
    case Op::ReduceTiedGrads:
    case Op::ReduceGrads: return 5;
    case Op::OptimizerStep: return 6;
  }
  return 0;
}

}  // namespace

std::string schedule_page(pipe::ScheduleKind kind, int micro_batches, int stages) {
  const std::string title = to_string(kind) + " schedule: stages " + std::to_string(stages) + ", micro-batches " +
                            std::to_string(micro_batches);
  plot::GridChart chart{title, "step", {}, {}, kKinds};
  int idle = 0, stage_steps = 0;
  for (int stage_id = 0; stage_id < stages; ++stage_id) {
    const auto schedule = pipe::make_schedule(kind, micro_batches, stages, stage_id);
    chart.row_labels.push_back("stage " + std::to_string(stage_id));
    std::vector<plot::GridCell> row;
    for (size_t step_id = 0; step_id < schedule->steps().size(); ++step_id) {
      plot::GridCell cell;
      for (const pipe::Instruction& instruction : schedule->steps()[step_id]) {
        cell.segments.push_back({kind_of(instruction.op), to_string(instruction)});
        // F<k> / B<k> as `dstrain schedule` prints them: the micro-batch this step computes.
        if (instruction.op == Op::ForwardPass || instruction.op == Op::BackwardPass)
          cell.text += (instruction.op == Op::ForwardPass ? "F" : "B") +
                       std::to_string(schedule->micro_batch_id(static_cast<int>(step_id)));
      }
      idle += cell.text.empty();
      ++stage_steps;
      row.push_back(std::move(cell));
    }
    chart.cells.push_back(std::move(row));
  }
  plot::HtmlPage page("dstrain schedule");
  page.add_svg(plot::render_svg(chart));
  char bubble[128];
  std::snprintf(bubble, sizeof bubble, "Bubble: %d of %d stage-steps compute nothing (%.1f%%).", idle, stage_steps,
                100.0 * idle / stage_steps);
  page.add_text(std::string(bubble) + " F<k> / B<k>: forward / backward of micro-batch k; hover a segment for its "
                                      "instruction.");
  return page.html();
}

}  // namespace ds::app
