// Rank-aware logging. By default only rank 0 speaks; every line is prefixed "[rank r]".
// The level comes from DSTRAIN_LOG_LEVEL (debug, info, warn, error); info when it is not set.
#pragma once

#include <sstream>
#include <string>
#include <string_view>

namespace ds::log {

enum class Level { Debug = 0, Info = 1, Warn = 2, Error = 3 };

Level parse_level(std::string_view name);  // throws ds::Error naming the bad value
Level level();
// The rank used in prefixes and for rank-0 filtering; set by comm::init_distributed.
void set_rank(int rank);
int rank();

void write(Level level, bool all_ranks, const std::string& line);

template <class... Args>
std::string concat(const Args&... args) {
  std::ostringstream out;
  (out << ... << args);
  return out.str();
}

template <class... Args> void debug(const Args&... a) { if (level() <= Level::Debug) write(Level::Debug, false, concat(a...)); }
template <class... Args> void info(const Args&... a) { if (level() <= Level::Info) write(Level::Info, false, concat(a...)); }
template <class... Args> void warn(const Args&... a) { if (level() <= Level::Warn) write(Level::Warn, false, concat(a...)); }
template <class... Args> void error(const Args&... a) { write(Level::Error, true, concat(a...)); }
// Every rank prints, e.g. per-rank memory figures.
template <class... Args> void info_all(const Args&... a) { if (level() <= Level::Info) write(Level::Info, true, concat(a...)); }
template <class... Args> void warn_all(const Args&... a) { if (level() <= Level::Warn) write(Level::Warn, true, concat(a...)); }

}  // namespace ds::log
