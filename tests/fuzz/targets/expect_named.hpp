// What every fuzz target asserts: bad input ends in a ds::Error (which names the key, file or
// value), never in another exception, a crash or a sanitizer report.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "dstrain/runtime/error.hpp"

template <class Body>
void expect_named(Body body) {
  try {
    body();
  } catch (const ds::Error&) {
    // The input was refused with the project's own error: what the target wants.
  } catch (const std::exception& e) {
    std::fprintf(stderr, "fuzz: an exception that is not a ds::Error escaped: %s\n", e.what());
    std::abort();
  }
}
