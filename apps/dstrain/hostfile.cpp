#include "hostfile.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>
#include <thread>

#include "dstrain/runtime/error.hpp"

namespace ds::app {
namespace {

// What a host prints when it answered: the executable is there, or not.
constexpr const char* kFound = "dstrain-check-found";
constexpr const char* kMissing = "dstrain-check-missing";

std::vector<std::string> words_of(const std::string& text) {
  std::istringstream in(text);
  std::vector<std::string> words;
  for (std::string word; in >> word;) words.push_back(word);
  return words;
}

// One agent call in flight: its process group, and the pipe that collects its stdout and stderr.
struct Probe {
  pid_t pid = -1;
  int output = -1;
  int status = 0;
  bool done = false;
};

Probe start_probe(const std::vector<std::string>& argv) {
  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) throw Error("cannot create a pipe for the host check").with_errno(errno);
  Probe probe;
  probe.pid = ::fork();
  if (probe.pid < 0) throw Error("cannot fork for the host check").with_errno(errno);
  if (probe.pid == 0) {
    ::setpgid(0, 0);  // its own group: a timeout kills the agent and whatever it started
    const int null = ::open("/dev/null", O_RDONLY);
    ::dup2(null, 0);
    ::dup2(fds[1], 1);
    ::dup2(fds[1], 2);
    std::vector<char*> args;
    for (const std::string& word : argv) args.push_back(const_cast<char*>(word.c_str()));
    args.push_back(nullptr);
    ::execvp(args[0], args.data());
    const std::string message = "cannot run " + argv[0] + ": " + std::strerror(errno) + "\n";
    (void)!::write(2, message.data(), message.size());
    ::_exit(127);
  }
  ::close(fds[1]);
  probe.output = fds[0];
  ::fcntl(probe.output, F_SETFL, O_NONBLOCK);
  return probe;
}

std::string drain(int fd) {
  std::string text;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) text.append(buffer, static_cast<size_t>(n));
  return text;
}

std::string last_line(const std::string& text) {
  std::string line, last;
  std::istringstream in(text);
  while (std::getline(in, line))
    if (line.find_first_not_of(" \t\r") != std::string::npos) last = line;
  return last;
}

}  // namespace

std::vector<HostSlots> read_hostfile(const std::string& path) {
  std::ifstream in(path);
  if (!in) throw Error("cannot read the hostfile").with_path(path).with_errno(errno);
  // DeepSpeed's runner accepts exactly this shape (deepspeed/launcher/runner.py, _parse_hostfile).
  static const std::regex kLine(R"(^\s*(\S+)\s+slots\s*=\s*(\d+)\s*$)");
  std::vector<HostSlots> hosts;
  std::set<std::string> seen;
  std::string line;
  for (int number = 1; std::getline(in, line); ++number) {
    line = line.substr(0, line.find('#'));
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    std::smatch match;
    const std::string where = path + ":" + std::to_string(number);
    if (!std::regex_match(line, match, kLine))
      throw Error(where + ": '" + line + "' is not 'HOST slots=N'").with_path(path);
    const std::string digits = match[2].str();
    const int slots = digits.size() > 6 ? 0 : std::stoi(digits);
    if (slots < 1) throw Error(where + ": host " + match[1].str() + " has slots=" + digits + ", not 1 to 999999").with_path(path);
    if (!seen.insert(match[1].str()).second)
      throw Error(where + ": host " + match[1].str() + " is named twice").with_path(path);
    hosts.push_back({match[1].str(), slots, number});
  }
  if (hosts.empty()) throw Error("the hostfile names no host").with_path(path);
  return hosts;
}

std::vector<std::string> unreachable_hosts(const std::vector<HostSlots>& hosts, const std::string& hostfile,
                                           const std::string& agent, const std::string& executable,
                                           double timeout_seconds) {
  const std::vector<std::string> agent_words = words_of(agent);
  if (agent_words.empty()) throw Error("the rsh agent is empty").with_key("--agent");
  std::vector<Probe> probes;
  for (const HostSlots& host : hosts) {
    std::vector<std::string> argv = agent_words;
    for (const std::string& word : {host.host, std::string("test"), std::string("-x"), executable, std::string("&&"),
                                    std::string("echo"), std::string(kFound), std::string("||"), std::string("echo"),
                                    std::string(kMissing)})
      argv.push_back(word);
    probes.push_back(start_probe(argv));
  }
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  std::vector<std::string> outputs(hosts.size());
  for (bool waiting = true; waiting && std::chrono::steady_clock::now() < deadline;) {
    waiting = false;
    for (size_t i = 0; i < probes.size(); ++i) {
      if (probes[i].done) continue;
      outputs[i] += drain(probes[i].output);
      if (::waitpid(probes[i].pid, &probes[i].status, WNOHANG) == probes[i].pid) probes[i].done = true;
      else waiting = true;
    }
    if (waiting) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::vector<std::string> problems;
  for (size_t i = 0; i < probes.size(); ++i) {
    Probe& probe = probes[i];
    if (!probe.done) {
      ::kill(-probe.pid, SIGKILL);
      ::waitpid(probe.pid, &probe.status, 0);
    }
    outputs[i] += drain(probe.output);
    ::close(probe.output);
    const std::string where = "host " + hosts[i].host + " (" + hostfile + ":" + std::to_string(hosts[i].line) + ")";
    std::ostringstream seconds;
    seconds << timeout_seconds;
    if (!probe.done)
      problems.push_back(where + " did not answer through '" + agent + "' within " + seconds.str() + " s");
    else if (outputs[i].find(kFound) != std::string::npos)
      continue;
    else if (outputs[i].find(kMissing) != std::string::npos)
      problems.push_back(where + " answers but has no executable " + executable +
                         ": every node needs the same build at the same path");
    else
      problems.push_back(where + " does not answer through '" + agent + "' (exit " +
                         std::to_string(WIFEXITED(probe.status) ? WEXITSTATUS(probe.status) : 128 + WTERMSIG(probe.status)) +
                         (last_line(outputs[i]).empty() ? "" : ": " + last_line(outputs[i])) + ")");
  }
  return problems;
}

}  // namespace ds::app
