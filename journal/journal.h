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
//  * Sync watermark: after every synced Append (and after a clean close, which syncs the WAL)
//    the journal writes the sequence and checksum of its last durable record to the file
//    kWatermarkFile (not fsynced itself: after a power loss it can only be older, never
//    newer, than the durable records; it is rewritten in place through a descriptor kept open
//    from the first synced Append on, one pwrite per sync, so a torn rewrite is unreadable,
//    never a wrong record). Open refuses a journal that ends before the watermark or
//    whose record at the watermark differs: a synced record was lost or rewritten. A missing or
//    unreadable watermark carries no information at Open (a power loss may take it);
//    VerifyJournalDir (`wtx check`) reports it.
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
#include "src/util/cbor_writer.h"
#include "wtx/env.h"
#include "wtx/status.h"

namespace rocksdb {
class DB;
struct Options;
class Env;
class FileSystem;
class FSWritableFile;
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

// The file, inside the journal directory, naming the last record known to be durable.
inline constexpr const char* kWatermarkFile = "WTX-SYNCED";

struct JournalOptions {
  Env env;
  // Required when creating; when opening, checked against the stored one unless `role` empty.
  JournalIdentity identity;
  bool create_if_missing = true;
  bool read_only = false;
  WalRecovery wal_recovery = WalRecovery::kTolerateTornTail;
};

// The content of kWatermarkFile: the last record known to be durable.
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

struct SyncWatermark {
  uint64_t seq = 0;
  std::string head;  // hex checksum of record `seq`
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
  // Chain + state consistency (the state names the last record).
  Status Verify() const;
  // Storage-level checks: every SST block checksum (RocksDB VerifyChecksum), every key
  // readable and of a known kind, and the records up to the sync watermark present.
  Status VerifyStorage() const;

  // The watermark read when the journal was opened (nullopt: none, or unreadable).
  const std::optional<SyncWatermark>& watermark_at_open() const { return watermark_at_open_; }
  // Why the watermark could not be used at open ("" when it was read, or there was none).
  const std::string& watermark_problem() const { return watermark_problem_; }

  uint64_t synced_appends() const { return synced_appends_; }

 private:
  Journal() = default;
  Status LoadTail();
  // Refuses a journal that lost or rewrote records up to the watermark read at open.
  Status CheckWatermark() const;
  Status WriteWatermark(bool sync);
  // Closes the watermark file (its content stays); errors are ignored (best effort).
  void CloseWatermark();
  // One Append for both state forms: exactly one of json_state and cbor_state is set.
  Status AppendImpl(std::vector<JournalRecord> records, nlohmann::json* json_state,
                    CborMap* cbor_state, bool sync);
  // state_ from state_cbor_ (the payload of the stored state value).
  void DecodeState() const;

  std::string dir_;
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
  std::optional<SyncWatermark> watermark_at_open_;
  std::string watermark_problem_;
  // kWatermarkFile, open for rewriting in place once this journal wrote it (null before).
  std::unique_ptr<rocksdb::FSWritableFile> watermark_file_;
  uint64_t watermark_bytes_ = 0;  // its length as this journal last wrote it
};

// The RocksDB options every journal database is opened with (before the per-open recovery mode
// and filesystem): paranoid checks, torn-tail WAL recovery, no compression, small memtables.
void ConfigureJournalOptions(rocksdb::Options* options);

// Reads `dir`/kWatermarkFile through `fs` (null: the default filesystem). nullopt with *problem
// empty when the file does not exist; nullopt with *problem set when it is unreadable.
std::optional<SyncWatermark> ReadWatermark(const std::string& dir,
                                           const std::shared_ptr<rocksdb::FileSystem>& fs,
                                           std::string* problem);

}  // namespace wtx
