// wtx: journaled, all-ranks transactions for inference-engine weight updates.
#include <iostream>

#include "commands.h"

namespace {

int Run(int argc, char** argv) {
  CLI::App app{"wtx: transactional weight updates for inference engines"};
  app.require_subcommand(1);
  int exit_code = 0;
  wtx::cli::RegisterSimCommand(app, &exit_code);
  wtx::cli::RegisterJournalCommands(app, &exit_code);
  wtx::cli::RegisterManifestCommand(app, &exit_code);
  wtx::cli::RegisterBenchCommand(app, &exit_code);
  wtx::cli::RegisterCoordinatorCommand(app, &exit_code);
  wtx::cli::RegisterRankCommand(app, &exit_code);
  wtx::cli::RegisterControlCommand(app, &exit_code);
  wtx::cli::RegisterTortureCommand(app, &exit_code);
  wtx::cli::RegisterVerifyCommand(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    // The library reports errors as Status; an exception here is a bug (or out of memory):
    // say so instead of aborting without a word.
    std::cerr << "wtx: internal error: " << e.what() << "\n";
  } catch (...) {
    std::cerr << "wtx: internal error: unknown exception\n";
  }
  return 70;
}
