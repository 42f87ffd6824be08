#include "dstrain/plot/metrics_runs.hpp"

#include <cerrno>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "dstrain/runtime/error.hpp"

namespace ds::plot {
namespace {

using nlohmann::json;

double value_of(const json& value) {
  return value.is_null() ? std::numeric_limits<double>::quiet_NaN() : value.get<double>();
}

std::string line_text(int64_t number) { return "line " + std::to_string(number); }

void read_comms(const json& comms, int64_t step, int64_t number, const std::string& path, Run& run) {
  if (!comms.is_array()) throw Error(line_text(number) + ": \"comms\" is not an array").with_path(path);
  for (const json& entry : comms) {
    if (!entry.is_object() || !entry.contains("op") || !entry["op"].is_string())
      throw Error(line_text(number) + ": a \"comms\" entry without an \"op\" name").with_path(path);
    CommsEntry parsed{step, entry["op"].get<std::string>(), {}};
    for (const auto& [key, value] : entry.items()) {
      if (value.is_number() || value.is_null()) parsed.figures[key] = value_of(value);
    }
    run.comms.push_back(std::move(parsed));
  }
}

// "runs/a.jsonl" -> "a.jsonl"; the legend shows which file a curve came from.
std::string file_name(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

}  // namespace

Run read_run(const std::string& path, const std::string& name) {
  std::ifstream in(path);
  if (!in) throw Error("cannot open metrics file").with_path(path).with_errno(errno);
  Run run;
  run.name = name;
  run.path = path;
  std::string text;
  for (int64_t number = 1; std::getline(in, text); ++number) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;
    json line;
    try {
      line = json::parse(text);
    } catch (const json::parse_error& e) {
      throw Error(line_text(number) + " is not JSON (" + e.what() + ")").with_path(path);
    }
    if (!line.is_object() || !line.contains("step") || !line["step"].is_number_integer())
      throw Error(line_text(number) + " has no integer \"step\"").with_path(path);
    const int64_t step = line["step"].get<int64_t>();
    for (const auto& [key, value] : line.items()) {
      if (key == "step") continue;
      if (key == "comms") read_comms(value, step, number, path, run);
      else if (value.is_number() || value.is_null())
        run.fields[key].push_back({static_cast<double>(step), value_of(value)});
    }
    ++run.lines;
  }
  if (in.bad()) throw Error("cannot read metrics file").with_path(path).with_errno(errno);
  if (run.lines == 0) throw Error("metrics file has no step lines").with_path(path);
  return run;
}

std::vector<Run> read_runs(const std::vector<std::string>& paths) {
  std::set<std::string> names, repeated;
  for (const std::string& path : paths) {
    if (!names.insert(file_name(path)).second) repeated.insert(file_name(path));
  }
  std::vector<Run> runs;
  for (const std::string& path : paths) {
    runs.push_back(read_run(path, repeated.count(file_name(path)) ? path : file_name(path)));
  }
  return runs;
}

}  // namespace ds::plot
