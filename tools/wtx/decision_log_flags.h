// --decision-log and its etcd TLS flags, shared by `wtx coordinator`, `wtx rank`, `wtx sim`
// and the journal tools (docs/cli.md, "Decision log"): one place that declares them and
// opens the log they name.
#pragma once

#include <memory>
#include <string>

#include <CLI/CLI.hpp>

#include "wtx/decision_log.h"
#include "wtx/fleet.h"
#include "wtx/tls_files.h"

namespace wtx::cli {

struct DecisionLogFlags {
  std::string url;  // empty: the embedded journal
  TlsFiles tls;     // --etcd-ca / --etcd-cert / --etcd-key
  int64_t timeout_ms = 2000;
};

// Declares --decision-log, --etcd-ca, --etcd-cert, --etcd-key, --decision-log-timeout-ms.
void AddDecisionLogFlags(CLI::App* cmd, DecisionLogFlags* flags);

// The shared log the flags name (null when --decision-log was not given). Errors name the flag
// and the endpoint (E_DECISION_LOG_UNAVAILABLE, kInvalidArgument for a malformed url or a
// half-set TLS trio, kJournalCorrupt for a prefix holding foreign values).
// create: DecisionLogOptions::create (a coordinator marks an empty PREFIX; ranks and readers
// do not).
Result<std::shared_ptr<DecisionLog>> OpenDecisionLogFlags(const DecisionLogFlags& flags,
                                                          bool create = false);

// --etcd-cert/--etcd-key given together and with --etcd-ca, each file readable
// (kInvalidArgument naming the flag and the file).
Status CheckEtcdTlsFlags(const TlsFiles& tls);

// The fleet registry at `url` (wtx/fleet.h) with the flags' etcd TLS files (checked as for the
// decision log) and per-member timeout.
Result<FleetOptions> FleetOptionsFromFlags(const DecisionLogFlags& flags, const std::string& url,
                                           const std::string& fleet);

}  // namespace wtx::cli
