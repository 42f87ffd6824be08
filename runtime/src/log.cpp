#include "dstrain/runtime/log.hpp"

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/rank_env.hpp"

namespace ds::log {
namespace {

Level initial_level() {
  const char* env = std::getenv("DSTRAIN_LOG_LEVEL");
  return env ? parse_level(env) : Level::Info;
}

// The only global state besides the communicator: the log level, and the rank it prints.
const Level g_level = initial_level();
int g_rank = rank_env_from_environment().rank;
std::mutex g_mutex;

}  // namespace

Level parse_level(std::string_view name) {
  if (name == "debug") return Level::Debug;
  if (name == "info") return Level::Info;
  if (name == "warn" || name == "warning") return Level::Warn;
  if (name == "error") return Level::Error;
  throw Error("unknown log level '" + std::string(name) + "' (expected debug, info, warn or error)")
      .with_key("DSTRAIN_LOG_LEVEL");
}

Level level() { return g_level; }
void set_rank(int rank) { g_rank = rank; }
int rank() { return g_rank; }

void write(Level level, bool all_ranks, const std::string& line) {
  if (!all_ranks && g_rank != 0) return;
  static const char* const kTags[] = {"debug", "info", "warn", "error"};
  std::FILE* stream = level >= Level::Warn ? stderr : stdout;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (level == Level::Info)
    std::fprintf(stream, "[rank %d] %s\n", g_rank, line.c_str());
  else
    std::fprintf(stream, "[rank %d] %s: %s\n", g_rank, kTags[static_cast<int>(level)], line.c_str());
  std::fflush(stream);
}

}  // namespace ds::log
