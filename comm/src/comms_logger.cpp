#include "dstrain/comm/comms_logger.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <set>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds::comm {
namespace {

// DeepSpeed's names for the ops whose name differs here (deepspeed.comm's function names).
const std::map<std::string, std::string>& deepspeed_names() {
  static const std::map<std::string, std::string> names = {
      {"all_gather_into_tensor", "all_gather_into"},
      {"allgather_fn", "all_gather_into"},
      {"reduce_scatter_tensor", "reduce_scatter_into"},
      {"reduce_scatter_fn", "reduce_scatter_into"},
      {"isend", "send"},
      {"irecv", "recv"},
  };
  return names;
}

bool read_bool(const nlohmann::json& block, const char* key, bool fallback) {
  if (!block.contains(key) || block[key].is_null()) return fallback;
  if (!block[key].is_boolean())
    throw Error(std::string("must be true or false, got ") + block[key].dump()).with_key(std::string("comms_logger.") + key);
  return block[key].get<bool>();
}

// "8.0 MB": DeepSpeed's convert_size (1024-based, two decimals at most).
std::string message_size(int64_t bytes) {
  static const char* const units[] = {"B", "KB", "MB", "GB", "TB", "PB"};
  if (bytes <= 0) return "0B";
  int unit = std::min(5, static_cast<int>(std::floor(std::log(static_cast<double>(bytes)) / std::log(1024.0))));
  const double value = std::round(bytes / std::pow(1024.0, unit) * 100) / 100;
  char text[32];
  std::snprintf(text, sizeof text, "%g %s", value, units[unit]);
  return text;
}

// The ops a backend records, by the names the summary uses.
const std::vector<std::string>& logged_ops() {
  static const std::vector<std::string> ops = {"all_reduce",  "all_gather",          "all_gather_into",
                                               "reduce_scatter", "reduce_scatter_into", "broadcast",
                                               "send",        "recv",                "barrier",
                                               "compressed_allreduce", "quantized_all_gather",
                                               "quantized_reduce_scatter"};
  return ops;
}

}  // namespace

CommsLoggerSettings CommsLoggerSettings::from_json(const nlohmann::json& block) {
  CommsLoggerSettings settings;
  if (block.is_null()) return settings;
  if (!block.is_object()) throw Error("must be an object, got " + block.dump()).with_key("comms_logger");
  static const std::set<std::string> known = {"enabled", "verbose", "prof_all", "prof_ops", "debug"};
  for (const auto& item : block.items())
    if (!known.count(item.key()))
      throw Error("unknown key (known: enabled, verbose, prof_all, prof_ops, debug)")
          .with_key("comms_logger." + item.key());
  settings.enabled = read_bool(block, "enabled", settings.enabled);
  settings.verbose = read_bool(block, "verbose", settings.verbose);
  settings.prof_all = read_bool(block, "prof_all", settings.prof_all);
  settings.debug = read_bool(block, "debug", settings.debug);
  if (block.contains("prof_ops") && !block["prof_ops"].is_null()) {
    const nlohmann::json& ops = block["prof_ops"];
    if (!ops.is_array()) throw Error("must be a list of op names, got " + ops.dump()).with_key("comms_logger.prof_ops");
    for (const nlohmann::json& op : ops) {
      if (!op.is_string()) throw Error("must be a list of op names, got " + ops.dump()).with_key("comms_logger.prof_ops");
      std::string name = op.get<std::string>();
      if (auto alias = deepspeed_names().find(name); alias != deepspeed_names().end()) name = alias->second;
      const auto& all = logged_ops();
      if (std::find(all.begin(), all.end(), name) == all.end()) {
        std::string list;
        for (const auto& known_op : all) list += (list.empty() ? "" : ", ") + known_op;
        throw Error("no backend has an op '" + op.get<std::string>() + "' (ops: " + list + ")")
            .with_key("comms_logger.prof_ops");
      }
      settings.prof_ops.push_back(name);
    }
  }
  return settings;
}

double bus_factor(const std::string& op, int group_size) {
  const double n = std::max(1, group_size);
  if (op == "all_reduce" || op == "compressed_allreduce") return 2 * (n - 1) / n;
  if (op == "all_gather" || op == "all_gather_into" || op == "reduce_scatter" || op == "reduce_scatter_into" ||
      op == "quantized_all_gather" || op == "quantized_reduce_scatter")
    return (n - 1) / n;
  if (op == "barrier") return 0;
  return 1;  // broadcast, send, recv
}

Bandwidth bandwidth(const std::string& op, int64_t bytes, double seconds, int group_size) {
  if (seconds <= 0) return {};
  const double algbw = bytes * 8 / seconds / 1e9;
  return {algbw, algbw * bus_factor(op, group_size)};
}

void CommsLogger::configure(CommsLoggerSettings settings) {
  std::lock_guard<std::mutex> lock(mutex_);
  settings_ = std::move(settings);
  totals_.clear();
}

bool CommsLogger::records(const char* op) const {
  if (!settings_.enabled) return false;
  if (settings_.prof_all) return true;
  return std::find(settings_.prof_ops.begin(), settings_.prof_ops.end(), op) != settings_.prof_ops.end();
}

CommsLogger::Timing CommsLogger::begin(const char* op, int64_t bytes, const char* algorithm) const {
  if (!records(op)) return {};
  return {op, bytes, algorithm, Clock::now()};
}

void CommsLogger::end(const Timing& timing, int group_size) {
  if (!timing.op) return;
  const double seconds = std::chrono::duration<double>(Clock::now() - timing.start).count();
  {
    std::lock_guard<std::mutex> lock(mutex_);
    Totals& totals = totals_[{timing.op, timing.bytes}];
    ++totals.count;
    totals.seconds += seconds;
    totals.bus_bytes += timing.bytes * bus_factor(timing.op, group_size);
    totals.algorithm = timing.algorithm;
  }
  if (settings_.verbose) {
    const Bandwidth bw = bandwidth(timing.op, timing.bytes, seconds, group_size);
    char text[160];
    std::snprintf(text, sizeof text, " | time (ms): %.2f | msg size: %s | algbw (Gbps): %.2f | busbw (Gbps): %.2f | ",
                  seconds * 1e3, message_size(timing.bytes).c_str(), bw.algbw_gbps, bw.busbw_gbps);
    log::info("comm op: ", timing.op, text, timing.algorithm);
  }
}

std::vector<CommSummaryRow> CommsLogger::summary() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<CommSummaryRow> rows;
  for (const auto& [key, totals] : totals_) {
    CommSummaryRow row;
    row.op = key.first;
    row.bytes = key.second;
    row.count = totals.count;
    row.total_seconds = totals.seconds;
    row.algorithm = totals.algorithm;
    if (totals.seconds > 0) {
      row.algbw_gbps = static_cast<double>(row.bytes) * totals.count * 8 / totals.seconds / 1e9;
      row.busbw_gbps = totals.bus_bytes * 8 / totals.seconds / 1e9;
    }
    rows.push_back(std::move(row));
  }
  return rows;
}

std::string format_comms_summary(const std::vector<CommSummaryRow>& rows) {
  char line[256];
  std::snprintf(line, sizeof line, "%-22s%-14s%-10s%-20s%-18s%-16s%-17s%s", "Comm. Op", "Message Size", "Count",
                "Total Latency(ms)", "Avg Latency(ms)", "tput_avg (Gbps)", "busbw_avg (Gbps)", "Algorithm");
  std::string text = line;
  std::string op;
  for (const CommSummaryRow& row : rows) {
    if (row.op != op) {
      op = row.op;
      text += "\n" + op;
    }
    std::snprintf(line, sizeof line, "\n%-22s%-14s%-10lld%-20.2f%-18.3f%-16.2f%-17.2f%s", "",
                  message_size(row.bytes).c_str(), static_cast<long long>(row.count), row.total_seconds * 1e3,
                  row.average_ms(), row.algbw_gbps, row.busbw_gbps, row.algorithm.c_str());
    text += line;
  }
  return text;
}

}  // namespace ds::comm
