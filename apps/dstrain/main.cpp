// dstrain: the trainer. `mpirun -np N dstrain --config X.json` trains; subcommands inspect.
#include <CLI/CLI.hpp>

#include <cstdio>

#include "codec_exec.hpp"
#include "dstrain/comm/distributed.hpp"
#include "eval_command.hpp"
#include "generate_command.hpp"
#include "hostfile_command.hpp"
#include "model_commands.hpp"
#include "plot_command.hpp"
#include "schedule_command.hpp"
#include "template_command.hpp"
#include "tokenize_exec.hpp"
#include "train_command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"dstrain: DeepSpeed-style distributed training in C++ (run under mpirun)"};
  app.require_subcommand(0, 1);
  ds::app::TrainOptions train;
  ds::app::add_train_options(app, train);
  ds::app::add_progress_option(app, train.progress);
  add_schedule_command(app);
  ds::app::add_estimate_command(app);
  ds::app::add_plan_command(app);
  ds::app::add_export_command(app);
  ds::app::add_tokenize_command(app);
  ds::app::add_template_command(app);
  ds::app::add_codec_commands(app);
  ds::app::add_eval_command(app);
  ds::app::add_generate_command(app);
  ds::app::add_plot_command(app);
  ds::app::add_check_hostfile_command(app);
  // Subcommands run inside parse(); their errors end the command with the message.
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dstrain: %s\n", e.what());
    return 1;
  }
  if (!app.get_subcommands().empty()) return 0;
  const int code = ds::comm::run_or_abort([&] { return ds::app::run_training(train); });
  ds::comm::finalize();
  return code;
}
