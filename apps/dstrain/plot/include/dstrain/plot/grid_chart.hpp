// A grid chart as an SVG element: rows (pipeline stages) against columns (steps), each cell split
// into coloured segments (its instructions, in order) with a tooltip each, and a legend of kinds.
#pragma once

#include <string>
#include <vector>

namespace ds::plot {

struct GridKind {
  std::string name;    // "Forward"
  std::string colour;  // a CSS colour
};

struct GridSegment {
  int kind;  // index into GridChart::kinds
  std::string tooltip;
};

struct GridCell {
  std::vector<GridSegment> segments;  // empty: idle
  std::string text;                   // drawn over the cell ("F3"); may be empty
};

struct GridChart {
  std::string title;
  std::string column_label;  // "step"
  std::vector<std::string> row_labels;
  std::vector<std::vector<GridCell>> cells;  // [row][column]; every row as long as the first
  std::vector<GridKind> kinds;
};

// Each segment is a <rect class="segment" data-row=R data-column=C data-kind=NAME> holding its
// tooltip as <title>; idle cells are outlined only. Throws ds::Error when a row's length differs
// from the first's or a segment names a kind that is not listed.
std::string render_svg(const GridChart& chart);

}  // namespace ds::plot
