// A folder that every rank of one test run shares, empty when the test starts. Its name carries the
// world size: CTest may run a test's -np 1, 2 and 4 variants at once, and they must not meet.
#pragma once

#include <filesystem>
#include <string>

#include "dstrain/comm/distributed.hpp"
#include "dstrain/runtime/remove_tree.hpp"

// Collective: rank 0 empties and makes <temporary folder>/NAME_np<world>, every rank waits for it.
// The swap tests need that folder on a disk (tmpfs may lack O_DIRECT), as /tmp is on the CI machine.
inline std::string fresh_shared_folder(const std::string& name) {
  const std::string dir =
      (std::filesystem::temp_directory_path() / (name + "_np" + std::to_string(ds::comm::get_world_size()))).string();
  if (ds::comm::get_rank() == 0) {
    ds::remove_tree(dir);
    std::filesystem::create_directories(dir);
  }
  ds::comm::init_distributed("mpi")->barrier();
  return dir;
}
