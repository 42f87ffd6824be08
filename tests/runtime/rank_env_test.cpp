// Where a process sits in the job, from the launcher's environment: mpirun's variables, or those of
// a task srun started.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <map>
#include <string>

#include "dstrain/runtime/rank_env.hpp"

namespace {

// Sets the variables for the scope, clearing every launcher variable first, and clears them after.
class Environment {
 public:
  explicit Environment(const std::map<std::string, std::string>& values) {
    for (const char* name : kNames) ::unsetenv(name);
    for (const auto& [name, value] : values) ::setenv(name.c_str(), value.c_str(), 1);
  }
  ~Environment() {
    for (const char* name : kNames) ::unsetenv(name);
  }

 private:
  static constexpr const char* kNames[] = {
      "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
      "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS", "SLURM_PROCID", "SLURM_STEP_NUM_TASKS",
      "SLURM_NTASKS", "SLURM_LOCALID", "SLURM_STEP_TASKS_PER_NODE", "SLURM_NODEID"};
};

}  // namespace

TEST_CASE("rank_env: srun's variables, this node's count out of SLURM_STEP_TASKS_PER_NODE", "[rank_env]") {
  // 7 tasks: nodes 0-2 run 2 each, node 3 runs 1; this task is the second on node 1.
  const std::map<std::string, std::string> slurm = {{"SLURM_PROCID", "3"}, {"SLURM_STEP_NUM_TASKS", "7"},
                                                    {"SLURM_LOCALID", "1"}, {"SLURM_STEP_TASKS_PER_NODE", "2(x3),1"},
                                                    {"SLURM_NODEID", "1"}};
  {
    Environment env(slurm);
    const ds::RankEnv e = ds::rank_env_from_environment();
    CHECK(e.rank == 3);
    CHECK(e.world_size == 7);
    CHECK(e.local_rank == 1);
    CHECK(e.local_size == 2);
  }
  for (const auto& [node, expected] : std::map<std::string, int>{{"0", 2}, {"2", 2}, {"3", 1}}) {
    auto values = slurm;
    values["SLURM_NODEID"] = node;
    Environment env(values);
    CHECK(ds::rank_env_from_environment().local_size == expected);
  }
  {
    auto values = slurm;
    values["SLURM_STEP_TASKS_PER_NODE"] = "3,1,2";
    values["SLURM_NODEID"] = "2";
    Environment env(values);
    CHECK(ds::rank_env_from_environment().local_size == 2);
  }
}

TEST_CASE("rank_env: mpirun's variables win over Slurm's (mpirun inside an allocation)", "[rank_env]") {
  Environment env({{"OMPI_COMM_WORLD_RANK", "5"}, {"OMPI_COMM_WORLD_SIZE", "8"}, {"OMPI_COMM_WORLD_LOCAL_RANK", "1"},
                   {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}, {"SLURM_PROCID", "0"}, {"SLURM_STEP_NUM_TASKS", "1"},
                   {"SLURM_LOCALID", "0"}, {"SLURM_STEP_TASKS_PER_NODE", "1"}, {"SLURM_NODEID", "0"}});
  const ds::RankEnv e = ds::rank_env_from_environment();
  CHECK(e.rank == 5);
  CHECK(e.world_size == 8);
  CHECK(e.local_rank == 1);
  CHECK(e.local_size == 4);
}

TEST_CASE("rank_env: a plain process is rank 0 of 1", "[rank_env]") {
  Environment env({});
  const ds::RankEnv e = ds::rank_env_from_environment();
  CHECK(e.rank == 0);
  CHECK(e.world_size == 1);
  CHECK(e.local_rank == 0);
  CHECK(e.local_size == 1);
}
