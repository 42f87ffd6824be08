// `dstrain plot METRICS.jsonl [more.jsonl ...] -o run.html`: the trainer's --metrics files drawn as
// one self-contained HTML page (plot/metrics_page.hpp), the runs overlaid, named by file name.
#pragma once

#include <string>

namespace CLI {
class App;
}

namespace ds::app {

void add_plot_command(CLI::App& app);

// Writes a page whole to path; throws ds::Error with the path and errno when it cannot.
void write_page(const std::string& path, const std::string& html);

}  // namespace ds::app
