// Registration of the `wtx` CLI subcommands. Each Register* adds one subcommand to the app;
// its callback stores the exit code in *exit_code.
#pragma once

#include <CLI/CLI.hpp>

#include "wtx/tls_files.h"

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

// --tls-cert / --tls-key / --tls-ca of coordinator, rank and control (docs/protocol.md).
inline void AddTlsOptions(CLI::App* cmd, TlsFiles* tls) {
  cmd->add_option("--tls-cert", tls->cert,
                  "PEM certificate (chain) of this end: certificate mutual TLS (with --tls-key, "
                  "--tls-ca) instead of the PSK from the secret");
  cmd->add_option("--tls-key", tls->key, "PEM private key of --tls-cert");
  cmd->add_option("--tls-ca", tls->ca, "PEM CA certificates that peers' certificates must chain to");
}

}  // namespace wtx::cli
