#include "mpi_multi_node_defaults.hpp"

#include <cstdlib>

namespace ds::comm {
namespace {

// libnbc's MPI_Iallreduce (every dstrain all-reduce is nonblocking) picks a binomial tree for an
// in-place reduction: the root's link carries two gradients each way, and each level waits for the
// one below. Reduce-scatter + all-gather (Rabenseifner: recursive halving, nearest ranks first, so
// with ranks placed by node the first rounds stay on the node) puts 2(N-1)/N gradients each way on
// each of N nodes' links, the least any all-reduce can. 25M GPT, 2 nodes x 2 ranks at 1 Gbit/s,
// busiest link direction per step and samples/s: binomial 203 MB, 1.68; ring 153 MB, 2.00; this
// 102 MB, 2.97. libnbc falls back to the ring where it does not apply (fewer elements than ranks).
// coll_tuned and coll_han choose blocking collectives only, which dstrain does not call.
const McaSettings kMultiNodeDefaults = {
    {"coll_libnbc_iallreduce_algorithm", "3"},
};

int env_int(const char* name) {
  const char* value = std::getenv(name);
  return value ? std::atoi(value) : 0;
}

}  // namespace

int ranks_on_this_node(MPI_Comm comm) {
  int rank = 0;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm node;
  MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node);
  int ranks = 1;
  MPI_Comm_size(node, &ranks);
  MPI_Comm_free(&node);
  return ranks;
}

bool spans_several_nodes() {
  const int local = env_int("OMPI_COMM_WORLD_LOCAL_SIZE");
  return local > 0 && local < env_int("OMPI_COMM_WORLD_SIZE");
}

McaSettings apply_multi_node_defaults() {
  McaSettings applied;
  for (const auto& [name, value] : kMultiNodeDefaults) {
    const std::string variable = "OMPI_MCA_" + name;
    if (std::getenv(variable.c_str())) continue;
    setenv(variable.c_str(), value.c_str(), 0);
    applied.emplace_back(name, value);
  }
  return applied;
}

}  // namespace ds::comm
