#include "progress.hpp"

#include <sys/stat.h>
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>

namespace ds::app {
namespace {

bool is_terminal(const char* path) {
  struct stat info {};
  if (::stat(path, &info) != 0 || !S_ISCHR(info.st_mode)) return false;  // opening a FIFO could block
  const int fd = ::open(path, O_RDONLY | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return false;
  const bool terminal = ::isatty(fd);
  ::close(fd);
  return terminal;
}

bool user_watches_a_terminal() {
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) {
    const std::string launcher_stdout = "/proc/" + std::to_string(::getppid()) + "/fd/1";
    return is_terminal(launcher_stdout.c_str());
  }
  return ::isatty(STDOUT_FILENO);
}

bool terminal_wants_a_bar() {
  const char* no_color = std::getenv("NO_COLOR");
  const char* term = std::getenv("TERM");
  return !(no_color && *no_color) && term && *term && std::strcmp(term, "dumb") != 0;
}

}  // namespace

void add_progress_option(CLI::App& app, ProgressMode& mode) {
  const std::map<std::string, ProgressMode> names{
      {"auto", ProgressMode::Auto}, {"on", ProgressMode::On}, {"off", ProgressMode::Off}};
  app.add_option("--progress", mode,
                 "progress bar: auto (only on a terminal: mpirun's under Open MPI; not with NO_COLOR or TERM=dumb), "
                 "on, or off (one plain line per print interval)")
      ->transform(CLI::CheckedTransformer(names, CLI::ignore_case))
      ->option_text("auto|on|off");
}

bool draws_progress(ProgressMode mode) {
  if (mode != ProgressMode::Auto) return mode == ProgressMode::On;
  return terminal_wants_a_bar() && user_watches_a_terminal();
}

std::string format_duration(double seconds) {
  const long long s = static_cast<long long>(std::max(0.0, seconds) + 0.5);
  char text[32];
  if (s < 60) std::snprintf(text, sizeof text, "%llds", s);
  else if (s < 3600) std::snprintf(text, sizeof text, "%lldm%02llds", s / 60, s % 60);
  else std::snprintf(text, sizeof text, "%lldh%02lldm", s / 3600, s / 60 % 60);
  return text;
}

ProgressBar::ProgressBar(double begin, double total, std::string unit, std::chrono::steady_clock::time_point started)
    : begin_(begin), total_(total), unit_(std::move(unit)), start_(started) {}

double ProgressBar::rate(double done) const {
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  return elapsed > 0 ? (done - begin_) / elapsed : 0;
}

std::string ProgressBar::time_left(double done) const {
  const double per_second = rate(done);
  return per_second > 0 ? format_duration((total_ - done) / per_second) : "?";
}

void ProgressBar::draw(double done, const std::string& detail) {
  constexpr int kWidth = 30;
  const int filled = std::clamp(static_cast<int>(kWidth * done / std::max(total_, 1e-9)), 0, kWidth);
  const bool whole = done == static_cast<long long>(done) && total_ == static_cast<long long>(total_);
  char line[256];
  if (whole)
    std::snprintf(line, sizeof line, "[%.*s%*s] %lld/%lld %s", filled, "##############################",
                  kWidth - filled, "", static_cast<long long>(done), static_cast<long long>(total_), unit_.c_str());
  else
    std::snprintf(line, sizeof line, "[%.*s%*s] %.1f/%.1f %s", filled, "##############################",
                  kWidth - filled, "", done, total_, unit_.c_str());
  // Trailing spaces wipe what a longer previous line left.
  std::printf("\r%s%s%s | %.2f %s/s | ETA %s   ", line, detail.empty() ? "" : " | ", detail.c_str(), rate(done),
              unit_.c_str(), time_left(done).c_str());
  std::fflush(stdout);
  drawn_ = true;
}

void ProgressBar::finish() {
  if (drawn_) std::printf("\n");
  std::fflush(stdout);
  drawn_ = false;
}

}  // namespace ds::app
