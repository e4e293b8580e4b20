// The participant journal's records, typed: one struct per record type, each with exactly one
// Encode (to the JSON object stored as CBOR; the journal adds "seq" and "prev") and one Decode
// (from that object, every field validated), as LevelDB's VersionEdit. WRITE records are
// journal/record.h's WriteRecord (stored in binary, or as CBOR by older journals).
// docs/journal-format.md lists every record and field.
//
// Decoding never throws: a missing field, a field of the wrong type, an unknown enum name or an
// unknown record type is kJournalCorrupt naming the record's sequence number, its type and the
// field ("record 7 (OUTCOME): field 'decision' is missing"). Optional fields are those older
// journals lack (noted per field); a reader gets the documented default for them.
//
// Record type names appear as strings only in participant_records.cc: every other reader
// switches on ParticipantRecordType or std::visit's the decoded variant.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include <nlohmann/json.hpp>

#include "journal/journal.h"
#include "journal/record.h"
#include "src/txn/event_records.h"
#include "wtx/box.h"
#include "wtx/protocol.h"
#include "wtx/status.h"

namespace wtx {

enum class ParticipantRecordType {
  kCreate,
  kBegin,
  kWrite,
  kPatch,
  kRefresh,
  kPrepared,
  kChunks,
  kOutcome,
  kRestart,
  kReserve,
  kLanded,
  kUndeclared,
  kReattach,
  kAcceptedUnverified,  // src/txn/event_records.h
  kStorageMoved,
  kRebind,
  kLineage,
};
std::string_view ParticipantRecordTypeName(ParticipantRecordType t);  // "CREATE", ...
std::optional<ParticipantRecordType> ParticipantRecordTypeFromName(std::string_view name);
// A PREPARED vote: "yes" -> true, "no" -> false.
std::optional<bool> VoteFromName(std::string_view name);

// The journal was created for `rank`.
struct CreateRecord {
  int rank = 0;
  std::string fingerprint;  // manifest fingerprint ("" in journals that lack it): the model
  int64_t ts = 0;
  std::string lineage = {};  // "" when none was named (and in journals that lack it)
};

// The operator started a new lineage on this journal (ParticipantOptions::new_lineage): the
// journal now belongs to `lineage` and the model of `fingerprint`; the committed version and
// step of the old one are forgotten (not loaded, nothing served until a full commit).
struct LineageRecord {
  std::string lineage;
  std::string fingerprint;
  std::string previous_lineage;
  std::string previous_fingerprint;
  std::optional<int64_t> previous_step;
  int64_t ts = 0;
};

// A transaction began. Synced before any live byte changes.
struct BeginRecord {
  std::string tx;
  TxKind kind = TxKind::kFull;
  std::optional<std::string> base;  // partial/delta: the committed version it builds on
  std::vector<std::string> modules;
  std::vector<std::string> sources;
  bool rollback = false;
  VerifyMode verify = VerifyMode::kTouched;
  std::string fingerprint;
  std::string kernel_identity;
  // Every BEGIN written since the rank became durably dirty at BEGIN carries true; journals
  // from before lack it (nullopt: the flag stays as it was). Never false.
  std::optional<bool> marks_dirty = true;
  int64_t ts = 0;
  // The lineage and step it commits (absent in journals written before lineages).
  std::string lineage;
  std::optional<int64_t> step;
};

// Part k of n of the sparse patch of a source.
struct PatchRecord {
  std::string tx;
  std::string source;
  int64_t part = 0;
  int64_t parts = 0;
  int64_t indices = 0;  // indices in the part
  int64_t applied = 0;  // of them, held by this rank (> 0: live bytes changed)
  int64_t ts = 0;
  // A patch by piece (PatchRequest::source_box): its box, in source coordinates; part 0 of 1.
  std::optional<Box> source_box = std::nullopt;
};

// Derived states refreshed (history only: staleness is process state).
struct RefreshRecord {
  std::string tx;
  std::vector<std::string> derived;
  int64_t ts = 0;
};

// A group of what a no vote found missing: shards of one parameter (and, for a delta, the
// parts of one source).
struct MissingGroup {
  std::string param;
  std::vector<std::string> shards;
  std::optional<std::string> source;  // delta only, with the two below
  std::vector<int64_t> missing_parts;
  int64_t parts = 0;
};

struct PreparedCoverage {
  int64_t shards = 0;
  int64_t pieces = 0;
  int64_t rows = 0;
  int64_t elements = 0;
  int64_t bytes = 0;
  int64_t patched = 0;
  int64_t missing = 0;
};

// The rank's vote. Synced before a yes is sent.
struct PreparedRecord {
  std::string tx;
  bool yes = false;                   // "vote": "yes" / "no"
  std::optional<std::string> digest;  // yes: the rank digest (checkpoint)
  std::vector<std::string> errors;    // error code names
  std::string message;
  std::optional<PreparedCoverage> coverage;
  std::vector<MissingGroup> missing;
  int64_t first_write_us = 0;  // timings_us
  int64_t writes_us = 0;
  int64_t prepare_us = 0;
  bool has_timings = false;
  int64_t ts = 0;
  // yes: the rank's served digest; nullopt when equal to `digest` (nothing processed, or a
  // journal from before two digests)
  std::optional<std::string> served_digest = std::nullopt;
};

// The chunk digests behind a yes vote (every chunk, manifest order), for Reattach/Verify.
struct ChunksRecord {
  std::string tx;
  int64_t chunk_bytes = 0;
  std::vector<int64_t> counts;   // chunks per parameter
  std::vector<uint8_t> digests;  // u64 little endian per chunk
  int64_t ts = 0;
  // Processed parameters (ParamSpec::served): their checkpoint digests (u64 little endian,
  // one per index of `checkpoint_params`), which the live bytes no longer show.
  std::vector<int64_t> checkpoint_params = {};
  std::vector<uint8_t> checkpoint_digests = {};
};

// The decision as this rank applied it, and the facts the dirty rule derives from. `dirty`,
// `loaded` and `restored` are what the rule (DecideOutcome, participant_state.h) gave the
// writer; replay re-derives them and requires the stored values to agree.
struct OutcomeRecord {
  std::string tx;
  Decision decision = Decision::kAbort;
  std::optional<std::string> version;  // commit: the committed version
  std::optional<std::string> reason;
  // A fact: the process that decided is not the one that began (a restart came in between).
  // nullopt in journals written before the field: then implied by a RESTART while the
  // transaction was active, or by a missing `loaded` (a recovery abort of those journals).
  std::optional<bool> interrupted;
  std::optional<bool> dirty;     // derived; checked
  std::optional<bool> loaded;    // derived; checked (absent: a recovery abort, see above)
  std::optional<bool> restored;  // derived; checked
  int64_t ts = 0;
  // commit: its served digest; nullopt when equal to `version` (or from before two digests)
  std::optional<std::string> served_digest = std::nullopt;
};

// A process (re)opened the journal: it holds no live bytes of an earlier one.
struct RestartRecord {
  std::optional<bool> dirty;  // derived; checked
  int64_t ts = 0;
};

// One box of a reservation.
struct ReservedBox {
  std::string param;
  std::string shard;  // "" for a box of the whole parameter
  Box box;
};

// An in-place landing was reserved: the engine may change these bytes from now on.
struct ReserveRecord {
  std::string tx;
  std::string region;
  std::vector<ReservedBox> boxes;
  int64_t ts = 0;
};

// A reserved region landed (coverage bookkeeping).
struct LandedRecord {
  std::string tx;
  std::string region;
  int64_t ts = 0;
};

struct UndeclaredDifference {
  std::string param;
  int64_t first_chunk = 0;
  int64_t end_chunk = 0;
};

// The verifier found live bytes changed without a declared write: durably dirty.
struct UndeclaredRecord {
  std::optional<std::string> tx;  // the active transaction (prepare with verify all), if any
  std::vector<std::string> params;
  int64_t chunks = 0;
  std::vector<UndeclaredDifference> differences;
  int64_t ts = 0;
};

// Live bytes that survived a restart were proved equal to the committed version.
struct ReattachRecord {
  std::string committed_tx;
  int64_t chunks = 0;
  int64_t ts = 0;
};

// One parameter's storage, before and after (include/wtx/storage_identity.h).
struct StorageEntry {
  std::string param;
  int64_t was_address = 0;
  int64_t was_bytes = 0;
  int64_t now_address = 0;
  int64_t now_bytes = 0;
  std::string released;  // the engine let go of the storage: how ("" otherwise)
};

// The engine moved, shrank, freed or re-laid out the storage of these parameters: wtx no longer
// touches them, and the rank is durably dirty (an active transaction cannot commit).
struct StorageMovedRecord {
  std::optional<std::string> tx;  // the active transaction, if any
  std::vector<StorageEntry> params;
  int64_t ts = 0;
};

// The participant adopted the engine's current storage for these parameters: durably dirty
// and not loaded until a verify proves the bytes equal the committed version (REATTACH) or a
// full transaction commits.
struct RebindRecord {
  std::vector<StorageEntry> params;
  int64_t ts = 0;
};

using ParticipantRecord =
    std::variant<CreateRecord, BeginRecord, WriteRecord, PatchRecord, RefreshRecord, PreparedRecord,
                 ChunksRecord, OutcomeRecord, RestartRecord, ReserveRecord, LandedRecord,
                 UndeclaredRecord, ReattachRecord, AcceptedUnverifiedRecord, StorageMovedRecord,
                 RebindRecord, LineageRecord>;

ParticipantRecordType TypeOf(const ParticipantRecord& r);
// The transaction a record names (nullptr for CREATE, RESTART, REATTACH, ACCEPTED_UNVERIFIED,
// REBIND, LINEAGE, and an UNDECLARED or STORAGE_MOVED outside a transaction).
const std::string* TxOf(const ParticipantRecord& r);

// Encodes: the JSON object of the record ("type" and the fields; the journal adds seq/prev).
nlohmann::json Encode(const CreateRecord& r);
nlohmann::json Encode(const BeginRecord& r);
nlohmann::json EncodeJson(const WriteRecord& r);  // the CBOR form (the journal writes binary)
nlohmann::json Encode(const PatchRecord& r);
nlohmann::json Encode(const RefreshRecord& r);
nlohmann::json Encode(const PreparedRecord& r);
nlohmann::json Encode(const ChunksRecord& r);
nlohmann::json Encode(const OutcomeRecord& r);
nlohmann::json Encode(const RestartRecord& r);
nlohmann::json Encode(const ReserveRecord& r);
nlohmann::json Encode(const LandedRecord& r);
nlohmann::json Encode(const UndeclaredRecord& r);
nlohmann::json Encode(const ReattachRecord& r);
nlohmann::json Encode(const StorageMovedRecord& r);
nlohmann::json Encode(const RebindRecord& r);
nlohmann::json Encode(const LineageRecord& r);
// What the journal appends: WRITE in binary, every other record as its JSON object.
JournalRecord ToJournalRecord(ParticipantRecord r);

// Decodes: kJournalCorrupt naming the record's seq, type and field.
Result<CreateRecord> DecodeCreate(const nlohmann::json& r);
Result<BeginRecord> DecodeBegin(const nlohmann::json& r);
Result<WriteRecord> DecodeWriteJson(const nlohmann::json& r);
Result<PatchRecord> DecodePatch(const nlohmann::json& r);
Result<RefreshRecord> DecodeRefresh(const nlohmann::json& r);
Result<PreparedRecord> DecodePrepared(const nlohmann::json& r);
Result<ChunksRecord> DecodeChunks(const nlohmann::json& r);
Result<OutcomeRecord> DecodeOutcome(const nlohmann::json& r);
Result<RestartRecord> DecodeRestart(const nlohmann::json& r);
Result<ReserveRecord> DecodeReserve(const nlohmann::json& r);
Result<LandedRecord> DecodeLanded(const nlohmann::json& r);
Result<UndeclaredRecord> DecodeUndeclared(const nlohmann::json& r);
Result<ReattachRecord> DecodeReattach(const nlohmann::json& r);
Result<StorageMovedRecord> DecodeStorageMoved(const nlohmann::json& r);
Result<RebindRecord> DecodeRebind(const nlohmann::json& r);
Result<LineageRecord> DecodeLineage(const nlohmann::json& r);

// The one decode entry point: a JSON record of any type.
Result<ParticipantRecord> DecodeParticipantRecord(const nlohmann::json& r);
// A stored record as the journal walk hands it over (a binary WRITE is copied out of its view).
Result<ParticipantRecord> DecodeParticipantRecord(const RecordRef& r);
// Only the type of a JSON record (kJournalCorrupt when "type" is missing or unknown).
Result<ParticipantRecordType> ParticipantRecordTypeOf(const nlohmann::json& r);

}  // namespace wtx
