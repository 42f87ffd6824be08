// A two-rank job in which rank 1 fails while rank 0 waits in a collective: run by
// expect_abort.cmake, which checks that the job ends quickly, non-zero, with rank 1's message.
//   abort_probe throw      rank 1 throws a ds::Error out of run_or_abort's body
//   abort_probe terminate  rank 1 lets an exception escape a std::thread (std::terminate)
#include <string>
#include <thread>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/runtime/error.hpp"

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "throw";
  return ds::comm::run_or_abort([&] {
    ds::comm::init_distributed("mpi");
    if (ds::comm::get_rank() == 1) {
      if (mode == "terminate")
        std::thread([] { throw ds::Error("deliberate failure in a thread of rank 1"); }).join();
      throw ds::Error("deliberate failure on rank 1").with_rank(1);
    }
    ds::comm::barrier();  // rank 0 waits here for a rank that never comes
    ds::comm::finalize();
    return 0;
  });
}
