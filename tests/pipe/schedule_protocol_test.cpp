// Property tests over every pipeline of 1..8 stages and 1..16 micro-batches: the schedules of all
// stages, run together by the protocol simulator, move every micro-batch through every stage exactly
// once, meet every send with its receive in the same step, and never overwrite a buffer in use. The
// step of each pass is checked against the closed form of 1F1B.
#include <catch2/catch.hpp>

#include <algorithm>
#include <memory>
#include <vector>

#include "dstrain/pipe/schedule.hpp"
#include "pipeline_simulator.hpp"

using namespace ds::pipe;
using pipe_test::Mode;
using pipe_test::simulate_pipeline;
using pipe_test::StageRecord;

namespace {

constexpr int kMaxStages = 8;
constexpr int kMaxMicroBatches = 16;

template <typename Schedule>
std::vector<Schedule> all_stages(int micro_batches, int stages) {
  std::vector<Schedule> schedules;
  for (int stage_id = 0; stage_id < stages; ++stage_id) schedules.emplace_back(micro_batches, stages, stage_id);
  return schedules;
}

template <typename Schedule>
std::vector<std::vector<Step>> streams_of(const std::vector<Schedule>& schedules) {
  std::vector<std::vector<Step>> streams;
  for (const Schedule& schedule : schedules) streams.push_back(schedule.steps());
  return streams;
}

void check_buffer_ids(const PipeSchedule& schedule) {
  for (const Step& step : schedule) {
    for (const Instruction& instruction : step) {
      INFO(instruction);
      if (is_buffer_op(instruction.op)) {
        CHECK(instruction.buffer_id >= 0);
        CHECK(instruction.buffer_id < schedule.num_pipe_buffers());
      } else {
        CHECK(instruction.buffer_id == -1);
      }
    }
  }
}

// The exchanges a stage takes part in: one of each per micro-batch towards each neighbour it has.
void check_exchange_counts(const StageRecord& record, int micro_batches, int stage, int stages, bool training) {
  const int has_next = stage < stages - 1 ? 1 : 0;
  const int has_prev = stage > 0 ? 1 : 0;
  CHECK(record.activations_sent == micro_batches * has_next);
  CHECK(record.activations_received == micro_batches * has_prev);
  CHECK(record.grads_sent == (training ? micro_batches * has_prev : 0));
  CHECK(record.grads_received == (training ? micro_batches * has_next : 0));
  CHECK(record.inputs_loaded == (stage == 0 ? micro_batches : 0));
  CHECK(record.labels_loaded == (stage == stages - 1 ? micro_batches : 0));
}

}  // namespace

TEST_CASE("Train schedules of all shapes run as a pipeline, in 1F1B order", "[pipe]") {
  for (int stages = 1; stages <= kMaxStages; ++stages) {
    for (int micro_batches = 1; micro_batches <= kMaxMicroBatches; ++micro_batches) {
      INFO("stages " << stages << ", micro-batches " << micro_batches);
      const auto schedules = all_stages<TrainSchedule>(micro_batches, stages);
      std::vector<StageRecord> records;
      REQUIRE_NOTHROW(records = simulate_pipeline(streams_of(schedules), micro_batches, Mode::Training));

      const int total_steps = 2 * (micro_batches + stages - 1);
      for (int stage = 0; stage < stages; ++stage) {
        INFO("stage " << stage);
        const TrainSchedule& schedule = schedules[stage];
        const StageRecord& record = records[stage];
        REQUIRE(schedule.steps().size() == static_cast<size_t>(total_steps));
        check_buffer_ids(schedule);
        check_exchange_counts(record, micro_batches, stage, stages, true);

        // 1F1B: stage s forwards micro-batch k at step 2k + s and backwards it at 2k + 2S - 1 - s,
        // so each micro-batch passes exactly once each way, and the step maps back to k.
        for (int k = 0; k < micro_batches; ++k) {
          const int forward_step = 2 * k + stage;
          const int backward_step = 2 * k + 2 * stages - 1 - stage;
          CHECK(record.forward_steps[k] == std::vector<int>{forward_step});
          CHECK(record.backward_steps[k] == std::vector<int>{backward_step});
          CHECK(schedule.step_to_micro_batch(forward_step).micro_batch_id == k);
          CHECK(schedule.step_to_micro_batch(forward_step).is_forward);
          CHECK(schedule.micro_batch_id(backward_step) == k);
          CHECK_FALSE(schedule.step_to_micro_batch(backward_step).is_forward);
        }

        // A buffer per micro-batch in flight, as many as the distance to the last stage allows.
        CHECK(record.peak_in_flight == std::min(stages - stage, micro_batches));
        CHECK(schedule.num_pipe_buffers() == std::max(2, record.peak_in_flight));

        // The model is updated once, at the very end.
        REQUIRE(record.model_ops.size() == 3);
        CHECK(record.model_ops[0].op == Op::ReduceTiedGrads);
        CHECK(record.model_ops[1].op == Op::ReduceGrads);
        CHECK(record.model_ops[2].op == Op::OptimizerStep);
        for (const auto& model_op : record.model_ops) CHECK(model_op.step == total_steps - 1);
        const Step& last = schedule.steps().back();
        CHECK(last.back().op == Op::OptimizerStep);
      }
    }
  }
}

TEST_CASE("Inference schedules of all shapes run as a pipeline, one step per stage", "[pipe]") {
  for (int stages = 1; stages <= kMaxStages; ++stages) {
    for (int micro_batches = 1; micro_batches <= kMaxMicroBatches; ++micro_batches) {
      INFO("stages " << stages << ", micro-batches " << micro_batches);
      const auto schedules = all_stages<InferenceSchedule>(micro_batches, stages);
      std::vector<StageRecord> records;
      REQUIRE_NOTHROW(records = simulate_pipeline(streams_of(schedules), micro_batches, Mode::Inference));

      for (int stage = 0; stage < stages; ++stage) {
        INFO("stage " << stage);
        const InferenceSchedule& schedule = schedules[stage];
        const StageRecord& record = records[stage];
        REQUIRE(schedule.steps().size() == static_cast<size_t>(micro_batches + stages - 1));
        check_buffer_ids(schedule);
        check_exchange_counts(record, micro_batches, stage, stages, false);
        for (int k = 0; k < micro_batches; ++k) {
          CHECK(record.forward_steps[k] == std::vector<int>{k + stage});
          CHECK(record.backward_steps[k].empty());
          CHECK(schedule.micro_batch_id(k + stage) == k);
        }
        CHECK(record.peak_in_flight <= schedule.num_pipe_buffers());
        CHECK(record.model_ops.empty());
      }
    }
  }
}

// The simulator is the reference of the tests above; these show that it does catch what it claims.
TEST_CASE("The protocol simulator rejects broken pipelines", "[pipe]") {
  const auto schedules = all_stages<TrainSchedule>(4, 3);
  auto streams = streams_of(schedules);
  REQUIRE_NOTHROW(simulate_pipeline(streams, 4, Mode::Training));

  SECTION("a receive whose send is missing deadlocks") {
    Step& step = streams[0][1];  // stage 0 sends micro-batch 0's activation at step 1
    REQUIRE(step == Step{{Op::SendActivation, 0}});
    step.clear();
    CHECK_THROWS_WITH(simulate_pipeline(streams, 4, Mode::Training), Catch::Contains("deadlock"));
  }
  SECTION("one buffer for all micro-batches overwrites one still in flight") {
    for (Step& step : streams[0]) {
      for (Instruction& instruction : step) {
        if (is_buffer_op(instruction.op)) instruction.buffer_id = 0;
      }
    }
    CHECK_THROWS_WITH(simulate_pipeline(streams, 4, Mode::Training), Catch::Contains("overwrites"));
  }
  SECTION("receiving before sending the gradient of the same buffer overwrites it") {
    // Stage 1 of 3 has two buffers: at step 5 it sends micro-batch 0's gradient from buffer 0 and
    // receives micro-batch 2's activation into buffer 0. The receive must come second.
    Step& step = streams[1][5];
    REQUIRE(step[0] == (Instruction{Op::SendGrad, 0}));
    REQUIRE(step[1] == (Instruction{Op::RecvActivation, 0}));
    std::swap(step[0], step[1]);
    Step& partner = streams[0][5];  // let stage 0 meet the swapped order, so only the buffer is wrong
    REQUIRE(partner[0] == (Instruction{Op::RecvGrad, 0}));
    REQUIRE(partner[1] == (Instruction{Op::SendActivation, 2}));
    std::swap(partner[0], partner[1]);
    CHECK_THROWS_WITH(simulate_pipeline(streams, 4, Mode::Training), Catch::Contains("overwrites"));
  }
  SECTION("a gradient received into another micro-batch's buffer") {
    Step& step = streams[0][5];  // stage 0 receives micro-batch 0's gradient at step 5
    REQUIRE(step[0] == (Instruction{Op::RecvGrad, 0}));
    step[0].buffer_id = 1;
    CHECK_THROWS_WITH(simulate_pipeline(streams, 4, Mode::Training), Catch::Contains("gradient of micro-batch"));
  }
  SECTION("a middle stage that loads data") {
    streams[1][1].insert(streams[1][1].begin(), Instruction{Op::LoadMicroBatch, 0});
    CHECK_THROWS_WITH(simulate_pipeline(streams, 4, Mode::Training), Catch::Contains("middle stage"));
  }
}
