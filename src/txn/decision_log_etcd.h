// The decision log in etcd (wtx/decision_log.h): every key under the url's PREFIX, each value
// one record of src/txn/decision_log_records.h:
//
//   PREFIX/meta      marks PREFIX as a wtx decision log (created by the first open)
//   PREFIX/leader    the coordinator that leads, attached to its lease; its create revision
//                    is the leader's epoch (src/txn/etcd_leadership.h)
//   PREFIX/tx/<tx>   the decision on <tx>, created once (a transaction requiring it absent)
//   PREFIX/end/<tx>  present once every rank acknowledged that decision (MarkEnded)
//
// A fenced Decide (epoch > 0) is one etcd transaction requiring PREFIX/tx/<tx> absent and
// PREFIX/leader's create revision equal to the writer's epoch; DecideIfLeaderless requires
// PREFIX/leader absent instead. Either way the losing side reads the winner in the same
// transaction. Reads and lists are single transactions too (one consistent revision).
//
// Thread-safety: the log and its leaderships are safe from any thread.
#pragma once

#include <memory>

#include "wtx/decision_log.h"
#include "wtx/status.h"

namespace wtx {

// Opens (and on first use marks) the etcd decision log `options.url` names. kInvalidArgument
// for a malformed url (naming the part) or unusable TLS files; E_DECISION_LOG_UNAVAILABLE when
// no member answers (naming each); kJournalCorrupt when PREFIX/meta holds something else.
// REQUIRES: options.url starts with "etcd://" (else kInvalidArgument).
Result<std::shared_ptr<DecisionLog>> OpenEtcdDecisionLog(const DecisionLogOptions& options);

}  // namespace wtx
