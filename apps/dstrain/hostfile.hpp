// DeepSpeed's hostfile, which Open MPI's `mpirun --hostfile` reads too: one `host slots=N` per
// line, `#` starting a comment, blank lines ignored; and the checks `dstrain check-hostfile` makes
// before mpirun starts any daemon (docs/multi-node.md, "Launching").
#pragma once

#include <string>
#include <vector>

namespace ds::app {

struct HostSlots {
  std::string host;
  int slots = 0;
  int line = 0;  // 1-based, in the file
};

// The hosts in file order. A line that is not `host slots=N` (N >= 1), a host named twice or a file
// naming no host is a ds::Error with the path and the line ("hosts:3: ...").
std::vector<HostSlots> read_hostfile(const std::string& path);

// Runs `agent HOST test -x EXECUTABLE` for every host at once (the agent as mpirun's plm_rsh_agent
// calls it: words split on spaces, then the host, then the command), each given `timeout_seconds`.
// Returns one line per host that did not answer (the agent failed, or said nothing in time) or
// answered without the executable, naming the host and its line; empty when all answered.
std::vector<std::string> unreachable_hosts(const std::vector<HostSlots>& hosts, const std::string& hostfile,
                                           const std::string& agent, const std::string& executable,
                                           double timeout_seconds);

}  // namespace ds::app
