// `dstrain schedule -o page.html`: a pipeline schedule as an HTML page, the instruction grid of
// every stage against the step (loads, forward, backward, sends, receives, reductions and the
// optimizer step each a colour, every instruction's name in its tooltip) and the bubble.
#pragma once

#include <string>

#include "dstrain/pipe/schedule.hpp"

namespace ds::app {

// Throws ds::Error on a shape the schedules refuse.
std::string schedule_page(pipe::ScheduleKind kind, int micro_batches, int stages);

}  // namespace ds::app
