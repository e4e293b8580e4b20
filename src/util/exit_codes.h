// The exit codes of every wtx command-line tool (`wtx` and its subcommands, the benchmark
// executables), one table: docs/cli.md "Exit codes" lists the same. A command picks the code
// of its failure from this header only (ExitCodeFor maps a Status), never a literal.
//
// Thread-safety: constants and a pure function.
#pragma once

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

}  // namespace wtx
