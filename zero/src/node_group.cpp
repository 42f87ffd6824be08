#include "dstrain/zero/node_group.hpp"

#include <string>

#include "dstrain/comm/backend.hpp"
#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"

namespace ds::zero {

std::shared_ptr<comm::Backend> node_group(comm::Backend& group, const RankEnv& env, const char* key) {
  const int world = group.world_size(), rank = group.rank(), per_node = env.local_size;
  if (world != env.world_size || rank != env.rank)
    throw Error(log::concat(key, " needs the data-parallel group to be the whole job (", env.world_size,
                            " ranks); it has ", world))
        .with_key(key)
        .with_rank(rank);
  if (per_node < 1 || world % per_node != 0 || rank % per_node != env.local_rank)
    throw Error(log::concat(key, " needs ranks numbered node by node, the same number on every node: rank ", rank,
                            " of ", world, " is local rank ", env.local_rank, " of ", per_node,
                            " on its node (run mpirun with --map-by slot)"))
        .with_key(key)
        .with_rank(rank);
  return group.split(rank / per_node, rank);
}

}  // namespace ds::zero
