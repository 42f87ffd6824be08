// `dstrain check-hostfile`: before `mpirun --hostfile` starts its daemons, checks that the
// hostfile reads, that its slots (or -np) make a world size the config's batch keys fit, and that
// every host answers through the rsh agent mpirun will use and has this executable; then prints
// the mpirun command. Errors name the host, the hostfile's line or the config key.
#pragma once

#include <CLI/CLI.hpp>

namespace ds::app {

void add_check_hostfile_command(CLI::App& app);

}  // namespace ds::app
