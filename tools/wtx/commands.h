// Registration of the `wtx` CLI subcommands. Each Register* adds one subcommand to the app;
// its callback stores the exit code in *exit_code.
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>

#include "wtx/limits.h"
#include "wtx/tls_files.h"

namespace wtx::cli {

// Valid ranges of numeric flags (docs/cli.md lists every flag with its range). CLI11 refuses a
// value outside, naming the flag, before the command runs.
inline CLI::Range RankCountRange() { return CLI::Range(int64_t{1}, int64_t{kMaxRanks}); }
inline CLI::Range RankIdRange() { return CLI::Range(int64_t{0}, int64_t{kMaxRanks - 1}); }
inline CLI::Range TimeoutMsRange() { return CLI::Range(int64_t{1}, kMaxTimeoutMs); }
inline CLI::Range WaitMsRange() { return CLI::Range(int64_t{0}, kMaxTimeoutMs); }
inline CLI::Range FrameBytesRange() {
  return CLI::Range(static_cast<int64_t>(kMinFrameBytesLimit),
                    static_cast<int64_t>(kMaxFrameBytesLimit));
}
inline CLI::Range ByteBudgetRange() { return CLI::Range(int64_t{0}, INT64_MAX); }
// HOST:PORT flags (port 0 .. 65535), refused naming the flag like a numeric range.
CLI::Validator HostPortCheck();

void RegisterSimCommand(CLI::App& app, int* exit_code);
void RegisterJournalCommands(CLI::App& app, int* exit_code);  // log, show, status, replay, check
void RegisterManifestCommand(CLI::App& app, int* exit_code);
void RegisterBenchCommand(CLI::App& app, int* exit_code);        // cmd_bench.cc
void RegisterCoordinatorCommand(CLI::App& app, int* exit_code);  // cmd_coordinator.cc
void RegisterRankCommand(CLI::App& app, int* exit_code);         // cmd_rank.cc
void RegisterControlCommand(CLI::App& app, int* exit_code);      // cmd_control.cc
void RegisterTortureCommand(CLI::App& app, int* exit_code);      // cmd_torture.cc
void RegisterVerifyCommand(CLI::App& app, int* exit_code);       // cmd_verify.cc
void RegisterLoadCommands(CLI::App& app, int* exit_code);        // cmd_load.cc: load, expect

// --tls-cert / --tls-key / --tls-ca of coordinator, rank and control (docs/protocol.md).
inline void AddTlsOptions(CLI::App* cmd, TlsFiles* tls) {
  cmd->add_option("--tls-cert", tls->cert,
                  "PEM certificate (chain) of this end: certificate mutual TLS (with --tls-key, "
                  "--tls-ca) instead of the PSK from the secret");
  cmd->add_option("--tls-key", tls->key, "PEM private key of --tls-cert");
  cmd->add_option("--tls-ca", tls->ca,
                  "PEM CA certificates that peers' certificates must chain to");
}

}  // namespace wtx::cli
