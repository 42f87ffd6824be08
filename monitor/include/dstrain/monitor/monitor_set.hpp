// MonitorSet: the monitors a DeepSpeed config enables, as DeepSpeed's MonitorMaster. It reads the
// "tensorboard" and "csv_monitor" blocks (keys enabled, output_path, job_name; DeepSpeed's
// defaults false, "" and "DeepSpeedJobName"); each enabled one writes under output_path/job_name,
// on rank 0 only. Every event goes to each of them.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "dstrain/monitor/monitor.hpp"

namespace ds::monitor {

class MonitorSet : public Monitor {
 public:
  // `blocks`: an object holding the config's top-level blocks (Config::untyped()). Throws
  // ds::Error naming the key for a block that is not an object, a key of the wrong type or one
  // DeepSpeed does not have, and naming the key and the path for a folder that cannot be created.
  MonitorSet(const nlohmann::json& blocks, int rank);
  ~MonitorSet() override;

  void write_events(int64_t step, const std::vector<Event>& events) override;

  bool empty() const { return monitors_.empty(); }
  // What is written where, for the start-up log: "tensorboard events in DIR", ...
  const std::vector<std::string>& destinations() const { return destinations_; }

 private:
  std::vector<std::unique_ptr<Monitor>> monitors_;
  std::vector<std::string> destinations_;
};

}  // namespace ds::monitor
