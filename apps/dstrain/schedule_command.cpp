#include "schedule_command.hpp"

#include <CLI/CLI.hpp>
#include <iostream>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "dstrain/pipe/schedule_format.hpp"
#include "dstrain/runtime/error.hpp"
#include "plot_command.hpp"
#include "schedule_page.hpp"

namespace {

struct ScheduleOptions {
  std::string kind = "train";
  int stages = 0;
  int micro_batches = 0;
  int stage_id = 0;
  std::string format;  // empty: JSON for one stage, text for the timeline
  std::string page;    // with -o: the HTML page of every stage's instructions, instead of printing
};

constexpr ds::pipe::ScheduleKind kKinds[] = {ds::pipe::ScheduleKind::Train, ds::pipe::ScheduleKind::Inference,
                                             ds::pipe::ScheduleKind::DataParallel};

ds::pipe::ScheduleKind kind_named(const std::string& name) {
  for (auto kind : kKinds) {
    if (to_string(kind) == name) return kind;
  }
  throw ds::Error("dstrain schedule: unknown --kind '" + name + "'");
}

void print_schedule(const ScheduleOptions& options, bool one_stage) {
  const ds::pipe::ScheduleKind kind = kind_named(options.kind);
  const std::string format = options.format.empty() ? (one_stage ? "json" : "text") : options.format;
  if (!one_stage) {
    if (format == "json") throw CLI::ValidationError("--format", "json prints one stage's stream; give --stage-id");
    std::cout << ds::pipe::format_timeline(kind, options.micro_batches, options.stages);
    return;
  }
  const auto schedule = ds::pipe::make_schedule(kind, options.micro_batches, options.stages, options.stage_id);
  if (format == "json") {
    std::cout << ds::pipe::to_json(*schedule).dump() << "\n";
  } else {
    std::cout << ds::pipe::format_steps(*schedule);
  }
}

}  // namespace

void add_schedule_command(CLI::App& app) {
  auto options = std::make_shared<ScheduleOptions>();
  CLI::App* command = app.add_subcommand(
      "schedule", "Print DeepSpeed's pipeline schedule: one stage's instructions, or all stages as a timeline");

  std::vector<std::string> kind_names;
  for (auto kind : kKinds) kind_names.push_back(to_string(kind));
  command->add_option("--kind", options->kind, "Schedule: train (DeepSpeed's 1F1B), inference or data-parallel")
      ->check(CLI::IsMember(kind_names))
      ->capture_default_str();
  command->add_option("--stages", options->stages, "Number of pipeline stages")
      ->required()
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  command->add_option("--micro-batches", options->micro_batches, "Micro-batches per batch")
      ->required()
      ->check(CLI::Range(1, std::numeric_limits<int>::max()));
  CLI::Option* stage_id = command->add_option("--stage-id", options->stage_id,
                                              "Print this stage's instructions; without it, a timeline of all stages")
                              ->check(CLI::Range(0, std::numeric_limits<int>::max()));
  CLI::Option* format =
      command->add_option("--format", options->format, "json or text (default: json with --stage-id, text without)")
          ->check(CLI::IsMember({"json", "text"}));
  command->add_option("-o,--out", options->page, "Write every stage's instruction grid as an HTML page instead")
      ->excludes(stage_id)
      ->excludes(format);

  // A shape the schedules refuse (a stage id past the last stage) is a usage error here: report it
  // the way CLI11 reports the others, with its message and exit code.
  // A page that cannot be written is not a usage error: it ends the command as dstrain's other errors.
  command->callback([options, stage_id] {
    std::string page;
    try {
      if (options->page.empty()) {
        print_schedule(*options, stage_id->count() > 0);
      } else {
        page = ds::app::schedule_page(kind_named(options->kind), options->micro_batches, options->stages);
      }
    } catch (const ds::Error& error) {
      throw CLI::ValidationError(error.what());
    }
    if (!page.empty()) {
      ds::app::write_page(options->page, page);
      std::cout << "wrote " << options->page << "\n";
    }
  });
}
