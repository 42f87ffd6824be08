// dstrain: the trainer. `mpirun -np N dstrain --config X.json` trains; subcommands inspect.
#include <CLI/CLI.hpp>

#include "dstrain/comm/distributed.hpp"
#include "schedule_command.hpp"
#include "train_command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"dstrain: DeepSpeed-style distributed training in C++ (run under mpirun)"};
  app.require_subcommand(0, 1);
  ds::app::TrainOptions train;
  ds::app::add_train_options(app, train);
  add_schedule_command(app);
  CLI11_PARSE(app, argc, argv);
  if (!app.get_subcommands().empty()) return 0;
  const int code = ds::comm::run_or_abort([&] { return ds::app::run_training(train); });
  ds::comm::finalize();
  return code;
}
