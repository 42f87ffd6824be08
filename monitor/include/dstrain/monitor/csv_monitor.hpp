// CsvMonitor: DeepSpeed's csv_monitor. One file per event name in its folder, the name with '/'
// and ' ' made '_' ("Train/Samples/train_loss" -> Train_Samples_train_loss.csv), starting with the
// header "step,<last part of the name>" and then one "step,value" line per event. A file that
// already holds lines (a resumed run) is appended to without a second header.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "dstrain/monitor/monitor.hpp"

namespace ds::monitor {

class AppendFile;

class CsvMonitor : public Monitor {
 public:
  // Creates `folder` (and its parents); ds::Error with the path if it cannot.
  explicit CsvMonitor(std::string folder);
  ~CsvMonitor() override;

  void write_events(int64_t step, const std::vector<Event>& events) override;

  const std::string& folder() const { return folder_; }
  static std::string file_name(const std::string& event_name);

 private:
  AppendFile& file_for(const std::string& event_name);

  std::string folder_;
  std::map<std::string, std::unique_ptr<AppendFile>> files_;
};

}  // namespace ds::monitor
