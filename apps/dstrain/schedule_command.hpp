// `dstrain schedule`: prints DeepSpeed's pipeline schedule for a pipeline shape, either one stage's
// instruction stream (JSON, or a step listing) or a timeline of all stages side by side.
#pragma once

namespace CLI {
class App;
}

// Registers the `schedule` subcommand on the trainer's command line.
void add_schedule_command(CLI::App& app);
