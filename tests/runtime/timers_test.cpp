#include <catch2/catch.hpp>
#include <thread>

#include "dstrain/runtime/error.hpp"
#include "dstrain/runtime/timers.hpp"

TEST_CASE("TimerRegistry accumulates and resets", "[runtime]") {
  ds::TimerRegistry timers;
  for (int i = 0; i < 2; ++i) {
    ds::ScopedTimer scope(&timers, "forward");
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  REQUIRE(timers.elapsed_ms("forward") >= 10.0);  // a sleep never returns early
  REQUIRE(timers.elapsed_ms("unknown") == 0.0);
  timers.reset();
  REQUIRE(timers.elapsed_ms("forward") == 0.0);
  REQUIRE_THROWS_AS(timers.stop("forward"), ds::Error);
}
