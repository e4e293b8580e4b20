// Journal: the durable, append-only history of one participant or coordinator, on RocksDB.
//
// Each Append is one atomic WriteBatch holding the new records and the new materialized state;
// `sync` decides whether it is fsynced before Append returns. Records carry a sequence number
// and the checksum of their predecessor (a hash chain), so reordered, missing or foreign
// records are detected. The state carries the sequence and checksum of the last record it
// reflects. The database also stores the identity of its owner (role and rank); opening it as
// someone else is E_JOURNAL_CORRUPT.
//
// WAL recovery: kPointInTimeRecovery. After a power loss RocksDB recovers the longest
// consistent prefix of the write-ahead log (unsynced tails are dropped, as they may be);
// synced records are never dropped silently because Verify() checks the chain and the state
// against each other.
//
// Thread-safety: a Journal is not thread-safe; its owner serializes calls.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wtx/env.h"
#include "wtx/status.h"

namespace rocksdb {
class DB;
class Env;
}

namespace wtx {

struct JournalIdentity {
  std::string role;  // "participant" or "coordinator"
  int rank = -1;     // participants only
  bool operator==(const JournalIdentity&) const = default;
};

struct JournalOptions {
  Env env;
  // Required when creating; when opening, checked against the stored one unless `role` empty.
  JournalIdentity identity;
  bool create_if_missing = true;
  bool read_only = false;
};

class Journal {
 public:
  static Result<std::unique_ptr<Journal>> Open(const std::string& dir,
                                               const JournalOptions& options);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Appends `records` (each gets "seq" and "prev") and replaces the state, atomically.
  // REQUIRES: !read_only
  Status Append(std::vector<nlohmann::json> records, nlohmann::json state, bool sync);
  Status Append(nlohmann::json record, nlohmann::json state, bool sync) {
    std::vector<nlohmann::json> v;
    v.push_back(std::move(record));
    return Append(std::move(v), std::move(state), sync);
  }

  // The materialized state as of the last record (null when the journal is empty).
  const nlohmann::json& state() const { return state_; }
  uint64_t last_seq() const { return last_seq_; }
  const JournalIdentity& identity() const { return identity_; }
  const std::string& dir() const { return dir_; }

  // Visits every record in sequence order, verifying checksum, sequence continuity and the
  // chain. Stops at the first error (kJournalCorrupt naming the record) or non-OK from fn.
  Status ForEachRecord(const std::function<Status(const nlohmann::json&)>& fn) const;
  // Chain + state consistency (the state names the last record).
  Status Verify() const;

  uint64_t synced_appends() const { return synced_appends_; }

 private:
  Journal() = default;
  Status LoadTail();

  std::string dir_;
  JournalOptions options_;
  JournalIdentity identity_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<::rocksdb::Env> rocks_env_;
  nlohmann::json state_;
  uint64_t last_seq_ = 0;
  uint64_t last_checksum_ = 0;
  uint64_t synced_appends_ = 0;
};

}  // namespace wtx
