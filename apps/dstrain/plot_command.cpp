#include "plot_command.hpp"

#include <CLI/CLI.hpp>
#include <cerrno>
#include <fstream>
#include <iostream>
#include <memory>
#include <vector>

#include "dstrain/plot/metrics_page.hpp"
#include "dstrain/runtime/error.hpp"

namespace ds::app {

void write_page(const std::string& path, const std::string& html) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  if (!out) throw Error("cannot create page").with_path(path).with_errno(errno);
  out << html;
  out.flush();
  if (!out) throw Error("cannot write page").with_path(path).with_errno(errno);
}

void add_plot_command(CLI::App& app) {
  struct Options {
    std::vector<std::string> metrics;
    std::string out;
  };
  auto options = std::make_shared<Options>();
  CLI::App* command = app.add_subcommand(
      "plot", "Draw --metrics files (loss, val_loss, lr, samples/s, MFU, memory, comms) as one HTML page");
  command->add_option("metrics", options->metrics, "The trainer's --metrics JSON-lines files, one run each")
      ->required();
  command->add_option("-o,--out", options->out, "The HTML page to write")->required();
  command->callback([options] {
    const auto runs = plot::read_runs(options->metrics);
    write_page(options->out, plot::metrics_page(runs));
    std::cout << "wrote " << options->out << ": " << runs.size() << (runs.size() == 1 ? " run" : " runs") << "\n";
  });
}

}  // namespace ds::app
