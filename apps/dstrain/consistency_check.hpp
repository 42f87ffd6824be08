// The check that every rank of a job runs the same build with the same effective config, made once
// at start, collectively, before any model is built (issue 23: two nodes with different builds or
// configs must fail in seconds, naming the host, not diverge or hang mid-run).
//
// The build is the CRC-32C of this process's own executable (/proc/self/exe): an id compiled in
// (git commit, flags) would miss an uncommitted change or a node that rebuilt from other sources,
// while the bytes that run cannot. dstrain links its own libraries statically, so those are in it;
// LibTorch and Open MPI (shared) are not.
#pragma once

#include <c10/core/Device.h>

#include <string>

#include "dstrain/comm/backend.hpp"

namespace ds::app {

// Every rank passes its effective config (as it parsed and resolved it, e.g. Config::to_json()
// dumped); tensors for the exchange live on `device` (the backend's). On any difference from rank 0
// every rank throws ds::Error naming each differing rank, its host, and what differs (build, config).
void check_same_build_and_config(comm::Backend& world, const std::string& effective_config, c10::Device device);

}  // namespace ds::app
