#include "dstrain/plot/axis.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

namespace ds::plot {

Axis nice_axis(double min, double max) {
  if (min == max) {
    const double widen = min == 0 ? 1 : std::abs(min) * 0.1;
    min -= widen;
    max += widen;
  }
  // About four intervals, rounded up to 1, 2 or 5 times a power of ten: at most six ticks.
  const double rough = (max - min) / 4;
  const double magnitude = std::pow(10.0, std::floor(std::log10(rough)));
  const double fraction = rough / magnitude;
  const double step = (fraction <= 1 ? 1 : fraction <= 2 ? 2 : fraction <= 5 ? 5 : 10) * magnitude;
  Axis axis;
  axis.step = step;
  const double first = std::floor(min / step), last = std::ceil(max / step);
  axis.low = first * step;
  axis.high = last * step;
  for (double i = first; i <= last; ++i) {
    const double tick = i * step;
    axis.ticks.push_back(std::abs(tick) < step * 1e-9 ? 0.0 : tick);  // no "-0" from rounding
  }
  return axis;
}

std::string tick_label(double value, double step) {
  if (value == 0) return "0";
  char text[32];
  const double largest = std::max(std::abs(value), step);
  if (step >= 1e-3 && largest < 1e6) {
    const int decimals = std::max(0, static_cast<int>(-std::floor(std::log10(step) + 1e-9)));
    std::snprintf(text, sizeof text, "%.*f", decimals, value);
  } else {
    // Scientific, with the mantissa digits that tell neighbouring ticks apart.
    const int digits = std::max(0, static_cast<int>(std::floor(std::log10(largest) + 1e-9) -
                                                    std::floor(std::log10(step) + 1e-9)));
    std::snprintf(text, sizeof text, "%.*e", std::min(digits, 6), value);
  }
  return text;
}

}  // namespace ds::plot
