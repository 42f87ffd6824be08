#include "dstrain/monitor/monitor_set.hpp"

#include "dstrain/monitor/csv_monitor.hpp"
#include "dstrain/monitor/tensorboard_writer.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/json_block.hpp"

namespace ds::monitor {
namespace {

struct MonitorBlock {
  bool enabled = false;
  std::string folder;  // output_path/job_name
};

// DeepSpeed's TensorBoardConfig and CSVConfig: the same three keys, unknown ones refused.
MonitorBlock read_block(const nlohmann::json& blocks, const std::string& name) {
  JsonBlock block(blocks.contains(name) ? blocks.at(name) : nlohmann::json(), name);
  MonitorBlock result;
  result.enabled = block.boolean("enabled", false);
  const std::string output_path = block.string("output_path", "");
  const std::string job_name = block.string("job_name", "DeepSpeedJobName");
  block.reject_unknown_keys();
  // os.path.join's rule: an empty output_path is the working folder.
  result.folder = output_path.empty() ? job_name
                  : output_path.back() == '/' ? output_path + job_name
                                              : output_path + "/" + job_name;
  return result;
}

// A folder that cannot be created names the key that chose it.
template <typename MonitorType>
std::unique_ptr<Monitor> open_monitor(const std::string& name, const std::string& folder) {
  try {
    return std::make_unique<MonitorType>(folder);
  } catch (Error& e) {
    e.with_key(name + ".output_path");
    throw;
  }
}

}  // namespace

MonitorSet::MonitorSet(const nlohmann::json& blocks, int rank) {
  const MonitorBlock tensorboard = read_block(blocks, "tensorboard");
  const MonitorBlock csv = read_block(blocks, "csv_monitor");
  if (rank != 0) return;
  if (tensorboard.enabled) {
    monitors_.push_back(open_monitor<TensorBoardWriter>("tensorboard", tensorboard.folder));
    destinations_.push_back("tensorboard events in " + static_cast<TensorBoardWriter&>(*monitors_.back()).path());
  }
  if (csv.enabled) {
    monitors_.push_back(open_monitor<CsvMonitor>("csv_monitor", csv.folder));
    destinations_.push_back("csv files in " + csv.folder);
  }
}

MonitorSet::~MonitorSet() = default;

void MonitorSet::write_events(int64_t step, const std::vector<Event>& events) {
  for (auto& monitor : monitors_) monitor->write_events(step, events);
}

}  // namespace ds::monitor
