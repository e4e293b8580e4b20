// `wtx torture`: randomized crash-safety testing of the whole protocol stack.
//
// Each script starts a fresh in-process cluster (participants, coordinator, in-process
// transport, real RocksDB journals on fault-injecting filesystems, on tmpfs when available)
// and runs a few random transactions (full / partial / delta; missing, split, duplicate and
// out-of-range writes; patches in parts with missing, repeated and packed-layout indices;
// stale derived state; kernel identity changes; silent ranks; aborts). Into each transaction it
// injects faults at random operations: a process killed between steps (a rank, the
// coordinator, or every process at once), with or without power loss (unsynced data dropped
// entirely, a random part of it, or the last record torn); a commit crash point
// (before/after_prepare_logged, before/after_decision_logged); an injected write or sync I/O
// error in any process's journal. Dead processes restart and recover (in-doubt resolution
// included), and after every operation the harness checks the ranks against an independent
// reference model (model.h):
//   * a clean rank's live bytes are its committed version (RecomputeDigest against the
//     model's content of the committed transaction), and the live bytes are what was written;
//   * no two ranks disagree on a committed version; a commit the coordinator logged is never
//     lost: after recovery every rank records it and the coordinator still knows it;
//   * a dirty rank never serves; dirty, loaded, in-doubt and stale state are what the model
//     says; votes and outcomes are the predicted ones when no fault interfered;
//   * an injected I/O error never becomes a silent success: the call that hit it fails, and
//     the process is dead (E_CRASHED) afterwards;
//   * after the last crash every process recovers, a fault-free full commit succeeds and makes
//     every rank serve, and `wtx check` finds every journal consistent.
// A script stops at its first violation; the report names the seed, script and step, and
// `--start I --iterations 1 --verbose` replays it alone.
//
// Thread-safety: RunTorture is single-threaded; do not run two on the same directory.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wtx/status.h"

namespace wtx::torture {

struct TortureOptions {
  uint64_t iterations = 100;  // scripts
  uint64_t seed = 1;
  uint64_t start = 0;  // index of the first script (scripts are independent)
  int ranks = 2;
  int transactions = 10;     // per script, before the final fault-free one
  std::string dir;           // scratch directory; default: /dev/shm (or the temp dir)
  bool keep_failed = false;  // keep the journals of a failing script
  bool verbose = false;      // trace every operation to `log`
  std::function<void(const std::string&)> log;  // progress and traces; may be empty
  // The coordinator's decision log: empty for its embedded journal, or etcd://.../PREFIX
  // (each script decides under a sub-prefix of its own; a coordinator "kill" hands the
  // leadership over and the next one takes it, re-sends and aborts what was left undecided).
  std::string decision_log;
};

struct Violation {
  uint64_t script = 0;
  int step = 0;
  std::string what;
  std::vector<std::string> trace;  // the script's last operations
  std::string journals;            // where the journals were kept (keep_failed)
};

// The command line that replays script `script` of a run with options `o` alone (every flag
// that changes what runs, --decision-log included), for the report and its JSON.
std::string ReproduceCommand(const TortureOptions& o, int64_t script);

struct TortureReport {
  uint64_t scripts = 0;
  uint64_t steps = 0;
  uint64_t transactions = 0;
  uint64_t committed = 0, aborted = 0, noop = 0, begin_refused = 0;
  uint64_t crash_points = 0;                    // faults that killed or crashed a process
  std::map<std::string, uint64_t> crash_kinds;  // by kind and by power-loss mode
  uint64_t recoveries = 0;                      // process restarts
  uint64_t in_doubt_resolved = 0;
  uint64_t io_errors_injected = 0;  // I/O errors that fired
  uint64_t checks = 0;              // invariant checks evaluated
  uint64_t journals_verified = 0;
  std::vector<Violation> violations;
  double seconds = 0;
  nlohmann::json ToJson(const TortureOptions& o) const;
};

// Runs options.iterations scripts. Errors are environment failures (scratch directory).
Result<TortureReport> RunTorture(const TortureOptions& options);

}  // namespace wtx::torture
