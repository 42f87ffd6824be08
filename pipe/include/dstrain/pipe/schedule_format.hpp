// How `dstrain schedule` shows a pipeline schedule: one stage's instruction stream as JSON or as a
// readable step listing, and a timeline of every stage side by side in which the bubble shows.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "dstrain/pipe/schedule.hpp"

namespace ds::pipe {

// {"num_pipe_buffers": N, "steps": [[{"op": "LoadMicroBatch", "buffer_id": 0}, ...], ...]}, with
// "buffer_id" present exactly on buffer instructions.
nlohmann::ordered_json to_json(const PipeSchedule& schedule);

// A header, then one line per step: the step, its work (F<k> / B<k> for the forward / backward of
// micro-batch k, "." when idle) and its instructions in order.
std::string format_steps(const PipeSchedule& schedule);

// One row per step and one column per stage, cells as in format_steps; then each stage's count of
// idle steps and the bubble: the share of all stage-steps that are idle.
std::string format_timeline(ScheduleKind kind, int micro_batches, int stages);

}  // namespace ds::pipe
