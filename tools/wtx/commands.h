// Registration of the `wtx` CLI subcommands. Each Register* adds one subcommand to the app;
// its callback stores the exit code in *exit_code.
#pragma once

#include <cstdint>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "src/util/exit_codes.h"
#include "src/util/file_util.h"
#include "tools/int_option.h"
#include "wtx/limits.h"
#include "wtx/tls_files.h"

namespace wtx::cli {

using tools::AddIntOption;
using tools::IntBounds;

// Valid ranges of integer flags (docs/cli.md lists every flag with its range), each declared
// with AddIntOption (tools/int_option.h): a value outside is refused, naming the flag, the
// value and the range, before the command runs.
inline constexpr IntBounds kRankCountBounds{1, kMaxRanks};
inline constexpr IntBounds kRankIdBounds{0, kMaxRanks - 1};
inline constexpr IntBounds kTimeoutMsBounds{1, kMaxTimeoutMs};
inline constexpr IntBounds kWaitMsBounds{0, kMaxTimeoutMs};
inline constexpr IntBounds kFrameBytesBounds{static_cast<int64_t>(kMinFrameBytesLimit),
                                             static_cast<int64_t>(kMaxFrameBytesLimit)};
inline constexpr IntBounds kByteBudgetBounds{0, INT64_MAX};
inline constexpr IntBounds kSyncDelayMsBounds{0, 10000};
inline constexpr IntBounds kDataThreadsBounds{0, kMaxDataThreads};
// --threads (rank, load, bench): ParticipantOptions::threads of each rank.
inline CLI::Option* AddDataThreadsOption(CLI::App* cmd, int* threads) {
  return AddIntOption(cmd, "--threads", threads, kDataThreadsBounds,
                      "Data-path threads of each rank: a large write is copied and hashed by "
                      "this many threads, a large landing is hashed by threads-1 in the "
                      "background (0: one per core; 1: everything in the calling thread)")
      ->capture_default_str();
}
// HOST:PORT flags (port 0 .. 65535), refused naming the flag like a numeric range.
CLI::Validator HostPortCheck();
// HOST:PORT[,HOST:PORT...] (`wtx rank --connect`: a coordinator and its standbys).
CLI::Validator HostPortListCheck();
Result<std::vector<std::pair<std::string, uint16_t>>> ParseHostPortList(const std::string& s);

void RegisterSimCommand(CLI::App& app, int* exit_code);
void RegisterJournalCommands(CLI::App& app, int* exit_code);  // log, show, status, replay, check
void RegisterManifestCommand(CLI::App& app, int* exit_code);
void RegisterPlanCommand(CLI::App& app, int* exit_code);  // cmd_plan.cc
void RegisterBenchCommand(CLI::App& app, int* exit_code);        // cmd_bench.cc
void RegisterCoordinatorCommand(CLI::App& app, int* exit_code);  // cmd_coordinator.cc
void RegisterRankCommand(CLI::App& app, int* exit_code);         // cmd_rank.cc
void RegisterControlCommand(CLI::App& app, int* exit_code);      // cmd_control.cc
void RegisterTortureCommand(CLI::App& app, int* exit_code);      // cmd_torture.cc
void RegisterVerifyCommand(CLI::App& app, int* exit_code);       // cmd_verify.cc
void RegisterLoadCommands(CLI::App& app, int* exit_code);        // cmd_load.cc: load, expect
void RegisterFleetCommands(CLI::App& app, int* exit_code);       // cmd_fleet.cc: status, policy

// The contents of the file `path` that option `flag` names, through the one checked read of
// every file an option names (src/util/file_util.h): errors name the flag and the path.
inline Result<std::string> ReadFileArg(std::string_view flag, const std::string& path,
                                       size_t max_bytes = kMaxJsonFileBytes) {
  ReadFileOptions o;
  o.what = flag;
  o.max_bytes = max_bytes;
  return ReadRegularFile(path, o);
}

// ReadFileArg, parsed as JSON ("FLAG 'PATH': not valid JSON: ...").
inline Result<nlohmann::json> ReadJsonFileArg(std::string_view flag, const std::string& path) {
  WTX_ASSIGN_OR_RETURN(text, ReadFileArg(flag, path));
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) {
    return Status::InvalidArgument(std::string(flag) + " '" + path + "': not valid JSON");
  }
  return j;
}

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
