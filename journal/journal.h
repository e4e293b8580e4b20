// Journal: the durable, append-only history of one participant or coordinator, on RocksDB.
//
// Each Append is one atomic WriteBatch holding the new records and the new materialized state;
// `sync` decides whether it is fsynced before Append returns. Records carry a sequence number
// and the checksum of their predecessor (a hash chain), so reordered, missing or foreign
// records are detected. The state carries the sequence and checksum of the last record it
// reflects. The database also stores the identity of its owner (role and rank); opening it as
// someone else is E_JOURNAL_CORRUPT.
//
// Recovery policy after a crash or corruption (docs/crash-safety.md):
//  * WAL recovery mode kTolerateCorruptedTailRecords (WalRecovery::kTolerateTornTail): an
//    incomplete record at the end of a write-ahead log (a crash in the middle of an append) is
//    dropped; any checksum mismatch anywhere refuses to open (E_JOURNAL_CORRUPT) instead of
//    silently recovering to the record before it, as kPointInTimeRecovery would.
//  * Sync watermark (journal/watermark.h): after every synced Append (and after a clean close,
//    which syncs the WAL) the journal writes the sequence and checksum of its last durable
//    record to one of two copies, WTX-SYNCED-A and -B, alternately (not fsynced: after a power
//    loss a copy can only be older, never newer, than the durable records). Both copies are
//    created durably (fsynced, renamed into place) when the journal is created or first opened
//    for writing without them, then rewritten in place through descriptors kept open, one
//    pwrite per synced append. Open refuses a journal that ends before the newest valid copy
//    or whose record there differs: a synced record was lost or rewritten. A read-write Open
//    also refuses a journal that has records but no valid copy (both lost: synced records may
//    be gone without a trace) unless options.accept_unverified; VerifyJournalDir (`wtx check`)
//    reports the same as corruption.
//  * WalRecovery::kStrict (kAbsoluteConsistency) refuses any incomplete or corrupt WAL record;
//    `wtx check` opens read-only with it first to tell a torn tail from a clean journal.
//  * paranoid_checks; SST block checksums are verified on every read and by VerifyStorage().
//
// Thread-safety: a Journal is not thread-safe; its owner serializes calls.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "journal/record.h"
#include "journal/watermark.h"
#include "src/util/cbor_writer.h"
#include "wtx/env.h"
#include "wtx/status.h"

namespace rocksdb {
class DB;
struct Options;
class Env;
class FileSystem;
class FSRandomRWFile;
}  // namespace rocksdb

namespace wtx {

struct JournalIdentity {
  std::string role;  // "participant" or "coordinator"
  int rank = -1;     // participants only
  bool operator==(const JournalIdentity&) const = default;
};

// How the write-ahead log is replayed on open (see the file comment).
enum class WalRecovery {
  kTolerateTornTail,  // kTolerateCorruptedTailRecords: drop an incomplete last record only
  kStrict,            // kAbsoluteConsistency: any incomplete or corrupt record fails the open
};

struct JournalOptions {
  Env env;
  // Required when creating; when opening, checked against the stored one unless `role` empty.
  JournalIdentity identity;
  bool create_if_missing = true;
  bool read_only = false;
  WalRecovery wal_recovery = WalRecovery::kTolerateTornTail;
  // Read-write only: open a journal that has records but no valid sync watermark (the
  // operator's --accept-unverified-journal; unverified_at_open() then says what was missing)
  // instead of refusing it with kJournalCorrupt.
  bool accept_unverified = false;
};

// One record to append: JSON (stored as CBOR), a WRITE record (stored in binary) or a CborMap
// (stored as CBOR, the bytes of the equal JSON object, without building it).
using JournalRecord = std::variant<nlohmann::json, WriteRecord, CborMap>;

// One stored record, as ForEachRecordRef visits it: exactly one of `write` (a binary WRITE
// record, not converted to JSON) and `json` is set.
struct RecordRef {
  uint64_t seq = 0;
  const WriteRecordView* write = nullptr;
  const nlohmann::json* json = nullptr;
};

class Journal {
 public:
  static Result<std::unique_ptr<Journal>> Open(const std::string& dir,
                                               const JournalOptions& options);
  ~Journal();
  Journal(const Journal&) = delete;
  Journal& operator=(const Journal&) = delete;

  // Appends `records` (each gets "seq" and "prev") and replaces the state (which gets "seq" and
  // "head"), atomically.
  // REQUIRES: !read_only
  Status Append(std::vector<JournalRecord> records, nlohmann::json state, bool sync);
  // The same with the state given as a CborMap (stored bytes identical to the JSON form's).
  Status Append(std::vector<JournalRecord> records, CborMap state, bool sync);
  Status Append(std::vector<nlohmann::json> records, nlohmann::json state, bool sync) {
    std::vector<JournalRecord> v;
    v.reserve(records.size());
    for (auto& r : records) v.emplace_back(std::move(r));
    return Append(std::move(v), std::move(state), sync);
  }
  Status Append(nlohmann::json record, nlohmann::json state, bool sync) {
    std::vector<JournalRecord> v;
    v.emplace_back(std::move(record));
    return Append(std::move(v), std::move(state), sync);
  }

  // The materialized state as of the last record (null when the journal is empty). After an
  // Append of a CborMap state it is decoded from the stored bytes on the first call (a const
  // call that writes a cache: serialize it with the owner's other calls, as every call).
  const nlohmann::json& state() const {
    if (state_stale_) DecodeState();
    return state_;
  }
  uint64_t last_seq() const { return last_seq_; }
  const JournalIdentity& identity() const { return identity_; }
  const std::string& dir() const { return dir_; }

  // Visits every record in sequence order, verifying checksum, sequence continuity and the
  // chain. Stops at the first error (kJournalCorrupt naming the record) or non-OK from fn.
  // Binary WRITE records are converted to JSON (as their CBOR form would decode).
  Status ForEachRecord(const std::function<Status(const nlohmann::json&)>& fn) const;
  // The same walk and checks, handing binary WRITE records over without building JSON (replay).
  Status ForEachRecordRef(const std::function<Status(const RecordRef&)>& fn) const;
  // Progress of the record walks above (`wtx check`): called every 4096 records and once at
  // the end with (records walked, last_seq()). REQUIRES: no walk in progress.
  void set_walk_progress(std::function<void(uint64_t walked, uint64_t total)> fn) const {
    walk_progress_ = std::move(fn);
  }
  // Chain + state consistency (the state names the last record).
  Status Verify() const;
  // Storage-level checks: every SST block checksum (RocksDB VerifyChecksum), every key
  // readable and of a known kind, and the records up to the sync watermark present.
  Status VerifyStorage() const;

  // The newest valid watermark read when the journal was opened (nullopt: none valid).
  const std::optional<SyncWatermark>& watermark_at_open() const {
    return watermark_at_open_.newest;
  }
  // Everything read from the watermark files at open (the copies' problems included).
  const WatermarkReading& watermark_reading() const { return watermark_at_open_; }
  // Non-empty when a read-write open accepted (options.accept_unverified) a journal with
  // records but no valid watermark: what was missing. The owner logs it as an event record.
  const std::string& unverified_at_open() const { return unverified_at_open_; }

  uint64_t synced_appends() const { return synced_appends_; }

 private:
  mutable std::function<void(uint64_t, uint64_t)> walk_progress_;  // set_walk_progress
  Journal() = default;
  Status LoadTail();
  // Refuses a journal that lost or rewrote records up to the watermark read at open.
  Status CheckWatermark() const;
  // Opens both watermark copies for rewriting in place; first (re)creates, durably, each one
  // that is missing or invalid (and removes the legacy single file once both exist), naming
  // the last record after syncing the write-ahead log.
  Status OpenWatermarkCopies();
  // Writes the watermark (the last record) to the copy not holding the newest one.
  Status WriteWatermark(bool sync);
  // Closes the watermark copies (their content stays); errors are ignored (best effort).
  void CloseWatermark();
  // One Append for both state forms: exactly one of json_state and cbor_state is set.
  Status AppendImpl(std::vector<JournalRecord> records, nlohmann::json* json_state,
                    CborMap* cbor_state, bool sync);
  // state_ from state_cbor_ (the payload of the stored state value).
  void DecodeState() const;

  std::string dir_;
  // The directory as registered among this process's writable journals ("" when not: a
  // read-only open). One writer per directory and process: a second is refused by name.
  std::string held_as_;
  JournalOptions options_;
  JournalIdentity identity_;
  std::unique_ptr<rocksdb::DB> db_;
  std::unique_ptr<::rocksdb::Env> rocks_env_;
  // The state as JSON; when state_stale_, the last Append stored state_cbor_ and state_ is
  // decoded from it on demand.
  mutable nlohmann::json state_;
  mutable std::string state_cbor_;
  mutable bool state_stale_ = false;
  uint64_t last_seq_ = 0;
  uint64_t last_checksum_ = 0;
  uint64_t synced_appends_ = 0;
  bool append_failed_ = false;
  WatermarkReading watermark_at_open_;
  std::string unverified_at_open_;
  // kWatermarkCopies, open for rewriting in place (read-write journals; null otherwise).
  std::unique_ptr<rocksdb::FSRandomRWFile> watermark_copies_[2];
  int next_copy_ = 0;                  // the copy the next WriteWatermark rewrites
  uint64_t watermark_generation_ = 0;  // of the newest copy written or read
};

// The RocksDB options every journal database is opened with (before the per-open recovery mode
// and filesystem): paranoid checks, torn-tail WAL recovery, no compression, small memtables.
void ConfigureJournalOptions(rocksdb::Options* options);

// "DIR: the journal has N records but no valid sync watermark (WTX-SYNCED-A: missing; ...):
// synced records lost at a record boundary cannot be ruled out": why such a journal is refused
// (Journal::Open, VerifyJournalDir) or what an accepted open logs.
std::string UnverifiedJournalMessage(const std::string& dir, uint64_t records,
                                     const WatermarkReading& watermark);

}  // namespace wtx
