// DeepSpeed's own schedule tests (tests/unit/runtime/pipe/test_pipe_schedule.py), assertion for
// assertion, then small schedules worked out by hand from DeepSpeed's algorithm, which pin the
// order of the instructions inside a step.
#include <catch2/catch.hpp>

#include <algorithm>
#include <vector>

#include "dstrain/pipe/schedule.hpp"
#include "dstrain/runtime/error.hpp"

using namespace ds::pipe;

namespace {

long count_op(const Step& step, Op op) {
  return std::count_if(step.begin(), step.end(), [op](const Instruction& instruction) { return instruction.op == op; });
}

std::vector<Step> iterate(const PipeSchedule& schedule) { return {schedule.begin(), schedule.end()}; }

}  // namespace

TEST_CASE("DeepSpeed seed: inference schedule, single stage", "[pipe]") {
  InferenceSchedule schedule(4, 1, 0);
  REQUIRE(schedule.num_micro_batches() == 4);
  const std::vector<Step> full = iterate(schedule);
  for (const Step& cmds : full) {
    REQUIRE(cmds.size() == 2);
    CHECK(cmds[0].op == Op::LoadMicroBatch);
    CHECK(cmds[1].op == Op::ForwardPass);
    CHECK(cmds[0].buffer_id == cmds[1].buffer_id);
  }
  CHECK(full.size() == 4);
}

TEST_CASE("DeepSpeed seed: train schedule, single stage", "[pipe]") {
  TrainSchedule schedule(4, 1, 0);
  REQUIRE(schedule.num_micro_batches() == 4);
  const std::vector<Step> full = iterate(schedule);
  for (size_t idx = 0; idx < full.size(); ++idx) {
    const Step& cmds = full[idx];
    if (idx % 2 != 0) {
      REQUIRE((cmds.size() == 1 || cmds.size() == 4));
      CHECK(cmds[0].op == Op::BackwardPass);
    } else {
      REQUIRE(cmds.size() == 2);
      CHECK(cmds[0].op == Op::LoadMicroBatch);
      CHECK(cmds[1].op == Op::ForwardPass);
      CHECK(cmds[0].buffer_id == cmds[1].buffer_id);
    }
  }
  CHECK(full.size() == 2 * 4);
}

TEST_CASE("DeepSpeed seed: inference schedule, first stage", "[pipe]") {
  const int stages = 3;
  const int micro_batches = GENERATE(1, 3, 8, 10);
  InferenceSchedule schedule(micro_batches, stages, 0);
  REQUIRE(schedule.num_micro_batches() == micro_batches);
  const std::vector<Step> full = iterate(schedule);
  for (int idx = 0; idx < static_cast<int>(full.size()); ++idx) {
    INFO("step " << idx);
    const Step& cmds = full[idx];
    if (idx == 0) {  // no activation to send yet
      REQUIRE(cmds.size() == 2);
      CHECK(cmds[0].op == Op::LoadMicroBatch);
      CHECK(cmds[1].op == Op::ForwardPass);
      CHECK(cmds[0].buffer_id == cmds[1].buffer_id);
    } else if (idx == micro_batches) {  // the last active step only sends
      REQUIRE(cmds.size() == 1);
      CHECK(cmds[0].op == Op::SendActivation);
    } else if (idx > micro_batches) {
      CHECK(cmds.empty());
    } else {
      CHECK(cmds.size() == 3);
      CHECK(count_op(cmds, Op::LoadMicroBatch) == 1);
      CHECK(count_op(cmds, Op::ForwardPass) == 1);
      CHECK(count_op(cmds, Op::SendActivation) == 1);
    }
  }
  CHECK(full.size() == static_cast<size_t>(micro_batches + stages - 1));
}

TEST_CASE("DeepSpeed seed: inference schedule, middle stage", "[pipe]") {
  const int stages = 3;
  const int micro_batches = GENERATE(1, 3, 8, 10);
  InferenceSchedule schedule(micro_batches, stages, 1);
  const std::vector<Step> full = iterate(schedule);
  const int stage = schedule.stage();
  for (int idx = 0; idx < static_cast<int>(full.size()); ++idx) {
    INFO("step " << idx);
    const Step& cmds = full[idx];
    if (idx < stage) {
      CHECK(cmds.empty());
    } else if (idx == stage + micro_batches) {
      REQUIRE(cmds.size() == 1);
      CHECK(cmds[0].op == Op::SendActivation);
    } else if (idx > stage + micro_batches) {
      CHECK(cmds.empty());
    } else {
      CHECK(count_op(cmds, Op::LoadMicroBatch) == 0);
      CHECK(count_op(cmds, Op::ForwardPass) == 1);
      CHECK(count_op(cmds, Op::RecvActivation) == 1);
      if (idx > stage) CHECK(count_op(cmds, Op::SendActivation) == 1);
    }
  }
  CHECK(full.size() == static_cast<size_t>(micro_batches + stages - 1));
}

TEST_CASE("DeepSpeed seed: inference schedule, last stage", "[pipe]") {
  const int stages = 3;
  const int micro_batches = GENERATE(1, 3, 8, 10);
  InferenceSchedule schedule(micro_batches, stages, 2);
  const std::vector<Step> full = iterate(schedule);
  const int stage = schedule.stage();
  for (int idx = 0; idx < static_cast<int>(full.size()); ++idx) {
    INFO("step " << idx);
    const Step& cmds = full[idx];
    if (idx < stage || idx > stage + micro_batches) {
      CHECK(cmds.empty());
      continue;
    }
    CHECK(count_op(cmds, Op::LoadMicroBatch) == 1);
    CHECK(count_op(cmds, Op::ForwardPass) == 1);
    CHECK(count_op(cmds, Op::RecvActivation) == 1);
    CHECK(count_op(cmds, Op::SendActivation) == 0);
  }
  CHECK(full.size() == static_cast<size_t>(micro_batches + stages - 1));
}

TEST_CASE("DeepSpeed seed: train schedule, first stage", "[pipe]") {
  TrainSchedule schedule(8, 3, 0);
  for (const Step& cmds : schedule) {
    CHECK(count_op(cmds, Op::SendGrad) == 0);
    CHECK(count_op(cmds, Op::RecvActivation) == 0);
    for (const Instruction& instruction : cmds) {
      if (!is_buffer_op(instruction.op)) continue;
      CHECK(0 <= instruction.buffer_id);
      CHECK(instruction.buffer_id < schedule.num_pipe_buffers());
    }
  }
}

TEST_CASE("DeepSpeed seed: train schedule, last stage", "[pipe]") {
  TrainSchedule schedule(4, 3, 2);
  CHECK(iterate(schedule).size() == static_cast<size_t>(2 * (4 + 3 - 1)));
  for (const Step& cmds : schedule) {
    CHECK(count_op(cmds, Op::SendActivation) == 0);
    CHECK(count_op(cmds, Op::RecvGrad) == 0);
  }
}

TEST_CASE("DeepSpeed seed: stage queries", "[pipe]") {
  TrainSchedule first(4, 3, 0);
  CHECK(first.is_first_stage());
  CHECK_FALSE(first.is_last_stage());
  TrainSchedule middle(4, 3, 1);
  CHECK_FALSE(middle.is_first_stage());
  CHECK_FALSE(middle.is_last_stage());
  TrainSchedule last(4, 3, 2);
  CHECK_FALSE(last.is_first_stage());
  CHECK(last.is_last_stage());
}

// Worked by hand from DeepSpeed's TrainSchedule.steps() for 2 micro-batches over 2 stages:
// stage 0 forwards micro-batch k at step 2k and runs its backward at step 2k + 3, stage 1 at
// 2k + 1 and 2k + 2; both stages use 2 buffers.
TEST_CASE("Train schedule of 2 micro-batches over 2 stages, by hand", "[pipe]") {
  const Instruction reduce_tied{Op::ReduceTiedGrads}, reduce{Op::ReduceGrads}, optimizer{Op::OptimizerStep};
  const std::vector<Step> stage0 = {
      {{Op::LoadMicroBatch, 0}, {Op::ForwardPass, 0}},
      {{Op::SendActivation, 0}},
      {{Op::LoadMicroBatch, 1}, {Op::ForwardPass, 1}},
      {{Op::RecvGrad, 0}, {Op::SendActivation, 1}, {Op::BackwardPass, 0}},
      {},
      {{Op::RecvGrad, 1}, {Op::BackwardPass, 1}, reduce_tied, reduce, optimizer},
  };
  const std::vector<Step> stage1 = {
      {},
      {{Op::RecvActivation, 0}, {Op::LoadMicroBatch, 0}, {Op::ForwardPass, 0}},
      {{Op::BackwardPass, 0}},
      {{Op::SendGrad, 0}, {Op::RecvActivation, 1}, {Op::LoadMicroBatch, 1}, {Op::ForwardPass, 1}},
      {{Op::BackwardPass, 1}},
      {{Op::SendGrad, 1}, reduce_tied, reduce, optimizer},
  };
  TrainSchedule first(2, 2, 0);
  TrainSchedule last(2, 2, 1);
  CHECK(first.steps() == stage0);
  CHECK(last.steps() == stage1);
  CHECK(first.num_pipe_buffers() == 2);
  CHECK(last.num_pipe_buffers() == 2);
}

// Worked by hand from DeepSpeed's InferenceSchedule.steps() for 2 micro-batches over 2 stages:
// the even stage receives into buffer step % 2, the odd one into (step + 1) % 2.
TEST_CASE("Inference schedule of 2 micro-batches over 2 stages, by hand", "[pipe]") {
  const std::vector<Step> stage0 = {
      {{Op::LoadMicroBatch, 0}, {Op::ForwardPass, 0}},
      {{Op::LoadMicroBatch, 1}, {Op::SendActivation, 0}, {Op::ForwardPass, 1}},
      {{Op::SendActivation, 1}},
  };
  const std::vector<Step> stage1 = {
      {},
      {{Op::LoadMicroBatch, 0}, {Op::RecvActivation, 0}, {Op::ForwardPass, 0}},
      {{Op::LoadMicroBatch, 1}, {Op::RecvActivation, 1}, {Op::ForwardPass, 1}},
  };
  CHECK(InferenceSchedule(2, 2, 0).steps() == stage0);
  CHECK(InferenceSchedule(2, 2, 1).steps() == stage1);
}

// A stage of 3 over 4 stages runs odd (backward on even steps): worked by hand for 3 micro-batches,
// where its buffers number max(2, min(4 - 1, 3)) = 3 and micro-batch k uses buffer k % 3.
TEST_CASE("Train schedule of a middle stage, by hand", "[pipe]") {
  TrainSchedule schedule(3, 4, 1);
  REQUIRE(schedule.num_pipe_buffers() == 3);
  // Forward of k at step 2k + 1, backward at 2k + 6; 12 steps.
  const std::vector<Step> expected = {
      {},
      {{Op::RecvActivation, 0}, {Op::ForwardPass, 0}},
      {{Op::SendActivation, 0}},
      {{Op::RecvActivation, 1}, {Op::ForwardPass, 1}},
      {{Op::SendActivation, 1}},
      {{Op::RecvActivation, 2}, {Op::ForwardPass, 2}},
      {{Op::RecvGrad, 0}, {Op::SendActivation, 2}, {Op::BackwardPass, 0}},
      {{Op::SendGrad, 0}},
      {{Op::RecvGrad, 1}, {Op::BackwardPass, 1}},
      {{Op::SendGrad, 1}},
      {{Op::RecvGrad, 2}, {Op::BackwardPass, 2}},
      {{Op::SendGrad, 2}, {Op::ReduceTiedGrads}, {Op::ReduceGrads}, {Op::OptimizerStep}},
  };
  CHECK(schedule.steps() == expected);
}

TEST_CASE("Data-parallel schedule loads, forwards and backwards each micro-batch in one step", "[pipe]") {
  const int micro_batches = GENERATE(1, 2, 5);
  DataParallelSchedule schedule(micro_batches, 1, 0);
  CHECK(schedule.num_pipe_buffers() == 1);
  REQUIRE(schedule.steps().size() == static_cast<size_t>(micro_batches));
  for (int step_id = 0; step_id < micro_batches; ++step_id) {
    Step expected = {{Op::LoadMicroBatch, 0}, {Op::ForwardPass, 0}, {Op::BackwardPass, 0}};
    if (step_id == micro_batches - 1) {
      expected.push_back({Op::ReduceGrads});
      expected.push_back({Op::OptimizerStep});
    }
    CHECK(schedule.steps()[step_id] == expected);
    CHECK(schedule.micro_batch_id(step_id) == step_id);
  }
}

TEST_CASE("Train schedule buffers: in-flight micro-batches, between 2 and micro_batches", "[pipe]") {
  // Stage s holds the micro-batches it has forwarded but not yet backwarded: stages - s of them in
  // the steady state, fewer when the batch is shorter, and never fewer than 2 buffers.
  CHECK(TrainSchedule(8, 4, 0).num_pipe_buffers() == 4);
  CHECK(TrainSchedule(8, 4, 1).num_pipe_buffers() == 3);
  CHECK(TrainSchedule(8, 4, 2).num_pipe_buffers() == 2);
  CHECK(TrainSchedule(8, 4, 3).num_pipe_buffers() == 2);
  CHECK(TrainSchedule(3, 8, 0).num_pipe_buffers() == 3);
  CHECK(TrainSchedule(1, 8, 0).num_pipe_buffers() == 2);
  CHECK(InferenceSchedule(8, 4, 0).num_pipe_buffers() == 2);
}

TEST_CASE("Schedules reject shapes that name no stage", "[pipe]") {
  auto message_of = [](auto&& construct) {
    try {
      construct();
    } catch (const ds::Error& error) {
      return std::string(error.what());
    }
    return std::string("no error");
  };
  CHECK_THAT(message_of([] { TrainSchedule(0, 2, 0); }), Catch::Contains("micro_batches") && Catch::Contains("0"));
  CHECK_THAT(message_of([] { InferenceSchedule(4, 0, 0); }), Catch::Contains("stages") && Catch::Contains("0"));
  CHECK_THAT(message_of([] { DataParallelSchedule(4, 2, 2); }), Catch::Contains("stage_id") && Catch::Contains("2"));
  CHECK_THAT(message_of([] { TrainSchedule(4, 2, -1); }), Catch::Contains("stage_id") && Catch::Contains("-1"));
}

TEST_CASE("make_schedule builds the kind it is asked for", "[pipe]") {
  CHECK(make_schedule(ScheduleKind::Train, 4, 2, 1)->steps() == TrainSchedule(4, 2, 1).steps());
  CHECK(make_schedule(ScheduleKind::Inference, 4, 2, 1)->steps() == InferenceSchedule(4, 2, 1).steps());
  CHECK(make_schedule(ScheduleKind::DataParallel, 4, 2, 1)->steps() == DataParallelSchedule(4, 2, 1).steps());
  CHECK(to_string(ScheduleKind::DataParallel) == "data-parallel");
}
