// A Catch2 listener that brings the ds::comm world up before the first test case and down after the
// last, so that test cases use it as the trainer does. In a multi-rank run, a test case that fails
// on one rank ends the job: the other ranks would otherwise wait forever in the collectives that
// rank skipped when its assertion threw.
// The listener interface is part of Catch2 v2's external interfaces.
#define CATCH_CONFIG_EXTERNAL_INTERFACES
#include <catch2/catch.hpp>

#include "dstrain/comm/distributed.hpp"

namespace {

class MpiSession : public Catch::TestEventListenerBase {
 public:
  using TestEventListenerBase::TestEventListenerBase;

  void testRunStarting(const Catch::TestRunInfo&) override { ds::comm::init_distributed("mpi"); }

  void testCaseEnded(const Catch::TestCaseStats& stats) override {
    if (!stats.totals.assertions.allOk() && ds::comm::get_world_size() > 1)
      ds::comm::abort_job("test case '" + stats.testInfo.name + "' failed on this rank; ending the job");
  }

  void testRunEnded(const Catch::TestRunStats&) override { ds::comm::finalize(); }
};

}  // namespace

CATCH_REGISTER_LISTENER(MpiSession)
