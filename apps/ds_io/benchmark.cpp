#include "benchmark.hpp"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include "dstrain/runtime/error.hpp"
#include "process_io.hpp"

namespace ds::io_bench {

std::string file_of(const std::string& folder, int process) {
  return folder + "/ds_io_" + std::to_string(process) + ".dat";
}

double RunResult::loop_latency_s(int loop) const {
  double first_start = processes.front().loops[loop].start_s;
  double last_end = processes.front().loops[loop].end_s;
  for (const ProcessResult& process : processes) {
    first_start = std::min(first_start, process.loops[loop].start_s);
    last_end = std::max(last_end, process.loops[loop].end_s);
  }
  return last_end - first_start;
}

double RunResult::total_latency_s() const {
  double total = 0;
  for (size_t loop = 0; loop < processes.front().loops.size(); ++loop) total += loop_latency_s(static_cast<int>(loop));
  return total;
}

double RunResult::gb_per_s() const {
  const double bytes = static_cast<double>(loop_bytes()) * static_cast<double>(processes.front().loops.size());
  return bytes / total_latency_s() / 1e9;
}

double RunResult::cpu_s_per_gb() const {
  double cpu = 0;
  for (const ProcessResult& process : processes) cpu += process.cpu_s;
  const double bytes = static_cast<double>(loop_bytes()) * static_cast<double>(processes.front().loops.size());
  return cpu / (bytes / 1e9);
}

double RunResult::direct_fraction() const {
  double direct = 0, all = 0;
  for (const ProcessResult& process : processes) {
    direct += static_cast<double>(process.direct_bytes);
    all += static_cast<double>(process.direct_bytes + process.buffered_bytes);
  }
  return all > 0 ? direct / all : 0;
}

namespace {

struct Child {
  pid_t pid = -1;
  int go = -1;              // parent -> child: one byte releases a barrier
  FILE* lines = nullptr;    // child -> parent: the report lines of process_io.hpp
  std::vector<std::string> results;  // lines other than "ready", kept for collect()
};

std::string next_line(const Child& child) {
  char* line = nullptr;
  size_t capacity = 0;
  ssize_t length = ::getline(&line, &capacity, child.lines);
  std::string text = length > 0 ? std::string(line, static_cast<size_t>(length)) : "";
  std::free(line);
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

Child spawn(const Options& options, bool read, const io::AioSettings& settings, int process,
            const std::vector<Child>& siblings) {
  int up[2], down[2];
  if (::pipe2(up, O_CLOEXEC) != 0 || ::pipe2(down, O_CLOEXEC) != 0)
    throw Error("cannot create the pipes to a ds_io process").with_errno(errno);
  std::fflush(nullptr);  // or the child would inherit, and one day print, the parent's buffered output
  pid_t pid = ::fork();
  if (pid < 0) throw Error("cannot fork a ds_io process").with_errno(errno);
  if (pid == 0) {
    // The siblings' pipe ends stay with the parent, so that closing them there reaches the siblings.
    for (const Child& sibling : siblings) {
      ::close(sibling.go);
      std::fclose(sibling.lines);
    }
    ::close(up[0]);
    ::close(down[1]);
    ParentLink link{up[1], down[0]};
    try {
      run_process(options, read, settings, process, link);
    } catch (const std::exception& error) {
      link.send(std::string("error ") + error.what());
      ::_exit(1);
    }
    ::_exit(0);
  }
  ::close(up[1]);
  ::close(down[0]);
  return Child{pid, down[1], ::fdopen(up[0], "r"), {}};
}

// Reads up to the child's next "ready"; returns why it will not come, or "" when it came.
std::string await_ready(Child& child) {
  for (std::string line = next_line(child); !line.empty(); line = next_line(child)) {
    if (line == "ready") return "";
    if (line.rfind("error ", 0) == 0) return line.substr(6);
    child.results.push_back(line);
  }
  return "exited early";
}

// Parses everything the process reported. Returns its error, if any.
std::string collect(Child& child, ProcessResult& result) {
  for (std::string line = next_line(child); !line.empty(); line = next_line(child)) child.results.push_back(line);
  for (const std::string& line : child.results) {
    const std::string word = line.substr(0, line.find(' '));
    const std::string rest = line.size() > word.size() ? line.substr(word.size() + 1) : "";
    if (word == "loop") {
      LoopTiming timing;
      std::sscanf(rest.c_str(), "%lf %lf", &timing.start_s, &timing.end_s);
      result.loops.push_back(timing);
    } else if (word == "cpu") {
      result.cpu_s = std::stod(rest);
    } else if (word == "bytes") {
      std::sscanf(rest.c_str(), "%ld %ld", &result.direct_bytes, &result.buffered_bytes);
    } else if (word == "invalid") {
      result.validation_error = rest;
    } else if (word == "error") {
      return rest;
    } else {
      return "unexpected report line '" + line + "'";
    }
  }
  return "";
}

}  // namespace

RunResult run_benchmark(const Options& options, bool read, const io::AioSettings& settings) {
  std::vector<Child> children;
  for (int process = 0; process < options.multi_process; ++process)
    children.push_back(spawn(options, read, settings, process, children));

  // One barrier per loop, as DeepSpeed's ds_io: every process starts loop i together.
  std::string failure;
  for (int loop = 0; loop < options.loops && failure.empty(); ++loop) {
    for (size_t p = 0; p < children.size() && failure.empty(); ++p) {
      std::string why = await_ready(children[p]);
      if (!why.empty()) failure = "process " + std::to_string(p) + ": " + why;
    }
    if (failure.empty())
      for (const Child& child : children)
        if (::write(child.go, "g", 1) != 1) failure = "a ds_io process went away";
  }
  // Closing the go pipes releases anyone still waiting at a barrier after a failure.
  for (const Child& child : children) ::close(child.go);

  RunResult result{read, options.io_size, std::vector<ProcessResult>(children.size())};
  for (size_t p = 0; p < children.size(); ++p) {
    std::string error = collect(children[p], result.processes[p]);
    std::fclose(children[p].lines);
    int status = 0;
    ::waitpid(children[p].pid, &status, 0);
    if (failure.empty() && !error.empty()) failure = "process " + std::to_string(p) + ": " + error;
    if (failure.empty() && !(WIFEXITED(status) && WEXITSTATUS(status) == 0))
      failure = "process " + std::to_string(p) + " ended abnormally";
    if (failure.empty() && result.processes[p].loops.size() != static_cast<size_t>(options.loops))
      failure = "process " + std::to_string(p) + " reported too few loops";
  }
  if (!failure.empty()) throw Error("ds_io " + std::string(read ? "read" : "write") + " failed in " + failure);
  return result;
}

}  // namespace ds::io_bench
