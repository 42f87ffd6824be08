#include "preemption.hpp"

#include <signal.h>
#include <unistd.h>

#include <ATen/ATen.h>

#include <algorithm>
#include <cctype>
#include <cstring>
#include <sstream>

#include "dstrain/runtime/error.hpp"

namespace ds::app {
namespace {

// A signal handler can only reach the trainer through process-wide state: the first signal
// received, and how long the save may take after it.
volatile sig_atomic_t received = 0;
unsigned timeout = 0;

void on_signal(int signo) {
  if (received != 0) {
    // Asked twice: the user (or the scheduler) will not wait for the save.
    ::signal(signo, SIG_DFL);
    ::raise(signo);
    return;
  }
  received = signo;
  if (timeout > 0) ::alarm(timeout);
}

int signal_named(std::string name) {
  if (!name.empty() && std::all_of(name.begin(), name.end(), [](unsigned char c) { return std::isdigit(c) != 0; }))
    return std::stoi(name);
  for (char& c : name) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (name.rfind("SIG", 0) == 0) name = name.substr(3);
  for (int signo = 1; signo < NSIG; ++signo)
    if (const char* abbrev = ::sigabbrev_np(signo); abbrev != nullptr && name == abbrev) return signo;
  return 0;
}

}  // namespace

std::vector<int> parse_signal_list(const std::string& list) {
  std::vector<int> signals;
  if (list == "none") return signals;
  std::istringstream names(list);
  for (std::string name; std::getline(names, name, ',');) {
    const int signo = signal_named(name);
    if (signo <= 0 || signo >= NSIG || signo == SIGKILL || signo == SIGSTOP)
      throw Error("'" + name + "' is not a signal the trainer can catch (e.g. TERM,USR1, or none)")
          .with_key("--preempt-signals");
    signals.push_back(signo);
  }
  return signals;
}

Preemption::Preemption(const std::vector<int>& signals, unsigned timeout_seconds) : signals_(signals) {
  received = 0;
  timeout = timeout_seconds;
  struct sigaction action {};
  action.sa_handler = on_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // a signal must not fail a read, a write or an MPI call in progress
  previous_.resize(signals_.size());
  for (size_t i = 0; i < signals_.size(); ++i)
    if (::sigaction(signals_[i], &action, &previous_[i]) != 0)
      throw Error("cannot install the handler of signal " + std::to_string(signals_[i])).with_errno(errno);
}

Preemption::~Preemption() {
  // A pending alarm stays: it bounds the rest of the exit (MPI_Finalize) too.
  for (size_t i = 0; i < signals_.size(); ++i) ::sigaction(signals_[i], &previous_[i], nullptr);
}

bool Preemption::requested(comm::Backend& world) {
  if (signals_.empty()) return false;  // every rank was given the same --preempt-signals
  at::Tensor flag = at::full({1}, received != 0 ? 1.0f : 0.0f, at::kFloat);
  world.all_reduce(flag, comm::ReduceOp::Max);
  return flag.item<float>() > 0;
}

int Preemption::signal() const { return received; }

}  // namespace ds::app
