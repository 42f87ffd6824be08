#include "hostfile_command.hpp"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <numeric>
#include <sstream>

#include "dstrain/runtime/config.hpp"
#include "dstrain/runtime/error.hpp"
#include "hostfile.hpp"

namespace ds::app {
namespace {

struct CheckHostfileOptions {
  std::string hostfile;
  std::string config_path;
  std::vector<std::string> overrides;
  int np = 0;  // 0: every slot
  std::string agent;
  double timeout_seconds = 5;
};

std::string quoted(const std::string& word) {
  if (word.find_first_of(" \t'\"$\\;&|<>()*?") == std::string::npos && !word.empty()) return word;
  std::string text = "'";
  for (char c : word) text += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return text + "'";
}

std::string this_executable() {
  std::error_code ec;
  const auto path = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw Error("cannot find this program's executable").with_path("/proc/self/exe").with_errno(ec.value());
  return path.string();
}

std::string slots_summary(const std::vector<HostSlots>& hosts) {
  std::string text;
  for (const HostSlots& host : hosts) text += (text.empty() ? "" : ", ") + host.host + " " + std::to_string(host.slots);
  return text;
}

// The world size the config's batch keys accept: resolve_batch's own error, with the hostfile's
// slots beside it.
std::string check_batch(const CheckHostfileOptions& options, const std::vector<HostSlots>& hosts, int world) {
  nlohmann::json json = Config::parse_file(options.config_path);
  for (const std::string& assignment : options.overrides) Config::apply_override(json, assignment);
  Config config = Config::from_json(json);
  const int stages = config.pipeline().stages.value_or(1);
  const std::string ranks = std::to_string(world) + " ranks (" + options.hostfile + ": " + slots_summary(hosts) +
                            (options.np > 0 ? ", -np " + std::to_string(options.np) : "") + ")";
  if (world % stages != 0)
    throw Error(ranks + " do not divide into pipeline.stages " + std::to_string(stages)).with_key("pipeline.stages");
  try {
    config.resolve_batch(world / stages);
  } catch (const Error& e) {
    Error error(e.message() + "; the job would run " + ranks);
    if (e.key()) error.with_key(*e.key());
    throw error.with_path(options.config_path);
  }
  return "train_batch_size " + std::to_string(config.train_batch_size()) + " = micro " +
         std::to_string(config.train_micro_batch_size_per_gpu()) + " x accumulation " +
         std::to_string(config.gradient_accumulation_steps()) + " x " + std::to_string(world / stages) +
         " data-parallel ranks";
}

void check_hostfile(const CheckHostfileOptions& options) {
  const std::vector<HostSlots> hosts = read_hostfile(options.hostfile);
  const int slots = std::accumulate(hosts.begin(), hosts.end(), 0, [](int sum, const HostSlots& h) { return sum + h.slots; });
  if (options.np > slots)
    throw Error("-np " + std::to_string(options.np) + " needs " + std::to_string(options.np) + " slots, the hostfile gives " +
                std::to_string(slots) + " (" + slots_summary(hosts) + ")")
        .with_path(options.hostfile);
  const int world = options.np > 0 ? options.np : slots;
  const std::string batch = options.config_path.empty() ? "" : check_batch(options, hosts, world);

  const char* from_environment = std::getenv("OMPI_MCA_plm_rsh_agent");
  const bool agent_given = !options.agent.empty();
  std::ostringstream seconds;
  seconds << options.timeout_seconds;
  const std::string agent = agent_given ? options.agent
                            : from_environment && *from_environment
                                ? std::string(from_environment)
                                : "ssh -o BatchMode=yes -o ConnectTimeout=" + seconds.str();
  const std::string executable = this_executable();
  const std::vector<std::string> problems =
      unreachable_hosts(hosts, options.hostfile, agent, executable, options.timeout_seconds);
  if (!problems.empty()) {
    std::string text;
    for (const std::string& problem : problems) text += (text.empty() ? "" : "; ") + problem;
    throw Error(text).with_path(options.hostfile);
  }

  std::printf("%s: %s: %d ranks%s%s\n", options.hostfile.c_str(), slots_summary(hosts).c_str(), world,
              batch.empty() ? "" : "; ", batch.c_str());
  std::printf("every host answers through '%s' and has %s\n", agent.c_str(), executable.c_str());
  std::string command = "mpirun -np " + std::to_string(world) + " --hostfile " +
                        quoted(std::filesystem::absolute(options.hostfile).string());
  if (agent_given) command += " --mca plm_rsh_agent " + quoted(agent);
  command += " " + quoted(executable);
  if (!options.config_path.empty()) command += " --config " + quoted(options.config_path);
  for (const std::string& assignment : options.overrides) command += " --set " + quoted(assignment);
  std::printf("%s\n", command.c_str());
}

}  // namespace

void add_check_hostfile_command(CLI::App& app) {
  auto options = std::make_shared<CheckHostfileOptions>();
  auto* command = app.add_subcommand(
      "check-hostfile",
      "check a hostfile (DeepSpeed's 'host slots=N') before mpirun: the world size against the config's batch "
      "keys, every host through the rsh agent; print the mpirun command");
  command->add_option("--hostfile", options->hostfile, "the hostfile")->required();
  command->add_option("-c,--config", options->config_path, "the training config (checks its batch keys)")
      ->check(CLI::ExistingFile);
  command->add_option("--set", options->overrides, "KEY=VALUE overrides, as the trainer's --set");
  command->add_option("-n,--np", options->np, "ranks to start (default: every slot)")->check(CLI::PositiveNumber);
  command->add_option("--agent", options->agent,
                      "the rsh agent mpirun uses (default: OMPI_MCA_plm_rsh_agent, else ssh in batch mode)");
  command->add_option("--timeout", options->timeout_seconds, "seconds each host gets to answer")
      ->check(CLI::Range(0.1, 600.0));
  command->callback([options] { check_hostfile(*options); });
}

}  // namespace ds::app
