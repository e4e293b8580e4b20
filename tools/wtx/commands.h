// Registration of the `wtx` CLI subcommands. Each Register* adds one subcommand to the app;
// its callback stores the exit code in *exit_code.
#pragma once

#include <CLI/CLI.hpp>

namespace wtx::cli {

void RegisterSimCommand(CLI::App& app, int* exit_code);
void RegisterJournalCommands(CLI::App& app, int* exit_code);  // log, show, status, replay, check
void RegisterManifestCommand(CLI::App& app, int* exit_code);
void RegisterBenchCommand(CLI::App& app, int* exit_code);  // cmd_bench.cc
void RegisterCoordinatorCommand(CLI::App& app, int* exit_code);  // cmd_coordinator.cc
void RegisterRankCommand(CLI::App& app, int* exit_code);         // cmd_rank.cc
void RegisterControlCommand(CLI::App& app, int* exit_code);      // cmd_control.cc
void RegisterTortureCommand(CLI::App& app, int* exit_code);      // cmd_torture.cc
void RegisterVerifyCommand(CLI::App& app, int* exit_code);       // cmd_verify.cc
void RegisterLoadCommands(CLI::App& app, int* exit_code);        // cmd_load.cc: load, expect

}  // namespace wtx::cli
