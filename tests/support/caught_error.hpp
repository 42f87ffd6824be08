// The ds::Error that a call throws; the test fails when it throws none.
#pragma once

#include <catch2/catch.hpp>

#include <functional>
#include <optional>

#include "dstrain/runtime/error.hpp"

inline ds::Error caught_error(const std::function<void()>& fn) {
  std::optional<ds::Error> error;
  try {
    fn();
  } catch (const ds::Error& e) {
    error = e;
  }
  REQUIRE(error.has_value());
  return *error;
}
