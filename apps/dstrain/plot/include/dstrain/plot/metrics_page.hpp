// The page `dstrain plot` writes: a summary table of the runs, then against the step the loss
// (train solid, validation dashed with dots where evaluated), lr, samples/s, MFU, TFLOPS and peak RSS, each
// run one colour; then, where a run logged communication, bytes and bus bandwidth per collective.
// A chart whose figure no run has is left out.
#pragma once

#include <string>
#include <vector>

#include "dstrain/plot/metrics_runs.hpp"

namespace ds::plot {

std::string metrics_page(const std::vector<Run>& runs);

}  // namespace ds::plot
