// wtx: journaled, all-ranks transactions for inference-engine weight updates.
#include "tools/guarded_main.h"
#include "tools/wtx/commands.h"

namespace {

int Run(int argc, char** argv) {
  CLI::App app{"wtx: transactional weight updates for inference engines"};
  app.require_subcommand(1);
  int exit_code = 0;
  wtx::cli::RegisterSimCommand(app, &exit_code);
  wtx::cli::RegisterJournalCommands(app, &exit_code);
  wtx::cli::RegisterManifestCommand(app, &exit_code);
  wtx::cli::RegisterPlanCommand(app, &exit_code);
  wtx::cli::RegisterBenchCommand(app, &exit_code);
  wtx::cli::RegisterCoordinatorCommand(app, &exit_code);
  wtx::cli::RegisterRankCommand(app, &exit_code);
  wtx::cli::RegisterControlCommand(app, &exit_code);
  wtx::cli::RegisterTortureCommand(app, &exit_code);
  wtx::cli::RegisterVerifyCommand(app, &exit_code);
  wtx::cli::RegisterLoadCommands(app, &exit_code);
  wtx::cli::RegisterFleetCommands(app, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? wtx::kExitOk : wtx::kExitInvalidInput;
  }
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  return wtx::tools::GuardedMain("wtx", [&] { return Run(argc, argv); });
}
