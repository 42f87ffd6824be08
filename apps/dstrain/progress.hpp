// The terminal's share of a command's output: whether a progress bar is drawn, and the bar.
//
// --progress auto (the default) draws the bar only when the user watches a terminal that wants one:
// not with NO_COLOR set or TERM unset or "dumb"; and the terminal asked about is the user's. Under
// Open MPI (OMPI_COMM_WORLD_SIZE in the environment) a rank's own stdout says nothing about it:
// mpirun forwards the ranks' output through pipes (or ptys it makes itself, which makes isatty say
// yes even when mpirun's output goes to a file). So a rank asks about its parent's stdout,
// /proc/PPID/fd/1: mpirun's on mpirun's node, the daemon's (never a terminal) on other nodes.
// Without Open MPI it is the process's own stdout. --progress on and off force it.
// With no bar, the commands print one plain line per print interval instead.
#pragma once

#include <CLI/CLI.hpp>

#include <chrono>
#include <string>

namespace ds::app {

enum class ProgressMode { Auto, On, Off };

// --progress auto|on|off.
void add_progress_option(CLI::App& app, ProgressMode& mode);

// Whether this process draws a progress bar on stdout (callers add their own rank rule).
bool draws_progress(ProgressMode mode);

// "42s", "3m05s", "2h07m".
std::string format_duration(double seconds);

// A one-line bar redrawn in place ('\r'): done of total units, the caller's detail, the rate since
// `started` (when `begin` units were done) and the time left at that rate.
class ProgressBar {
 public:
  ProgressBar(double begin, double total, std::string unit,
              std::chrono::steady_clock::time_point started = std::chrono::steady_clock::now());

  // Draws "[####      ] done/total unit | detail | rate unit/s | ETA 1m05s".
  void draw(double done, const std::string& detail);
  // Ends the line, so that what is printed next starts on its own.
  void finish();

  // Units per second since `started`, and the time left at that rate ("?" before any progress).
  double rate(double done) const;
  std::string time_left(double done) const;

 private:
  double begin_;
  double total_;
  std::string unit_;
  std::chrono::steady_clock::time_point start_;
  bool drawn_ = false;
};

}  // namespace ds::app
