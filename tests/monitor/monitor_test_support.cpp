#include "monitor_test_support.hpp"

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>

namespace ds::monitor::test {

ScratchFolder::ScratchFolder() {
  char pattern[] = "/tmp/dstrain_monitor_XXXXXX";
  path_ = ::mkdtemp(pattern);
}

ScratchFolder::~ScratchFolder() { std::filesystem::remove_all(path_); }

std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) lines.push_back(line);
  return lines;
}

std::vector<std::string> files_starting_with(const std::string& folder, const std::string& prefix) {
  std::vector<std::string> found;
  for (const auto& entry : std::filesystem::directory_iterator(folder))
    if (entry.path().filename().string().rfind(prefix, 0) == 0) found.push_back(entry.path().string());
  return found;
}

ReaderResult read_event_file(const std::string& path) {
  const std::string command = "python3 " MONITOR_TEST_DIR "/read_tfevents.py '" + path + "' 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  ReaderResult result;
  char buffer[4096];
  for (size_t n; (n = std::fread(buffer, 1, sizeof buffer, pipe)) > 0;) result.output.append(buffer, n);
  const int status = ::pclose(pipe);
  result.status = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  if (result.status == 0) result.events = nlohmann::json::parse(result.output);
  return result;
}

}  // namespace ds::monitor::test
