#include "dstrain/plot/line_chart.hpp"

#include <algorithm>
#include <cmath>
#include <limits>

#include "dstrain/plot/axis.hpp"
#include "dstrain/plot/svg_text.hpp"

namespace ds::plot {
namespace {

// Colour-blind-safe (Okabe-Ito), then grey.
constexpr const char* kPalette[] = {"#0072B2", "#D55E00", "#009E73", "#CC79A7",
                                    "#E69F00", "#56B4E9", "#000000", "#999999"};
constexpr int kPaletteSize = sizeof kPalette / sizeof kPalette[0];

// The page's layout, in pixels: the plot area inside margins for title, ticks and the legend.
constexpr double kWidth = 820, kLeft = 72, kRight = 560, kTop = 36, kPlotHeight = 236, kLegendX = 576;
constexpr double kLegendRow = 18;

const char* colour_of(const Series& series) {
  return kPalette[((series.colour % kPaletteSize) + kPaletteSize) % kPaletteSize];
}

std::string stroke_style(const Series& series) {
  return std::string("fill=\"none\" stroke=\"") + colour_of(series) + "\" stroke-width=\"2\"" +
         (series.dashed ? " stroke-dasharray=\"6 4\"" : "");
}

struct Bounds {
  double x_min = std::numeric_limits<double>::infinity(), x_max = -x_min;
  double y_min = x_min, y_max = -x_min;
  bool empty() const { return x_min > x_max; }
};

Bounds finite_bounds(const LineChart& chart) {
  Bounds b;
  for (const Series& series : chart.series) {
    for (const Point& p : series.points) {
      if (!std::isfinite(p.x) || !std::isfinite(p.y)) continue;
      b.x_min = std::min(b.x_min, p.x), b.x_max = std::max(b.x_max, p.x);
      b.y_min = std::min(b.y_min, p.y), b.y_max = std::max(b.y_max, p.y);
    }
  }
  return b;
}

bool finite(const Point& p) { return std::isfinite(p.x) && std::isfinite(p.y); }

// The legend has 240 pixels: a long name (a run named by its path) keeps its end, which tells runs
// apart, cut at a UTF-8 character boundary.
std::string legend_text(const std::string& name) {
  constexpr size_t kMaxBytes = 30;
  if (name.size() <= kMaxBytes) return name;
  size_t start = name.size() - kMaxBytes;
  while (start < name.size() && (static_cast<unsigned char>(name[start]) & 0xC0) == 0x80) ++start;
  return "\u2026" + name.substr(start);
}

}  // namespace

std::string render_svg(const LineChart& chart) {
  const double bottom = kTop + kPlotHeight;
  const double height = std::max(bottom + 48, kTop + kLegendRow * (chart.series.size() + 1));
  std::string svg = "<svg class=\"chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + coordinate(kWidth) +
                    "\" height=\"" + coordinate(height) + "\" viewBox=\"0 0 " + coordinate(kWidth) + " " +
                    coordinate(height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<title>" + escape_xml(chart.title) + "</title>\n";
  svg += "<text x=\"" + coordinate(kLeft) + "\" y=\"20\" font-size=\"15\" font-weight=\"bold\">" +
         escape_xml(chart.title) + "</text>\n";
  svg += "<rect x=\"" + coordinate(kLeft) + "\" y=\"" + coordinate(kTop) + "\" width=\"" +
         coordinate(kRight - kLeft) + "\" height=\"" + coordinate(kPlotHeight) +
         "\" fill=\"none\" stroke=\"#444\"/>\n";
  svg += "<text x=\"" + coordinate((kLeft + kRight) / 2) + "\" y=\"" + coordinate(bottom + 40) +
         "\" text-anchor=\"middle\">" + escape_xml(chart.x_label) + "</text>\n";
  svg += "<text transform=\"translate(16 " + coordinate(kTop + kPlotHeight / 2) +
         ") rotate(-90)\" text-anchor=\"middle\">" + escape_xml(chart.y_label) + "</text>\n";

  const Bounds bounds = finite_bounds(chart);
  if (bounds.empty()) {
    svg += "<text class=\"no-data\" x=\"" + coordinate((kLeft + kRight) / 2) + "\" y=\"" +
           coordinate(kTop + kPlotHeight / 2) + "\" text-anchor=\"middle\" fill=\"#888\">no data</text>\n";
  }
  const Axis x_axis = nice_axis(bounds.empty() ? 0 : bounds.x_min, bounds.empty() ? 1 : bounds.x_max);
  const Axis y_axis = nice_axis(bounds.empty() ? 0 : bounds.y_min, bounds.empty() ? 1 : bounds.y_max);
  const auto px = [&](double x) { return kLeft + (x - x_axis.low) / (x_axis.high - x_axis.low) * (kRight - kLeft); };
  const auto py = [&](double y) { return bottom - (y - y_axis.low) / (y_axis.high - y_axis.low) * kPlotHeight; };

  for (double tick : x_axis.ticks) {
    const std::string x = coordinate(px(tick));
    svg += "<line class=\"tick\" x1=\"" + x + "\" y1=\"" + coordinate(bottom) + "\" x2=\"" + x + "\" y2=\"" +
           coordinate(bottom + 5) + "\" stroke=\"#444\"/><text x=\"" + x + "\" y=\"" + coordinate(bottom + 18) +
           "\" text-anchor=\"middle\">" + tick_label(tick, x_axis.step) + "</text>\n";
  }
  for (double tick : y_axis.ticks) {
    const std::string y = coordinate(py(tick));
    svg += "<line class=\"grid\" x1=\"" + coordinate(kLeft) + "\" y1=\"" + y + "\" x2=\"" + coordinate(kRight) +
           "\" y2=\"" + y + "\" stroke=\"#ddd\"/><text x=\"" + coordinate(kLeft - 6) + "\" y=\"" + y +
           "\" dy=\"4\" text-anchor=\"end\">" + tick_label(tick, y_axis.step) + "</text>\n";
  }

  for (size_t s = 0; s < chart.series.size(); ++s) {
    const Series& series = chart.series[s];
    const auto& points = series.points;
    std::string path, dots;
    int drawn = 0;
    for (size_t i = 0; i < points.size(); ++i) {
      if (!finite(points[i])) continue;
      const bool joins_previous = i > 0 && finite(points[i - 1]);
      const bool joins_next = i + 1 < points.size() && finite(points[i + 1]);
      const std::string x = coordinate(px(points[i].x)), y = coordinate(py(points[i].y));
      path += (path.empty() ? "" : " ") + std::string(joins_previous ? "L" : "M") + x + " " + y;
      ++drawn;
      if (series.markers || (!joins_previous && !joins_next)) {
        // A marker has a white rim, to stand out over a dense line of the same colour.
        dots += "<circle class=\"dot\" cx=\"" + x + "\" cy=\"" + y + "\" fill=\"" + colour_of(series) +
                (series.markers ? "\" r=\"4.5\" stroke=\"#fff\" stroke-width=\"1.5\"/>" : "\" r=\"3\"/>");
      }
    }
    svg += "<path class=\"series\" data-name=\"" + escape_xml(series.name) + "\" data-points=\"" +
           std::to_string(drawn) + "\" d=\"" + path + "\" " + stroke_style(series) + "/>" + dots + "\n";
    const std::string row_y = coordinate(kTop + 6 + kLegendRow * s);
    svg += "<g class=\"legend\"><line x1=\"" + coordinate(kLegendX) + "\" y1=\"" + row_y + "\" x2=\"" +
           coordinate(kLegendX + 24) + "\" y2=\"" + row_y + "\" " + stroke_style(series) + "/><text x=\"" +
           coordinate(kLegendX + 30) + "\" y=\"" + row_y + "\" dy=\"4\">" + escape_xml(legend_text(series.name)) +
           "</text></g>\n";
  }
  return svg + "</svg>\n";
}

}  // namespace ds::plot
