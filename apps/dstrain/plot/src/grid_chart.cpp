#include "dstrain/plot/grid_chart.hpp"

#include <algorithm>

#include "dstrain/plot/svg_text.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::plot {
namespace {

// Pixels: a label column, then one cell per column; a row of tick labels under the grid and the
// legend under those, its entries side by side, wrapping at the chart's width.
constexpr double kLabelWidth = 72, kCellWidth = 36, kCellHeight = 30, kTop = 36, kLegendRow = 20, kLegendEntry = 110;

}  // namespace

std::string render_svg(const GridChart& chart) {
  const size_t rows = chart.cells.size(), columns = rows == 0 ? 0 : chart.cells.front().size();
  for (size_t r = 0; r < rows; ++r) {
    if (chart.cells[r].size() != columns)
      throw Error("grid chart '" + chart.title + "': row " + std::to_string(r) + " has " +
                  std::to_string(chart.cells[r].size()) + " cells, row 0 has " + std::to_string(columns));
  }
  const double grid_bottom = kTop + kCellHeight * rows;
  const double legend_top = grid_bottom + 40;
  const double width = std::max(kLabelWidth + kCellWidth * columns + 16, 480.0);
  const size_t legend_columns = std::max<size_t>(1, static_cast<size_t>((width - kLabelWidth) / kLegendEntry));
  const size_t legend_rows = (chart.kinds.size() + legend_columns - 1) / legend_columns;
  const double height = legend_top + kLegendRow * legend_rows + 8;
  std::string svg = "<svg class=\"grid-chart\" xmlns=\"http://www.w3.org/2000/svg\" width=\"" + coordinate(width) +
                    "\" height=\"" + coordinate(height) + "\" viewBox=\"0 0 " + coordinate(width) + " " +
                    coordinate(height) + "\" font-family=\"sans-serif\" font-size=\"12\">\n";
  svg += "<title>" + escape_xml(chart.title) + "</title>\n";
  svg += "<text x=\"4\" y=\"20\" font-size=\"15\" font-weight=\"bold\">" + escape_xml(chart.title) + "</text>\n";

  for (size_t r = 0; r < rows; ++r) {
    const double y = kTop + kCellHeight * r;
    const std::string label = r < chart.row_labels.size() ? chart.row_labels[r] : "";
    svg += "<text x=\"4\" y=\"" + coordinate(y + kCellHeight / 2) + "\" dy=\"4\">" + escape_xml(label) + "</text>\n";
    for (size_t c = 0; c < columns; ++c) {
      const GridCell& cell = chart.cells[r][c];
      const double x = kLabelWidth + kCellWidth * c;
      const double segment_width = kCellWidth / std::max<size_t>(cell.segments.size(), 1);
      for (size_t s = 0; s < cell.segments.size(); ++s) {
        const GridSegment& segment = cell.segments[s];
        if (segment.kind < 0 || segment.kind >= static_cast<int>(chart.kinds.size()))
          throw Error("grid chart '" + chart.title + "': segment kind " + std::to_string(segment.kind) +
                      " is not one of the " + std::to_string(chart.kinds.size()) + " kinds");
        const GridKind& kind = chart.kinds[segment.kind];
        svg += "<rect class=\"segment\" data-row=\"" + std::to_string(r) + "\" data-column=\"" + std::to_string(c) +
               "\" data-kind=\"" + escape_xml(kind.name) + "\" x=\"" + coordinate(x + segment_width * s) + "\" y=\"" +
               coordinate(y) + "\" width=\"" + coordinate(segment_width) + "\" height=\"" + coordinate(kCellHeight) +
               "\" fill=\"" + escape_xml(kind.colour) + "\"><title>" + escape_xml(segment.tooltip) +
               "</title></rect>";
      }
      svg += "<rect x=\"" + coordinate(x) + "\" y=\"" + coordinate(y) + "\" width=\"" + coordinate(kCellWidth) +
             "\" height=\"" + coordinate(kCellHeight) + "\" fill=\"none\" stroke=\"#fff\" stroke-width=\"1.5\"/>";
      if (!cell.text.empty()) {
        svg += "<text x=\"" + coordinate(x + kCellWidth / 2) + "\" y=\"" + coordinate(y + kCellHeight / 2) +
               "\" dy=\"4\" text-anchor=\"middle\" font-weight=\"bold\" pointer-events=\"none\">" +
               escape_xml(cell.text) + "</text>";
      }
      svg += "\n";
    }
  }
  svg += "<rect x=\"" + coordinate(kLabelWidth) + "\" y=\"" + coordinate(kTop) + "\" width=\"" +
         coordinate(kCellWidth * columns) + "\" height=\"" + coordinate(kCellHeight * rows) +
         "\" fill=\"none\" stroke=\"#444\"/>\n";
  for (size_t c = 0; c < columns; ++c) {
    svg += "<text x=\"" + coordinate(kLabelWidth + kCellWidth * (c + 0.5)) + "\" y=\"" +
           coordinate(grid_bottom + 14) + "\" text-anchor=\"middle\">" + std::to_string(c) + "</text>";
  }
  svg += "<text x=\"4\" y=\"" + coordinate(grid_bottom + 14) + "\">" + escape_xml(chart.column_label) + "</text>\n";
  for (size_t k = 0; k < chart.kinds.size(); ++k) {
    const double x = kLabelWidth + kLegendEntry * (k % legend_columns);
    const double y = legend_top + kLegendRow * (k / legend_columns);
    svg += "<g class=\"legend\"><rect x=\"" + coordinate(x) + "\" y=\"" + coordinate(y) +
           "\" width=\"14\" height=\"14\" fill=\"" + escape_xml(chart.kinds[k].colour) + "\"/><text x=\"" +
           coordinate(x + 20) + "\" y=\"" + coordinate(y + 11) + "\">" + escape_xml(chart.kinds[k].name) +
           "</text></g>\n";
  }
  return svg + "</svg>\n";
}

}  // namespace ds::plot
