// Errors of this library: a ds::Error whose message names the template, line and column.
#pragma once

#include <string>

#include "dstrain/runtime/error.hpp"

namespace ds::chat_template {

[[noreturn]] inline void fail_at(const std::string& name, int line, int column, const std::string& message) {
  throw ds::Error("chat template " + name + " line " + std::to_string(line) + " column " +
                  std::to_string(column) + ": " + message);
}

}  // namespace ds::chat_template
