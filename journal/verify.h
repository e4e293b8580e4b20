// VerifyJournalStore: the structural integrity check of a journal directory, behind `wtx check`
// (and the gate of `wtx log`, `show`, `status`): decides whether a journal directory can be
// trusted, and if not, names what is wrong. It opens the journal read-only (safe beside a
// running process) and never modifies it. What the records mean is not this layer's business:
// the layer above plugs its own check in (VerifyOptions::content_check; the transaction layer's
// is src/txn/journal_check.h, which also gives these gates with that check built in:
// VerifyJournalDir, OpenTrustedJournal, OpenVerifiedReadOnly).
//
// What it detects, in order (the first failure is reported):
//  1. Missing files: no CURRENT (deleted, or not a journal), a table or MANIFEST file the
//     database needs, a write-ahead log holding synced records (through the sync watermark).
//  2. Write-ahead-log damage: the journal is opened with kAbsoluteConsistency; if that fails
//     but kTolerateCorruptedTailRecords succeeds, the only damage is an incomplete last record
//     (a torn tail). A torn tail is a crash, not corruption, when every synced record survived
//     (sync watermark); it is then a warning. Any other WAL damage (a flipped byte anywhere,
//     a truncation inside a record that is not the last) is corruption.
//  3. Table damage: every block checksum of every SST (RocksDB VerifyChecksum), every value's
//     own XXH3 checksum, no key outside the journal's key space.
//  4. History damage: sequence numbers contiguous from 1, the hash chain ("prev"), the stored
//     state naming the last record, the record at the sync watermark present and unchanged,
//     and the content check when given (the transaction layer's: replay from empty equal to
//     the stored state).
//  5. Identity: the journal's stored owner (role, rank) against the expected one: given
//     explicitly, or inferred from the directory name ("rank-N" = participant N, "coordinator"),
//     so that one rank's files copied into another rank's directory are caught.
//  6. The sync watermark (journal/watermark.h): a journal with records but no valid copy
//     (both lost or damaged, and no file of the older single-file format) is corruption: lost
//     synced records cannot be ruled out. Both copies are created durably, so a power loss
//     cannot take them; only deletion or damage can. With `accept_unverified` it is a warning.
//     One copy lost or damaged while the other is valid: a warning (verified against the
//     other). `strict` turns every warning into corruption; a cleanly closed journal has none.
//
// OpenTrustedJournalStore is the gate of every process that writes a journal (Participant::Open,
// Coordinator::Open, hence `wtx rank` and `wtx coordinator`): it runs VerifyJournalDir first,
// read-only, and opens the journal for writing only when it passes, so that RocksDB never gets
// the chance to "repair" a damaged journal (deleting an orphaned table, replaying past a hole)
// and a daemon never starts on history it cannot trust. Only an absent or empty directory is
// initialised as a new journal.
//
// Thread-safety: a pure function of the files; concurrent calls are safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <functional>
#include <memory>

#include "journal/journal.h"
#include "wtx/status.h"

namespace wtx {

// What a journal's records mean, checked by the layer that writes them: OK, or kJournalCorrupt
// naming the first inconsistency (the transaction layer replays the records and compares the
// result with the stored state: src/txn/journal_check.h).
using JournalContentCheck = std::function<Status(const Journal&)>;

struct VerifyOptions {
  // Who the journal must belong to; nullopt: inferred from the directory name when it is
  // "rank-N" or "coordinator", otherwise not checked.
  std::optional<JournalIdentity> expect;
  // nullopt: the default filesystem.
  std::shared_ptr<rocksdb::FileSystem> fs;
  // Warnings (torn unsynced tail, one watermark copy lost) count as corruption.
  bool strict = false;
  // A journal with records but no valid sync watermark is a warning instead of corruption
  // (the operator's --accept-unverified-journal).
  bool accept_unverified = false;
  // Run on the opened journal after the structural checks; empty: not run.
  JournalContentCheck content_check;
  // Progress of content_check's record walks (Journal::set_walk_progress); may be empty.
  std::function<void(uint64_t walked, uint64_t total)> on_record;
};

struct JournalCheckReport {
  // OK; kJournalCorrupt naming what is wrong; kNotFound when `dir` holds no journal at all.
  Status status;
  std::vector<std::string> warnings;  // problems that are not corruption (a torn unsynced tail)
  JournalIdentity identity;           // as stored (empty role when unreadable)
  bool identity_checked = false;      // compared with an expected identity
  uint64_t records = 0;
  std::optional<SyncWatermark> watermark;
  bool torn_tail = false;
};

JournalCheckReport VerifyJournalStore(const std::string& dir, const VerifyOptions& options = {});

// Opens the journal in `dir` for writing (options.read_only must be false) after it passed
// VerifyJournalStore (with `content_check`) against options.identity (warnings allowed: a torn
// unsynced tail after a crash, one watermark copy lost; they are appended to *warnings when given).
// A journal with records but no valid watermark is refused unless options.accept_unverified; the
// opened journal's unverified_at_open() then says what was missing, for the owner to log. An absent
// or empty directory is created and initialised. Anything else is refused without touching a file:
// kJournalCorrupt naming what is wrong (as `wtx check` reports it), kInvalidArgument for a
// non-empty directory that holds no journal.
Result<std::unique_ptr<Journal>> OpenTrustedJournalStore(
    const std::string& dir, const JournalOptions& options, const JournalContentCheck& content_check,
    std::vector<std::string>* warnings = nullptr);

// Opens the journal in `dir` read-only after it passed VerifyJournalStore (its warnings are
// appended to *warnings when given) and, once open, `content_check`: a reader that goes through
// this never returns corrupt data. kNotFound when `dir` holds no journal; kJournalCorrupt naming
// what is wrong.
Result<std::unique_ptr<Journal>> OpenVerifiedJournalStore(
    const std::string& dir, const JournalContentCheck& content_check,
    std::vector<std::string>* warnings = nullptr);

// The identity a directory name implies: "rank-N" -> participant N, "coordinator" ->
// coordinator; nullopt for any other name.
std::optional<JournalIdentity> IdentityFromDirName(const std::string& dir);

}  // namespace wtx
