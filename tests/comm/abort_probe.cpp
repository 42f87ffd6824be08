// Two- or three-rank jobs that must end on their own: run by expect_abort.cmake (which checks that
// the job ends quickly, non-zero, with the expected message) or directly by CTest (mode return).
//   abort_probe throw      rank 1 throws a ds::Error out of run_or_abort's body
//   abort_probe terminate  rank 1 lets an exception escape a std::thread (std::terminate)
//   abort_probe stop       the last rank stops itself (SIGSTOP); the others wait in a barrier that
//                          the 3 s watchdog ends, naming the stopped rank
//   abort_probe deadlock   ranks 0 and 1 each wait to receive from the other; the watchdog ends it
//   abort_probe return     every rank all_reduces and returns from main without finalize(): exit 0
#include <ATen/ATen.h>

#include <chrono>
#include <csignal>
#include <string>
#include <thread>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/runtime/error.hpp"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "throw";
  if (mode == "return") {
    ds::comm::init_distributed("mpi");
    at::Tensor one = at::ones({4});
    ds::comm::all_reduce(one);
    return at::equal(one, at::full({4}, float(ds::comm::get_world_size()))) ? 0 : 1;
  }
  return ds::comm::run_or_abort([&] {
    const bool watched = mode == "stop" || mode == "deadlock";
    ds::comm::init_distributed("mpi", watched ? std::chrono::seconds(3) : ds::comm::kDefaultTimeout);
    const int rank = ds::comm::get_rank(), world = ds::comm::get_world_size();
    if (mode == "stop" && rank == world - 1) std::raise(SIGSTOP);
    if (mode == "deadlock") {
      at::Tensor t = at::empty({8});
      ds::comm::recv(t, 1 - rank);
    }
    if (rank == 1 && (mode == "throw" || mode == "terminate")) {
      if (mode == "terminate")
        std::thread([] { throw ds::Error("deliberate failure in a thread of rank 1"); }).join();
      throw ds::Error("deliberate failure on rank 1").with_rank(1);
    }
    ds::comm::barrier();  // rank 0 waits here for a rank that never comes
    ds::comm::finalize();
    return 0;
  });
}
