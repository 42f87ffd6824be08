// Where the job's ranks sit (one node or several, who shares a node), and the Open MPI settings
// dstrain applies when a job spans several nodes, measured faster over TCP links than Open MPI's
// own choices (docs/multi-node.md, "Open MPI's settings over slow links").
#pragma once

#include <mpi.h>

#include <string>
#include <utility>
#include <vector>

namespace ds::comm {

// (MCA parameter, value) pairs.
using McaSettings = std::vector<std::pair<std::string, std::string>>;

// How many members of comm share this rank's node (collective over comm: MPI_Comm_split_type).
int ranks_on_this_node(MPI_Comm comm);

// Whether mpirun placed this job's ranks on more than one node (from the OMPI_COMM_WORLD_SIZE and
// OMPI_COMM_WORLD_LOCAL_SIZE it exports; false outside mpirun).
bool spans_several_nodes();

// The settings of kMultiNodeDefaults that the user has not set (no OMPI_MCA_<name> in the
// environment, as mpirun --mca and -x give it), exported as OMPI_MCA_<name> for MPI_Init to read.
// Returns the ones applied. Call before MPI_Init, and only when spans_several_nodes().
McaSettings apply_multi_node_defaults();

}  // namespace ds::comm
