#include "mpi_tcp_ring.hpp"

#include <cstdlib>
#include <vector>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/log.hpp"
#include "mpi_multi_node_defaults.hpp"

namespace ds::comm {
namespace {

// Long enough for every rank of a loaded machine to reach the group's creation.
constexpr std::chrono::seconds kConnectTimeout{60};

std::string allreduce_choice() {
  const char* value = std::getenv("DSTRAIN_ALLREDUCE");
  const std::string choice = value && *value ? value : "auto";
  if (choice != "auto" && choice != "ring" && choice != "mpi")
    throw Error("DSTRAIN_ALLREDUCE is '" + choice + "'; it must be auto, ring or mpi").with_key("DSTRAIN_ALLREDUCE");
  return choice;
}

bool every_member_alone_on_its_node(MPI_Comm comm) {
  const int on_node = ranks_on_this_node(comm);
  int most = 0;
  MPI_Allreduce(&on_node, &most, 1, MPI_INT, MPI_MAX, comm);
  return most == 1;
}

}  // namespace

std::unique_ptr<TcpRing> tcp_ring_for(MPI_Comm comm, const std::string& label) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  const std::string choice = allreduce_choice();
  if (size < 2 || choice == "mpi") return nullptr;
  if (choice == "auto" && !every_member_alone_on_its_node(comm)) return nullptr;
  auto exchange = [&](const TcpRing::Endpoint& mine) {
    std::vector<TcpRing::Endpoint> all(static_cast<size_t>(size));
    MPI_Allgather(&mine, sizeof mine, MPI_BYTE, all.data(), sizeof mine, MPI_BYTE, comm);
    return all;
  };
  auto ring = std::make_unique<TcpRing>(rank, size, label, exchange, kConnectTimeout);
  if (label == "world" && rank == 0)
    log::info(choice == "ring" ? "DSTRAIN_ALLREDUCE=ring" : "every rank is alone on its node",
              ": float32 and float64 all-reduces of 64 KiB and more go over dstrain's TCP ring (DSTRAIN_ALLREDUCE=mpi chooses Open "
              "MPI's; docs/multi-node.md)");
  return ring;
}

}  // namespace ds::comm
