// The Python that runs the tests' independent references (torch, numpy): $DSTRAIN_PYTHON, else
// Debian's /usr/bin/python3 (the one python3-torch installs into; a PATH python3 may be another).
#pragma once

#include <cstdlib>
#include <string>

namespace ds::testing {

inline std::string python() {
  const char* chosen = std::getenv("DSTRAIN_PYTHON");
  return chosen && *chosen ? chosen : "/usr/bin/python3";
}

}  // namespace ds::testing
