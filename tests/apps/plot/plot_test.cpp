// The page writer of `dstrain plot`: escaping, axis ranges, the paths drawn for series with one
// point, gaps (NaN) and missing values, the metrics reader's errors, and which charts a page holds.
#include <catch2/catch.hpp>

#include <unistd.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <regex>
#include <string>
#include <vector>

#include "dstrain/plot/axis.hpp"
#include "dstrain/plot/grid_chart.hpp"
#include "dstrain/plot/line_chart.hpp"
#include "dstrain/plot/metrics_page.hpp"
#include "dstrain/plot/metrics_runs.hpp"
#include "dstrain/plot/svg_text.hpp"
#include "dstrain/runtime/error.hpp"

using namespace ds::plot;

namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

int count_of(const std::string& text, const std::string& what) {
  int count = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + what.size())) ++count;
  return count;
}

// The d attribute of each <path class="series">, in order.
std::vector<std::string> series_paths(const std::string& svg) {
  static const std::regex path(R"re(<path class="series" [^>]*d="([^"]*)")re");
  std::vector<std::string> out;
  for (std::sregex_iterator it(svg.begin(), svg.end(), path), end; it != end; ++it) out.push_back((*it)[1]);
  return out;
}

struct Command {
  char letter;
  double x, y;
};

std::vector<Command> commands_of(const std::string& d) {
  static const std::regex command(R"(([ML])(-?[0-9.]+) (-?[0-9.]+))");
  std::vector<Command> out;
  for (std::sregex_iterator it(d.begin(), d.end(), command), end; it != end; ++it)
    out.push_back({(*it)[1].str()[0], std::stod((*it)[2]), std::stod((*it)[3])});
  return out;
}

class TempDir {
 public:
  TempDir() : path_(std::filesystem::temp_directory_path() / ("plot_test_" + std::to_string(::getpid()))) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() { std::filesystem::remove_all(path_); }
  std::string write(const std::string& name, const std::string& text) const {
    const std::string file = (path_ / name).string();
    std::filesystem::create_directories(std::filesystem::path(file).parent_path());
    std::ofstream(file) << text;
    return file;
  }
  std::string path() const { return path_.string(); }

 private:
  std::filesystem::path path_;
};

LineChart chart_of(std::vector<Series> series) { return {"title", "step", "value", std::move(series)}; }

}  // namespace

TEST_CASE("text is escaped in elements and attributes", "[plot]") {
  CHECK(escape_xml(R"(<a href="x">Tom & 'Jerry'</a>)") ==
        "&lt;a href=&quot;x&quot;&gt;Tom &amp; &#39;Jerry&#39;&lt;/a&gt;");
  CHECK(escape_xml("plain run_1.jsonl") == "plain run_1.jsonl");

  const std::string svg = render_svg(LineChart{"<loss> & \"lr\"", "x<", "y>", {{"run \"a\" <b>", {{1, 2}}, 0, false}}});
  CHECK(svg.find("<loss>") == std::string::npos);
  CHECK(svg.find("&lt;loss&gt; &amp; &quot;lr&quot;") != std::string::npos);
  CHECK(svg.find("data-name=\"run &quot;a&quot; &lt;b&gt;\"") != std::string::npos);
}

TEST_CASE("the legend shows a long name by its end, whole characters only", "[plot]") {
  // 36 bytes: the last 30 would start inside the two-byte "é", so the legend starts after it.
  const std::string name = "runs/\xC3\xA9" + std::string(29, 'y');
  const std::string svg = render_svg(chart_of({{name, {{1, 1}}, 0, false}}));
  CHECK(svg.find("data-name=\"" + name + "\"") != std::string::npos);
  const size_t text = svg.find(">\xE2\x80\xA6");  // the ellipsis starts the legend's text
  REQUIRE(text != std::string::npos);
  const std::string shown = svg.substr(text + 4, svg.find("</text>", text) - text - 4);
  CHECK(shown == std::string(29, 'y'));
  CHECK(render_svg(chart_of({{"short name", {{1, 1}}, 0, false}})).find("\xE2\x80\xA6") == std::string::npos);
}

TEST_CASE("an axis covers the data with ticks 1, 2 or 5 times a power of ten apart", "[plot]") {
  const std::vector<std::pair<double, double>> ranges = {{0.13, 9.7},  {1, 300},     {2.31, 2.37}, {-5, 3},
                                                         {3e-4, 3e-3}, {0, 1.2e9},   {1, 6},       {-0.5, -0.01},
                                                         {7.9, 8.3},   {0.001, 1e5}};
  for (const auto& [min, max] : ranges) {
    INFO("range " << min << " to " << max);
    const Axis axis = nice_axis(min, max);
    CHECK(axis.low <= min);
    CHECK(axis.high >= max);
    const double mantissa = axis.step / std::pow(10.0, std::floor(std::log10(axis.step)));
    CHECK((std::abs(mantissa - 1) < 1e-9 || std::abs(mantissa - 2) < 1e-9 || std::abs(mantissa - 5) < 1e-9));
    // No more than one step of slack at either end, and a readable number of ticks.
    CHECK(min - axis.low < axis.step * (1 + 1e-9));
    CHECK(axis.high - max < axis.step * (1 + 1e-9));
    CHECK(axis.ticks.size() >= 3);
    CHECK(axis.ticks.size() <= 6);
    CHECK(axis.ticks.front() == Approx(axis.low));
    CHECK(axis.ticks.back() == Approx(axis.high));
    for (size_t i = 1; i < axis.ticks.size(); ++i) CHECK(axis.ticks[i] - axis.ticks[i - 1] == Approx(axis.step));
  }
  const Axis one_to_ten = nice_axis(0.13, 9.7);  // a quarter of the span is 2.39: rounded up to 5
  CHECK(one_to_ten.step == 5);
  CHECK(one_to_ten.low == 0);
  CHECK(one_to_ten.high == 10);
}

TEST_CASE("a flat or single value gets an axis around it", "[plot]") {
  for (double value : {2.5, 0.0, -7.0, 3e-3}) {
    INFO("value " << value);
    const Axis axis = nice_axis(value, value);
    CHECK(axis.low < value);
    CHECK(axis.high > value);
  }
}

TEST_CASE("tick labels have the decimals their step needs", "[plot]") {
  CHECK(tick_label(0.25, 0.05) == "0.25");
  CHECK(tick_label(1500, 500) == "1500");
  CHECK(tick_label(0, 2) == "0");
  CHECK(tick_label(5e-4, 5e-4) == "5e-04");
  CHECK(tick_label(0, 2e-4) == "0");  // not "0e+00" at the foot of an lr axis
  CHECK(tick_label(1e9, 5e8) == "1.0e+09");
}

TEST_CASE("a series is one path with a command per point, placed linearly", "[plot]") {
  const std::vector<Point> points = {{1, 4.0}, {2, 3.0}, {3, 3.5}, {4, 1.0}, {5, 2.0}};
  const std::string svg = render_svg(chart_of({{"loss", points, 0, false}, {"other", {{1, 1}, {5, 4}}, 1, true}}));
  const auto paths = series_paths(svg);
  REQUIRE(paths.size() == 2);
  const auto commands = commands_of(paths[0]);
  REQUIRE(commands.size() == points.size());
  CHECK(commands[0].letter == 'M');
  for (size_t i = 1; i < commands.size(); ++i) CHECK(commands[i].letter == 'L');
  // Pixels are an affine map of the data: x grows right, y grows up (SVG's y grows down).
  const double x_scale = (commands[4].x - commands[0].x) / (points[4].x - points[0].x);
  const double y_scale = (commands[3].y - commands[0].y) / (points[3].y - points[0].y);
  CHECK(x_scale > 0);
  CHECK(y_scale < 0);
  for (size_t i = 0; i < points.size(); ++i) {
    CHECK(commands[i].x - commands[0].x == Approx(x_scale * (points[i].x - points[0].x)).margin(0.02));
    CHECK(commands[i].y - commands[0].y == Approx(y_scale * (points[i].y - points[0].y)).margin(0.02));
  }
  CHECK(svg.find("data-points=\"5\"") != std::string::npos);
  CHECK(count_of(svg, "stroke-dasharray") == 2);  // the dashed series and its legend sample
  CHECK(count_of(svg, "class=\"legend\"") == 2);
}

TEST_CASE("a series with markers has a dot on every point", "[plot]") {
  const std::string svg = render_svg(chart_of({{"loss", {{1, 3}, {2, 2}, {3, 1}}, 0, false},
                                               {"val_loss", {{1, 3.5}, {2, kNaN}, {3, 2.5}, {4, 2}}, 0, true, true}}));
  CHECK(count_of(svg, "<circle class=\"dot\"") == 3);  // val_loss's finite points; loss has none
  CHECK(commands_of(series_paths(svg)[1]).size() == 3);
}

TEST_CASE("a single point is a path of one move and a dot", "[plot]") {
  const std::string svg = render_svg(chart_of({{"val_loss", {{300, 4.2}}, 0, true}}));
  const auto paths = series_paths(svg);
  REQUIRE(paths.size() == 1);
  const auto commands = commands_of(paths[0]);
  REQUIRE(commands.size() == 1);
  CHECK(commands[0].letter == 'M');
  CHECK(count_of(svg, "<circle class=\"dot\"") == 1);
  CHECK(svg.find("no data") == std::string::npos);
}

TEST_CASE("NaN breaks the line; missing steps are simply absent", "[plot]") {
  const std::string svg =
      render_svg(chart_of({{"loss", {{1, 3}, {2, 2}, {3, kNaN}, {4, 1}, {5, 0.5}}, 0, false},
                           {"isolated", {{1, 1}, {2, kNaN}, {3, 2}, {4, kNaN}, {5, 3}}, 1, false},
                           {"val_loss", {{2, 2.5}, {5, 1.5}}, 0, true}}));
  const auto paths = series_paths(svg);
  REQUIRE(paths.size() == 3);
  const auto loss = commands_of(paths[0]);
  REQUIRE(loss.size() == 4);
  CHECK(std::string{loss[0].letter, loss[1].letter, loss[2].letter, loss[3].letter} == "MLML");
  CHECK(commands_of(paths[1]).size() == 3);
  CHECK(count_of(paths[1], "M") == 3);
  CHECK(count_of(svg, "<circle class=\"dot\"") == 3);  // the isolated series' three points
  CHECK(commands_of(paths[2]).size() == 2);
  CHECK(svg.find("nan") == std::string::npos);
}

TEST_CASE("a chart without a finite value says so", "[plot]") {
  const std::string svg = render_svg(chart_of({{"loss", {{1, kNaN}}, 0, false}}));
  CHECK(svg.find("no data") != std::string::npos);
  REQUIRE(series_paths(svg).size() == 1);
  CHECK(series_paths(svg)[0].empty());
}

TEST_CASE("the metrics reader takes every numeric field and the comms lines", "[plot]") {
  TempDir dir;
  const std::string path = dir.write(
      "run.jsonl",
      "{\"step\": 1, \"loss\": 5.5, \"lr\": 0.001, \"breakdown_ms\": {\"forward\": 3}, \"note\": \"x\"}\n"
      "\n"
      "{\"step\": 2, \"loss\": null, \"lr\": 0.002, \"val_loss\": 5.0}\n"
      "{\"step\": 2, \"comms\": [{\"op\": \"all_reduce\", \"bytes\": 4096, \"busbw_gbps\": 1.5, \"algorithm\": \"ring\"},"
      " {\"op\": \"broadcast\", \"bytes\": 64}]}\n");
  const Run run = read_run(path, "run");
  CHECK(run.lines == 3);
  REQUIRE(run.fields.at("loss").size() == 2);
  CHECK(run.fields.at("loss")[0].y == 5.5);
  CHECK(std::isnan(run.fields.at("loss")[1].y));
  REQUIRE(run.fields.at("val_loss").size() == 1);
  CHECK(run.fields.at("val_loss")[0].x == 2);
  CHECK(run.fields.count("breakdown_ms") == 0);
  CHECK(run.fields.count("note") == 0);
  REQUIRE(run.comms.size() == 2);
  CHECK(run.comms[0].op == "all_reduce");
  CHECK(run.comms[0].step == 2);
  CHECK(run.comms[0].figures.at("bytes") == 4096);
  CHECK(run.comms[0].figures.count("algorithm") == 0);
  CHECK(run.comms[1].figures.count("busbw_gbps") == 0);
}

TEST_CASE("the metrics reader names the file and the line it cannot read", "[plot]") {
  TempDir dir;
  const auto error_of = [](const std::string& path) -> ds::Error {
    try {
      read_run(path, "x");
    } catch (const ds::Error& error) {
      return error;
    }
    FAIL("no error for " << path);
    throw;
  };
  const std::string truncated = dir.write("cut.jsonl", "{\"step\": 1, \"loss\": 2}\n{\"step\": 2}\n{\"step\": 3, \"lo\n");
  const ds::Error cut = error_of(truncated);
  CHECK(cut.path() == truncated);
  CHECK(cut.message().rfind("line 3 is not JSON", 0) == 0);

  const ds::Error no_step = error_of(dir.write("nostep.jsonl", "{\"step\": 1}\n[1, 2]\n"));
  CHECK(no_step.message() == "line 2 has no integer \"step\"");

  const ds::Error bad_comms = error_of(dir.write("comms.jsonl", "{\"step\": 1, \"comms\": [{\"bytes\": 3}]}\n"));
  CHECK(bad_comms.message() == "line 1: a \"comms\" entry without an \"op\" name");

  CHECK(error_of(dir.write("empty.jsonl", "\n")).message() == "metrics file has no step lines");

  const ds::Error missing = error_of(dir.path() + "/absent.jsonl");
  CHECK(missing.path() == dir.path() + "/absent.jsonl");
  CHECK(missing.errnum() == ENOENT);
}

TEST_CASE("runs are named by file name, by path where two file names are alike", "[plot]") {
  TempDir dir;
  const std::string line = "{\"step\": 1, \"loss\": 1}\n";
  const std::string a = dir.write("a/metrics.jsonl", line), b = dir.write("b/metrics.jsonl", line);
  const std::string c = dir.write("c.jsonl", line);
  const auto runs = read_runs({a, b, c});
  REQUIRE(runs.size() == 3);
  CHECK(runs[0].name == a);
  CHECK(runs[1].name == b);
  CHECK(runs[2].name == "c.jsonl");
}

TEST_CASE("a page holds the charts of the figures some run has, each run a series", "[plot]") {
  Run first{"first <1>", "first.jsonl", 2, {{"loss", {{1, 3}, {2, 2}}}, {"val_loss", {{2, 2.5}}}, {"lr", {{1, 1}, {2, 2}}}}, {}};
  Run second{"second", "second.jsonl", 2, {{"loss", {{1, 4}, {2, 3}}}, {"mfu", {{1, 0.1}, {2, 0.2}}}}, {}};
  const std::string page = metrics_page({first, second});
  CHECK(page.rfind("<!DOCTYPE html>", 0) == 0);
  CHECK(page.find("<script") == std::string::npos);
  CHECK(page.find("http://") == page.find("http://www.w3.org/2000/svg"));  // nothing fetched
  CHECK(page.find("first &lt;1&gt;") != std::string::npos);
  CHECK(count_of(page, "<svg class=\"chart\"") == 3);  // loss, lr, MFU: no throughput, TFLOPS or memory
  CHECK(page.find("Model FLOPs utilization") != std::string::npos);
  CHECK(page.find("Throughput") == std::string::npos);
  CHECK(count_of(page, "<path class=\"series\"") == 5);  // 3 loss/val_loss, 1 lr, 1 mfu
  CHECK(page.find("Communication") == std::string::npos);

  second.comms = {{1, "all_reduce", {{"bytes", 4096}, {"busbw_gbps", 2}}},
                  {2, "all_reduce", {{"bytes", 4096}, {"busbw_gbps", 3}}},
                  {2, "broadcast", {{"bytes", 64}}}};
  const std::string with_comms = metrics_page({first, second});
  CHECK(with_comms.find("Communication") != std::string::npos);
  CHECK(with_comms.find("data-name=\"second all_reduce\" data-points=\"2\"") != std::string::npos);
  CHECK(count_of(with_comms, "data-name=\"second broadcast\"") == 1);  // bytes only: no busbw series
}

TEST_CASE("a grid chart draws a segment per instruction and refuses ragged rows", "[plot]") {
  GridChart chart{"schedule", "step", {"stage 0", "stage 1"}, {}, {{"Forward", "#00f"}, {"Send", "#0f0"}}};
  chart.cells = {{{{{0, "ForwardPass(buffer_id=0)"}, {1, "SendActivation(buffer_id=0)"}}, "F0"}, {{}, ""}},
                 {{{}, ""}, {{{0, "ForwardPass(buffer_id=0)"}}, "F0"}}};
  const std::string svg = render_svg(chart);
  CHECK(count_of(svg, "<rect class=\"segment\"") == 3);
  CHECK(count_of(svg, "data-row=\"0\" data-column=\"0\"") == 2);
  CHECK(svg.find("<title>SendActivation(buffer_id=0)</title>") != std::string::npos);

  chart.cells[1].pop_back();
  CHECK_THROWS_AS(render_svg(chart), ds::Error);
  chart.cells[1].push_back({{{5, "?"}}, ""});
  CHECK_THROWS_AS(render_svg(chart), ds::Error);
}
