// Whether a group's float all-reduces run over dstrain's TcpRing (comm/tcp_ring.hpp) instead of
// Open MPI's, and the ring itself. DSTRAIN_ALLREDUCE chooses: "auto" (the default) takes the ring
// when every member of the group is alone on its node, so that every byte crosses a link and the
// ring's own thread keeps the links moving during backward (docs/multi-node.md); "ring" always (the
// tests use it on one machine); "mpi" never.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>

#include "dstrain/comm/tcp_ring.hpp"

namespace ds::comm {

// Collective over comm; nullptr where the group keeps Open MPI's all-reduce.
std::unique_ptr<TcpRing> tcp_ring_for(MPI_Comm comm, const std::string& label);

}  // namespace ds::comm
