#include "tokenize_exec.hpp"

#include <unistd.h>

#include <cerrno>
#include <filesystem>
#include <string>
#include <vector>

#include "dstrain/runtime/error.hpp"

namespace ds::app {
namespace {

[[noreturn]] void exec_tokenizer(const std::vector<std::string>& arguments) {
  const std::string program =
      (std::filesystem::read_symlink("/proc/self/exe").parent_path() / "dstrain-tokenize").string();
  std::vector<char*> argv{const_cast<char*>(program.c_str())};
  for (const std::string& argument : arguments) argv.push_back(const_cast<char*>(argument.c_str()));
  argv.push_back(nullptr);
  ::execv(program.c_str(), argv.data());
  throw Error("cannot run dstrain tokenize's program").with_path(program).with_errno(errno);
}

}  // namespace

void add_tokenize_command(CLI::App& app) {
  auto* command = app.add_subcommand(
      "tokenize", "text files to llm.c token files: --tokenizer (gpt2:DIR | spm:FILE | hf:DIR) --input TEXT... --out PREFIX "
                  "[--valid-fraction F] [--progress auto|on|off] (--help for more)");
  // Every argument, --help included, is dstrain-tokenize's to parse.
  command->prefix_command();
  command->set_help_flag();
  command->callback([command] { exec_tokenizer(command->remaining()); });
}

}  // namespace ds::app
