#include "dstrain/runtime/rank_env.hpp"

#include <cstdlib>
#include <initializer_list>
#include <string>

namespace ds {
namespace {

int first_int_env(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names)
    if (const char* value = std::getenv(name)) return std::stoi(value);
  return fallback;
}

}  // namespace

RankEnv rank_env_from_environment() {
  RankEnv env;
  env.rank = first_int_env({"OMPI_COMM_WORLD_RANK", "PMI_RANK"}, 0);
  env.world_size = first_int_env({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1);
  env.local_rank = first_int_env({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}, 0);
  env.local_size = first_int_env({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, 1);
  return env;
}

}  // namespace ds
