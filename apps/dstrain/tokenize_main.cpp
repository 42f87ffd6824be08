// dstrain-tokenize: the program behind `dstrain tokenize` (tokenize_command.hpp says why it is one).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <exception>

#include "tokenize_command.hpp"

int main(int argc, char** argv) {
  CLI::App app{"dstrain tokenize: text files to llm.c token files (PREFIX_train.bin, PREFIX_val.bin)",
               "dstrain tokenize"};
  ds::app::TokenizeOptions options;
  ds::app::add_tokenize_options(app, options);
  try {
    app.parse(argc, argv);
    ds::app::run_tokenize(options);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dstrain tokenize: %s\n", e.what());
    return 1;
  }
  return 0;
}
