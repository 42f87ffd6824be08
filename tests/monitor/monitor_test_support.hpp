// What the monitor tests share: a scratch folder removed at the end, a file's lines, and the
// independent Python reader of event files (read_tfevents.py) run on a file.
#pragma once

#include <nlohmann/json.hpp>

#include <string>
#include <vector>

namespace ds::monitor::test {

class ScratchFolder {
 public:
  ScratchFolder();
  ~ScratchFolder();
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

std::vector<std::string> lines_of(const std::string& path);

// The files in `folder` whose names start with `prefix`.
std::vector<std::string> files_starting_with(const std::string& folder, const std::string& prefix);

struct ReaderResult {
  int status = 0;              // the reader's exit status
  nlohmann::json events;       // its output when status is 0
  std::string output;          // stdout and stderr together
};
ReaderResult read_event_file(const std::string& path);

}  // namespace ds::monitor::test
