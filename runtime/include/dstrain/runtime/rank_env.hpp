// Where this process sits in the job, as the launcher (mpirun) describes it in the environment.
// Known before MPI is initialized, so logging and config checks can use it early.
#pragma once

namespace ds {

struct RankEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_size = 1;
};

// Reads OpenMPI's OMPI_COMM_WORLD_* (or PMI_RANK/PMI_SIZE) variables, or, in a task srun started,
// Slurm's SLURM_PROCID, SLURM_STEP_NUM_TASKS, SLURM_LOCALID and SLURM_STEP_TASKS_PER_NODE at
// SLURM_NODEID; a plain process is rank 0 of 1.
RankEnv rank_env_from_environment();

}  // namespace ds
