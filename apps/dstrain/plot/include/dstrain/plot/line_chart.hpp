// A line chart as an SVG element: several series of (x, y) against shared axes, with ticks, axis
// labels and a legend. No script: the page draws the same in any browser.
#pragma once

#include <string>
#include <vector>

namespace ds::plot {

struct Point {
  double x;
  double y;  // NaN: no value at x (a diverged loss); the line breaks there
};

struct Series {
  std::string name;
  std::vector<Point> points;  // in drawing order
  int colour = 0;             // index into the chart palette (it wraps)
  bool dashed = false;
  bool markers = false;  // a dot on every point: a sparse series (val_loss) over a dense one
};

struct LineChart {
  std::string title;
  std::string x_label;
  std::string y_label;
  std::vector<Series> series;
};

// One <path class="series" data-name=NAME data-points=N> per series, N its finite points, each a
// "M" or "L" command of the path ("M" after a gap); a point with no finite neighbour, or any point
// of a series with markers, is also drawn as a dot. The axes span the finite points of all series; a chart with none says "no data". The
// legend shows a name longer than 30 bytes by its end ("…/runs/b/metrics.jsonl loss").
std::string render_svg(const LineChart& chart);

}  // namespace ds::plot
