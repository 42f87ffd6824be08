// Training runs as `dstrain plot` reads them: the trainer's --metrics files (JSON lines,
// apps/dstrain/train_report.hpp), each line an object with an integer "step". Every numeric field
// of a line becomes a point of that field's series against the step; a "comms" array (the comms
// logger's lines) holds one entry per collective, with its "op" name and numeric figures.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "dstrain/plot/line_chart.hpp"

namespace ds::plot {

struct CommsEntry {
  int64_t step;
  std::string op;                          // "all_reduce"
  std::map<std::string, double> figures;  // "bytes", "busbw_gbps", ...: those the line has
};

struct Run {
  std::string name;  // as the legend shows it
  std::string path;
  int64_t lines = 0;
  std::map<std::string, std::vector<Point>> fields;  // "loss" -> a point per line with a loss
  std::vector<CommsEntry> comms;
};

// Throws ds::Error naming the path: a file that cannot be read (with errno), a line that is not
// JSON or not an object with an integer "step" (with its line number), a file without a line.
// A null value (JSON's NaN) is a point with y NaN; blank lines are skipped.
Run read_run(const std::string& path, const std::string& name);

// Each file a run, named by its file name, or by the path as given where two file names are alike.
std::vector<Run> read_runs(const std::vector<std::string>& paths);

}  // namespace ds::plot
