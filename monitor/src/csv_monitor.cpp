#include "dstrain/monitor/csv_monitor.hpp"

#include <charconv>

#include "append_file.hpp"
#include "create_folder.hpp"

namespace ds::monitor {
namespace {

// The shortest text that reads back as the same double (Python's csv writes repr(), also exact).
std::string shortest(double value) {
  char text[32];
  const auto end = std::to_chars(text, text + sizeof text, value).ptr;
  return std::string(text, end);
}

}  // namespace

CsvMonitor::CsvMonitor(std::string folder) : folder_(std::move(folder)) { create_folder(folder_); }

CsvMonitor::~CsvMonitor() = default;

std::string CsvMonitor::file_name(const std::string& event_name) {
  std::string name = event_name;
  for (char& c : name)
    if (c == '/' || c == ' ') c = '_';
  return name + ".csv";
}

AppendFile& CsvMonitor::file_for(const std::string& event_name) {
  auto found = files_.find(event_name);
  if (found != files_.end()) return *found->second;
  auto file = std::make_unique<AppendFile>(folder_ + "/" + file_name(event_name));
  if (file->size_at_open() == 0) file->append("step," + event_name.substr(event_name.rfind('/') + 1) + "\n");
  return *files_.emplace(event_name, std::move(file)).first->second;
}

void CsvMonitor::write_events(int64_t step, const std::vector<Event>& events) {
  for (const Event& event : events)
    file_for(event.name).append(std::to_string(step) + "," + shortest(event.value) + "\n");
}

}  // namespace ds::monitor
