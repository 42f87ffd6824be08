// `dstrain schedule`: prints DeepSpeed's pipeline schedule for a pipeline shape, either one stage's
// instruction stream (JSON, or a step listing) or a timeline of all stages side by side; with -o, an
// HTML page drawing every stage's instructions (schedule_page.hpp).
#pragma once

namespace CLI {
class App;
}

// Registers the `schedule` subcommand on the trainer's command line.
void add_schedule_command(CLI::App& app);
