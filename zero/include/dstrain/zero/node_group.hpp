// The group of the ranks that share this rank's node, split from a data-parallel group that is the
// whole job: the local group of ZeRO++'s hierarchical reduce-scatter (qgZ, docs/zero.md).
#pragma once

#include <memory>

#include "dstrain/runtime/rank_env.hpp"

namespace ds::comm {
class Backend;
}

namespace ds::zero {

// Splits `group` into nodes of env.local_size ranks (the launcher's ranks per node). A ds::Error
// naming `key` unless `group` is the whole job (env.world_size ranks, this rank env.rank) and ranks
// are numbered node by node (rank = node * local_size + local_rank, mpirun's --map-by slot), which
// the hierarchical collective's pairing assumes.
std::shared_ptr<comm::Backend> node_group(comm::Backend& group, const RankEnv& env, const char* key);

}  // namespace ds::zero
