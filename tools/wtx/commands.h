// Registration of the `wtx` CLI subcommands. Each Register* adds one subcommand to the app;
// its callback stores the exit code in *exit_code.
#pragma once

#include <CLI/CLI.hpp>

namespace wtx::cli {

void RegisterSimCommand(CLI::App& app, int* exit_code);
void RegisterJournalCommands(CLI::App& app, int* exit_code);  // log, show, status, replay, check
void RegisterManifestCommand(CLI::App& app, int* exit_code);

}  // namespace wtx::cli
