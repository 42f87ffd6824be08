// One axis of a chart: the data's range widened to round numbers, with ticks 1, 2 or 5 times a
// power of ten apart, as a reader expects to see them.
#pragma once

#include <string>
#include <vector>

namespace ds::plot {

struct Axis {
  double low = 0;   // <= the smallest value
  double high = 1;  // >= the largest, > low
  double step = 1;  // between ticks
  std::vector<double> ticks;  // low, low + step, ..., high
};

// min <= max, both finite. Equal values (one point, a flat series) are widened by 10% each way (by
// 1 around zero) so that the line sits inside the axis, not on its edge.
Axis nice_axis(double min, double max);

// A tick's label, with as many decimals as the step needs: "0.25", "1500", "3e-04", and "0" for 0.
std::string tick_label(double value, double step);

}  // namespace ds::plot
