// The exit codes of every wtx command-line tool (`wtx` and its subcommands, the benchmark
// executables), one table: docs/cli.md "Exit codes" lists the same. A command picks the code
// of its failure from this header only (ExitCodeFor maps a Status), never a literal.
//
// Thread-safety: constants and a pure function.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "wtx/status.h"

namespace wtx {

enum ExitCode : int {
  kExitOk = 0,
  // The operation ran and was refused or aborted, or found what it checks for: a transaction
  // aborted, an expectation failed, a live image differs from its version, a journal lacks
  // the transaction asked for, the peer answered with an error, a start-up failure that is not
  // the input's (a port in use).
  kExitFailed = 1,
  // Bad usage or invalid input, refused before anything ran: an unknown or missing flag, a
  // value out of range, a file or directory that is missing, of the wrong kind (a FIFO, a
  // device, a directory for a file and the reverse), empty, oversized or not parseable.
  kExitInvalidInput = 2,
  // A journal is inconsistent or corrupt (wtx check, and every command reading one).
  kExitJournalCorrupt = 3,
  // A peer (coordinator or rank) could not be reached, or did not answer in time.
  kExitUnreachable = 4,
  // wtx verify only: the rank's bytes cannot be compared with a version (it never committed,
  // or it is dirty).
  kExitNotComparable = 5,
  // wtx control only: the outcome is not known here; find the leading coordinator and ask it
  // (docs/protocol.md, "After a coordinator loss"): a commit answered without a decision (the
  // coordinator died or lost the decision log before deciding: E_CRASHED,
  // E_DECISION_LOG_UNAVAILABLE), or any call answered E_STALE_COORDINATOR (it no longer leads).
  kExitOutcomeUnknown = 6,
  // An internal error (an exception reached main: a bug, or out of memory).
  kExitInternal = 70,
};

// The exit code of a command that failed with `s`: kInvalidArgument, kNotFound -> invalid
// input; kJournalCorrupt -> journal corrupt; anything else -> failed.
inline int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case ErrorCode::kOk:
      return kExitOk;
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kNotFound:
      return kExitInvalidInput;
    case ErrorCode::kJournalCorrupt:
      return kExitJournalCorrupt;
    default:
      return kExitFailed;
  }
}

// The exit code of a failure to connect to a peer or to get its answer: invalid input when the
// request was refused before leaving (a bad TLS file, address or secret), else unreachable.
inline int PeerExitCode(const Status& s) {
  const int code = ExitCodeFor(s);
  return code == kExitInvalidInput ? code : kExitUnreachable;
}

// `wtx control`'s exit status for a call the coordinator answered: begin, commit and abort answer
// a status (a commit also its decision) inside a successful call, and the exit status says how
// it went: 0 committed, noop or begun; 1 decided abort, or refused; kExitOutcomeUnknown for a
// commit answered without a decision because the coordinator died or lost the decision log
// (E_CRASHED, E_DECISION_LOG_UNAVAILABLE) and for E_STALE_COORDINATOR from any of them. Other
// methods: 0 once answered.
inline int ControlAnswerExitCode(const std::string& method, const nlohmann::json& answer) {
  if (method != "begin" && method != "commit" && method != "abort") return kExitOk;
  if (!answer.is_object()) return kExitFailed;
  std::string code = "OK";
  if (auto st = answer.find("status"); st != answer.end() && st->is_object()) {
    code = st->value("code", "OK");
  } else if (auto c = answer.find("code"); c != answer.end() && c->is_string()) {
    code = c->get<std::string>();
  }
  if (code == "E_STALE_COORDINATOR") return kExitOutcomeUnknown;
  if (method == "commit") {
    auto d = answer.find("decision");
    if (d != answer.end() && d->is_string()) {
      return *d == "commit" || *d == "noop" ? kExitOk : kExitFailed;  // "abort"
    }
    return code == "E_CRASHED" || code == "E_DECISION_LOG_UNAVAILABLE" ? kExitOutcomeUnknown
                                                                       : kExitFailed;
  }
  return code == "OK" ? kExitOk : kExitFailed;
}

}  // namespace wtx
