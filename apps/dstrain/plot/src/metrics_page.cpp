#include "dstrain/plot/metrics_page.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "dstrain/plot/html_page.hpp"

namespace ds::plot {
namespace {

struct ChartSpec {
  const char* title;
  const char* y_label;
  std::vector<const char*> fields;  // the first solid, the others dashed with a dot on each point
};

// The trainer's field names (train_report.cpp); "mfu" and "tflops" where the trainer knows the FLOPs.
const std::vector<ChartSpec> kStepCharts = {
    {"Loss (train solid, validation dashed with dots)", "loss", {"loss", "val_loss"}},
    {"Learning rate", "lr", {"lr"}},
    {"Throughput", "samples/s", {"samples_per_sec"}},
    {"Model FLOPs utilization", "MFU", {"mfu"}},
    {"Achieved TFLOPS", "TFLOPS", {"tflops"}},
    {"Peak memory (largest over ranks)", "peak RSS (MB)", {"peak_rss_mb"}},
};

// The comms logger's figures per collective.
const std::vector<ChartSpec> kCommsCharts = {
    {"Bytes per collective", "bytes", {"bytes"}},
    {"Bus bandwidth per collective", "busbw (GB/s)", {"busbw_gbps"}},
};

std::string number(double value) {
  if (std::isnan(value)) return "NaN";
  char text[32];
  std::snprintf(text, sizeof text, "%.4g", value);
  return text;
}

std::string last_value(const Run& run, const char* field) {
  const auto it = run.fields.find(field);
  return it == run.fields.end() || it->second.empty() ? "" : number(it->second.back().y);
}

void add_summary(HtmlPage& page, const std::vector<Run>& runs) {
  std::vector<std::vector<std::string>> rows;
  for (const Run& run : runs) {
    std::string steps;
    if (auto it = run.fields.find("loss"); it != run.fields.end() && !it->second.empty())
      steps = number(it->second.front().x) + " to " + number(it->second.back().x);
    rows.push_back({run.name, run.path, std::to_string(run.lines), steps, last_value(run, "loss"),
                    last_value(run, "val_loss")});
  }
  page.add_table({"run", "file", "lines", "steps", "last loss", "last val_loss"}, rows);
}

void add_step_charts(HtmlPage& page, const std::vector<Run>& runs) {
  for (const ChartSpec& spec : kStepCharts) {
    LineChart chart{spec.title, "step", spec.y_label, {}};
    for (size_t r = 0; r < runs.size(); ++r) {
      for (size_t f = 0; f < spec.fields.size(); ++f) {
        const auto it = runs[r].fields.find(spec.fields[f]);
        if (it == runs[r].fields.end()) continue;
        chart.series.push_back({runs[r].name + " " + spec.fields[f], it->second, static_cast<int>(r), f > 0, f > 0});
      }
    }
    if (!chart.series.empty()) page.add_svg(render_svg(chart));
  }
}

void add_comms_charts(HtmlPage& page, const std::vector<Run>& runs) {
  if (std::none_of(runs.begin(), runs.end(), [](const Run& run) { return !run.comms.empty(); })) return;
  page.add_heading("Communication");
  page.add_text("Each collective the comms logger recorded, per logged step; one line per run and operation.");
  for (const ChartSpec& spec : kCommsCharts) {
    const char* figure = spec.fields.front();
    LineChart chart{spec.title, "step", spec.y_label, {}};
    for (size_t r = 0; r < runs.size(); ++r) {
      std::vector<std::string> ops;  // in the order the run first logged them
      for (const CommsEntry& entry : runs[r].comms) {
        if (entry.figures.count(figure) && std::find(ops.begin(), ops.end(), entry.op) == ops.end())
          ops.push_back(entry.op);
      }
      for (const std::string& op : ops) {
        Series series{runs[r].name + " " + op, {}, static_cast<int>(chart.series.size()), r % 2 == 1, true};
        for (const CommsEntry& entry : runs[r].comms) {
          const auto it = entry.figures.find(figure);
          if (entry.op == op && it != entry.figures.end())
            series.points.push_back({static_cast<double>(entry.step), it->second});
        }
        chart.series.push_back(std::move(series));
      }
    }
    if (!chart.series.empty()) page.add_svg(render_svg(chart));
  }
}

}  // namespace

std::string metrics_page(const std::vector<Run>& runs) {
  std::string title = "dstrain runs:";
  for (const Run& run : runs) title += " " + run.name;
  HtmlPage page(title);
  add_summary(page, runs);
  add_step_charts(page, runs);
  add_comms_charts(page, runs);
  return page.html();
}

}  // namespace ds::plot
