#include "codec_exec.hpp"

#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include "dstrain/runtime/error.hpp"

namespace ds::app {
namespace {

[[noreturn]] void exec_codec(const std::string& command, const std::vector<std::string>& arguments) {
  const std::string program =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "dstrain-codec").string();
  std::vector<char*> argv{const_cast<char*>(program.c_str()), const_cast<char*>(command.c_str())};
  for (const std::string& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  ::execv(program.c_str(), argv.data());
  throw Error("cannot run dstrain " + command + "'s program").with_path(program).with_errno(errno);
}

void add(CLI::App& app, const std::string& name, const std::string& help) {
  auto* command = app.add_subcommand(name, help);
  // Every argument, --help included, is dstrain-codec's to parse.
  command->prefix_command();
  command->set_help_flag();
  command->callback([command, name] { exec_codec(name, command->remaining()); });
}

}  // namespace

void add_codec_commands(CLI::App& app) {
  add(app, "encode",
      "a JSON array of strings on stdin to a JSON array of id arrays: --tokenizer (gpt2:DIR | spm:FILE | hf:DIR) "
      "[--add-special-tokens]");
  add(app, "decode",
      "a JSON array of id arrays on stdin to a JSON array of strings: --tokenizer (gpt2:DIR | spm:FILE | hf:DIR) "
      "[--skip-special-tokens]");
}

}  // namespace ds::app
