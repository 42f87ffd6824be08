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

// This node's task count under srun: SLURM_STEP_TASKS_PER_NODE lists the step's nodes' counts,
// runs compressed ("2(x3),1"), and SLURM_NODEID is this node's index.
int slurm_tasks_on_this_node(const char* per_node, int node) {
  const std::string list = per_node;
  size_t at = 0;
  while (at < list.size()) {
    size_t used = 0;
    const int count = std::stoi(list.substr(at), &used);
    at += used;
    int repeat = 1;
    if (at < list.size() && list[at] == '(') {  // "(xN)"
      repeat = std::stoi(list.substr(at + 2), &used);
      at += 2 + used + 1;
    }
    if (node < repeat) return count;
    node -= repeat;
    if (at < list.size() && list[at] == ',') ++at;
  }
  return 1;
}

}  // namespace

RankEnv rank_env_from_environment() {
  RankEnv env;
  env.rank = first_int_env({"OMPI_COMM_WORLD_RANK", "PMI_RANK"}, 0);
  env.world_size = first_int_env({"OMPI_COMM_WORLD_SIZE", "PMI_SIZE"}, 1);
  env.local_rank = first_int_env({"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID"}, 0);
  env.local_size = first_int_env({"OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS"}, 1);
  // Started by srun (srun --mpi=pmix), not mpirun: Slurm's own variables of the job step.
  const char* step_per_node = std::getenv("SLURM_STEP_TASKS_PER_NODE");
  if (!std::getenv("OMPI_COMM_WORLD_RANK") && step_per_node) {
    env.rank = first_int_env({"SLURM_PROCID"}, env.rank);
    env.world_size = first_int_env({"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, env.world_size);
    env.local_rank = first_int_env({"SLURM_LOCALID"}, env.local_rank);
    env.local_size = slurm_tasks_on_this_node(step_per_node, first_int_env({"SLURM_NODEID"}, 0));
  }
  return env;
}

}  // namespace ds
