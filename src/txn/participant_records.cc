#include "src/txn/participant_records.h"

#include <array>
#include <utility>

#include "journal/record_fields.h"
#include "src/txn/decision_fields.h"
#include "src/util/cbor_writer.h"
#include "src/util/json_map.h"

namespace wtx {

using nlohmann::json;

namespace {

// The stored names, in enum order. The only place record type names are spelled.
// (Event records shared with the coordinator's journal are spelled in event_records.h.)
constexpr std::array<std::string_view, 17> kParticipantTypeNames = {
    "CREATE",        "BEGIN",
    "WRITE",         "PATCH",
    "REFRESH",       "PREPARED",
    "CHUNKS",        "OUTCOME",
    "RESTART",       "RESERVE",
    "LANDED",        "UNDECLARED",
    "REATTACH",      kAcceptedUnverifiedType,
    "STORAGE_MOVED", "REBIND",
    "LINEAGE"};

json ParticipantTypeJson(ParticipantRecordType t) {
  return json(std::string(ParticipantRecordTypeName(t)));
}

json BoxJson(const Box& box) {
  json out = json::array();
  for (const Range& r : box) out.push_back({r.begin, r.end});
  return out;
}

// A box: [[begin, end], ...] with begin <= end.
Box BoxAt(RecordFields& f, const json* v, std::string_view name) {
  Box box;
  if (!v) return box;
  if (!v->is_array()) {
    f.Fail(name, "is not a box");
    return box;
  }
  for (const auto& r : *v) {
    if (!r.is_array() || r.size() != 2) {
      f.Fail(name, "is not a box of [begin, end] ranges");
      return {};
    }
    const int64_t b = f.IntAt(r[0], name);
    const int64_t e = f.IntAt(r[1], name);
    if (!f.ok()) return {};
    if (b > e) {
      f.Fail(name, "has a range whose end precedes its begin");
      return {};
    }
    box.push_back(Range{b, e});
  }
  return box;
}

// Fields of a record of `type` (the "type" field itself was checked by the caller).
RecordFields ParticipantFields(const json& r, ParticipantRecordType type) {
  return RecordFields(r, RecordSeqOf(r), std::string(ParticipantRecordTypeName(type)));
}

Status NotAnObjectRecord(const json& r) {
  return Status::Corruption("record " + std::to_string(RecordSeqOf(r)) + " is not an object");
}

}  // namespace

std::string_view ParticipantRecordTypeName(ParticipantRecordType t) {
  return kParticipantTypeNames[static_cast<size_t>(t)];
}

std::optional<bool> VoteFromName(std::string_view name) {
  if (name == "yes") return true;
  if (name == "no") return false;
  return std::nullopt;
}

std::optional<ParticipantRecordType> ParticipantRecordTypeFromName(std::string_view name) {
  for (size_t i = 0; i < kParticipantTypeNames.size(); ++i) {
    if (kParticipantTypeNames[i] == name) return static_cast<ParticipantRecordType>(i);
  }
  return std::nullopt;
}

ParticipantRecordType TypeOf(const ParticipantRecord& r) {
  // The variant's alternatives are in enum order.
  return static_cast<ParticipantRecordType>(r.index());
}

const std::string* TxOf(const ParticipantRecord& r) {
  return std::visit(
      [](const auto& rec) -> const std::string* {
        using T = std::decay_t<decltype(rec)>;
        if constexpr (std::is_same_v<T, CreateRecord> || std::is_same_v<T, RestartRecord> ||
                      std::is_same_v<T, ReattachRecord> ||
                      std::is_same_v<T, AcceptedUnverifiedRecord> ||
                      std::is_same_v<T, RebindRecord> || std::is_same_v<T, LineageRecord>) {
          return nullptr;
        } else if constexpr (std::is_same_v<T, UndeclaredRecord> ||
                             std::is_same_v<T, StorageMovedRecord>) {
          return rec.tx ? &*rec.tx : nullptr;
        } else {
          return &rec.tx;
        }
      },
      r);
}

// ---- CREATE ----

json Encode(const CreateRecord& r) {
  json j = {{"type", ParticipantTypeJson(ParticipantRecordType::kCreate)},
            {"rank", r.rank},
            {"fingerprint", r.fingerprint},
            {"ts", r.ts}};
  if (!r.lineage.empty()) j["lineage"] = r.lineage;
  return j;
}

Result<CreateRecord> DecodeCreate(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kCreate);
  CreateRecord r;
  const int64_t rank = f.Int("rank");
  if (f.ok() && (rank < 0 || rank > INT32_MAX)) f.Fail("rank", "is not a rank");
  r.rank = static_cast<int>(rank);
  r.fingerprint = f.OptString("fingerprint").value_or("");
  r.lineage = f.OptString("lineage").value_or("");
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

// ---- LINEAGE ----

json Encode(const LineageRecord& r) {
  json j = {{"type", ParticipantTypeJson(ParticipantRecordType::kLineage)},
            {"lineage", r.lineage},
            {"fingerprint", r.fingerprint},
            {"previous_lineage", r.previous_lineage},
            {"previous_fingerprint", r.previous_fingerprint},
            {"ts", r.ts}};
  if (r.previous_step) j["previous_step"] = *r.previous_step;
  return j;
}

Result<LineageRecord> DecodeLineage(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kLineage);
  LineageRecord r;
  r.lineage = f.String("lineage");
  r.fingerprint = f.String("fingerprint");
  r.previous_lineage = f.OptString("previous_lineage").value_or("");
  r.previous_fingerprint = f.OptString("previous_fingerprint").value_or("");
  r.previous_step = ReadStep(f, "previous_step");
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

// ---- BEGIN ----

// The hot records (every transaction writes them on every rank) are encoded once, as templates
// over the map type: JsonMap gives Encode's JSON object, CborMap the bytes the journal stores
// (those of json::to_cbor of that object) without building JSON.
namespace {

template <typename M>
M BeginFields(const BeginRecord& r) {
  M out;
  out.Text("type", ParticipantRecordTypeName(ParticipantRecordType::kBegin))
      .Text("tx", r.tx)
      .Text("kind", TxKindName(r.kind))
      .OptText("base", r.base)
      .Texts("modules", r.modules)
      .Texts("sources", r.sources)
      .Bool("rollback", r.rollback)
      .Text("verify", VerifyModeName(r.verify))
      .Text("fingerprint", r.fingerprint)
      .Text("kernel_identity", r.kernel_identity)
      .Int("ts", r.ts);
  if (r.marks_dirty) out.Bool("dirty", *r.marks_dirty);
  if (!r.lineage.empty()) out.Text("lineage", r.lineage);
  if (r.step) out.Int("step", *r.step);
  return out;
}

}  // namespace

json Encode(const BeginRecord& r) { return BeginFields<JsonMap>(r).Take(); }

Result<BeginRecord> DecodeBegin(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kBegin);
  BeginRecord r;
  r.tx = f.String("tx");
  r.kind = f.Enum<TxKind>("kind", TxKindFromName, "is not full, partial or delta")
               .value_or(TxKind::kFull);
  r.base = f.OptString("base");
  r.modules = f.Strings("modules");
  r.sources = f.Strings("sources");
  r.rollback = f.OptBool("rollback").value_or(false);
  r.verify = f.Enum<VerifyMode>("verify", VerifyModeFromName, "is not touched or all",
                                /*required=*/false)
                 .value_or(VerifyMode::kTouched);
  r.fingerprint = f.OptString("fingerprint").value_or("");
  r.kernel_identity = f.OptString("kernel_identity").value_or("");
  r.marks_dirty = f.OptBool("dirty");
  if (r.marks_dirty == false) f.Fail("dirty", "is false (a BEGIN marks the rank dirty)");
  r.ts = f.OptInt("ts").value_or(0);
  r.lineage = f.OptString("lineage").value_or("");
  r.step = ReadStep(f, "step");
  return FieldsResult(f, std::move(r));
}

// ---- WRITE (CBOR form) ----

json EncodeJson(const WriteRecord& r) {
  return {{"type", ParticipantTypeJson(ParticipantRecordType::kWrite)},
          {"tx", r.tx},
          {"param", r.param},
          {"box", BoxJson(r.box)},
          {"elements", r.elements},
          {"bytes", r.bytes},
          {"shards", r.shards},
          {"ts", r.ts}};
}

Result<WriteRecord> DecodeWriteJson(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kWrite);
  WriteRecord r;
  r.tx = f.String("tx");
  r.param = f.String("param");
  r.box = BoxAt(f, f.Array("box", true), "box");
  r.elements = f.Int("elements");
  r.bytes = f.Int("bytes");
  r.shards = f.Strings("shards");
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

// ---- PATCH ----

json Encode(const PatchRecord& r) {
  json j = {{"type", ParticipantTypeJson(ParticipantRecordType::kPatch)},
            {"tx", r.tx},
            {"source", r.source},
            {"part", {r.part, r.parts}},
            {"indices", r.indices},
            {"applied", r.applied},
            {"ts", r.ts}};
  if (r.source_box) j["source_box"] = BoxJson(*r.source_box);
  return j;
}

Result<PatchRecord> DecodePatch(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kPatch);
  PatchRecord r;
  r.tx = f.String("tx");
  r.source = f.String("source");
  std::vector<int64_t> part = f.Ints("part", true);
  if (f.ok() && (part.size() != 2 || part[0] < 0 || part[0] >= part[1])) {
    f.Fail("part", "is not [k, n] with 0 <= k < n");
  } else if (f.ok()) {
    r.part = part[0];
    r.parts = part[1];
  }
  r.indices = f.Int("indices");
  r.applied = f.Int("applied");
  if (f.ok() && (r.indices < 0 || r.applied < 0)) {
    f.Fail(r.indices < 0 ? "indices" : "applied", "is negative");
  }
  if (f.Has("source_box")) r.source_box = BoxAt(f, f.Array("source_box", true), "source_box");
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

// ---- REFRESH ----

json Encode(const RefreshRecord& r) {
  return {{"type", ParticipantTypeJson(ParticipantRecordType::kRefresh)},
          {"tx", r.tx},
          {"derived", r.derived},
          {"ts", r.ts}};
}

Result<RefreshRecord> DecodeRefresh(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kRefresh);
  RefreshRecord r;
  r.tx = f.String("tx");
  r.derived = f.Strings("derived", true);
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

// ---- PREPARED ----

namespace {

template <typename M>
M PreparedFields(const PreparedRecord& r) {
  std::vector<M> missing;
  missing.reserve(r.missing.size());
  for (const MissingGroup& g : r.missing) {
    M e;
    e.Text("param", g.param).Texts("shards", g.shards);
    if (g.source) {
      e.Text("source", *g.source).Ints("missing_parts", g.missing_parts).Int("parts", g.parts);
    }
    missing.push_back(std::move(e));
  }
  M out;
  out.Text("type", ParticipantRecordTypeName(ParticipantRecordType::kPrepared))
      .Text("tx", r.tx)
      .Text("vote", r.yes ? "yes" : "no")
      .OptText("digest", r.digest)
      .OptText("served_digest", r.served_digest)
      .Texts("errors", r.errors)
      .Text("message", r.message)
      .Maps("missing", missing)
      .Int("ts", r.ts);
  if (r.coverage) {
    const PreparedCoverage& c = *r.coverage;
    M cov;
    cov.Int("shards", c.shards)
        .Int("pieces", c.pieces)
        .Int("rows", c.rows)
        .Int("elements", c.elements)
        .Int("bytes", c.bytes)
        .Int("patched", c.patched)
        .Int("missing", c.missing);
    out.Map("coverage", cov);
  }
  if (r.has_timings) {
    M t;
    t.Int("first_write", r.first_write_us).Int("writes", r.writes_us).Int("prepare", r.prepare_us);
    out.Map("timings_us", t);
  }
  return out;
}

}  // namespace

json Encode(const PreparedRecord& r) { return PreparedFields<JsonMap>(r).Take(); }

Result<PreparedRecord> DecodePrepared(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kPrepared);
  PreparedRecord r;
  r.tx = f.String("tx");
  r.yes = f.Enum<bool>("vote", VoteFromName, "is not yes or no").value_or(false);
  r.digest = f.OptString("digest");
  if (f.ok() && r.yes && !r.digest) f.Fail("digest", "is missing from a yes vote");
  r.served_digest = f.OptString("served_digest");
  r.errors = f.Strings("errors");
  r.message = f.OptString("message").value_or("");
  f.WithObject("coverage", false, [&](RecordFields& c) {
    PreparedCoverage cov;
    cov.shards = c.OptInt("shards").value_or(0);
    cov.pieces = c.OptInt("pieces").value_or(0);
    cov.rows = c.OptInt("rows").value_or(0);
    cov.elements = c.OptInt("elements").value_or(0);
    cov.bytes = c.OptInt("bytes").value_or(0);
    cov.patched = c.OptInt("patched").value_or(0);
    cov.missing = c.OptInt("missing").value_or(0);
    r.coverage = cov;
  });
  f.ForEachObject("missing", false, [&](RecordFields& e) {
    MissingGroup g;
    g.param = e.String("param");
    g.shards = e.Strings("shards");
    g.source = e.OptString("source");
    g.missing_parts = e.Ints("missing_parts");
    g.parts = e.OptInt("parts").value_or(0);
    r.missing.push_back(std::move(g));
  });
  f.WithObject("timings_us", false, [&](RecordFields& t) {
    r.has_timings = true;
    r.first_write_us = t.OptInt("first_write").value_or(0);
    r.writes_us = t.OptInt("writes").value_or(0);
    r.prepare_us = t.OptInt("prepare").value_or(0);
  });
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

// ---- CHUNKS ----

namespace {

template <typename M>
M ChunksFields(const ChunksRecord& r) {
  M out;
  out.Text("type", ParticipantRecordTypeName(ParticipantRecordType::kChunks))
      .Text("tx", r.tx)
      .Int("chunk_bytes", r.chunk_bytes)
      .Ints("counts", r.counts)
      .Binary("digests", r.digests)
      .Int("ts", r.ts);
  if (!r.checkpoint_params.empty()) {
    out.Ints("checkpoint_params", r.checkpoint_params)
        .Binary("checkpoint_digests", r.checkpoint_digests);
  }
  return out;
}

}  // namespace

json Encode(const ChunksRecord& r) { return ChunksFields<JsonMap>(r).Take(); }

Result<ChunksRecord> DecodeChunks(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kChunks);
  ChunksRecord r;
  r.tx = f.String("tx");
  r.chunk_bytes = f.Int("chunk_bytes");
  if (f.ok() && r.chunk_bytes <= 0) f.Fail("chunk_bytes", "is not positive");
  r.counts = f.Ints("counts", true);
  int64_t total = 0;
  for (int64_t c : r.counts) {
    if (c < 0 || c > (int64_t{1} << 48)) {
      f.Fail("counts", "holds a count out of range");
      break;
    }
    total += c;
  }
  r.digests = f.Binary("digests");
  if (f.ok() && r.digests.size() != static_cast<size_t>(total) * 8) {
    f.Fail("digests", "does not hold 8 bytes for each chunk the counts name");
  }
  if (j.contains("checkpoint_params")) {
    r.checkpoint_params = f.Ints("checkpoint_params", true);
    for (int64_t p : r.checkpoint_params) {
      if (p < 0 || static_cast<size_t>(p) >= r.counts.size()) {
        f.Fail("checkpoint_params", "names a parameter out of range");
        break;
      }
    }
    r.checkpoint_digests = f.Binary("checkpoint_digests");
    if (f.ok() && r.checkpoint_digests.size() != r.checkpoint_params.size() * 8) {
      f.Fail("checkpoint_digests", "does not hold 8 bytes for each of checkpoint_params");
    }
  }
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

// ---- OUTCOME ----

namespace {

template <typename M>
M OutcomeFields(const OutcomeRecord& r) {
  M out;
  out.Text("type", ParticipantRecordTypeName(ParticipantRecordType::kOutcome))
      .Text("tx", r.tx)
      .Text("decision", DecisionName(r.decision))
      .OptText("version", r.version)
      .OptText("served_digest", r.served_digest)
      .Int("ts", r.ts);
  if (r.reason) out.Text("reason", *r.reason);
  if (r.interrupted) out.Bool("interrupted", *r.interrupted);
  if (r.dirty) out.Bool("dirty", *r.dirty);
  if (r.loaded) out.Bool("loaded", *r.loaded);
  if (r.restored) out.Bool("restored", *r.restored);
  return out;
}

}  // namespace

json Encode(const OutcomeRecord& r) { return OutcomeFields<JsonMap>(r).Take(); }

Result<OutcomeRecord> DecodeOutcome(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kOutcome);
  OutcomeRecord r;
  r.tx = f.String("tx");
  ReadDecision(f, &r.decision, &r.version);
  r.served_digest = f.OptString("served_digest");
  if (f.ok() && r.served_digest && !r.version) f.Fail("served_digest", "without a version");
  r.reason = f.OptString("reason");
  r.interrupted = f.OptBool("interrupted");
  r.dirty = f.OptBool("dirty");
  r.loaded = f.OptBool("loaded");
  r.restored = f.OptBool("restored");
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

// ---- RESTART ----

json Encode(const RestartRecord& r) {
  json out = {{"type", ParticipantTypeJson(ParticipantRecordType::kRestart)}, {"ts", r.ts}};
  if (r.dirty) out["dirty"] = *r.dirty;
  return out;
}

Result<RestartRecord> DecodeRestart(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kRestart);
  RestartRecord r;
  r.dirty = f.OptBool("dirty");
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

// ---- RESERVE ----

json Encode(const ReserveRecord& r) {
  json boxes = json::array();
  for (const ReservedBox& b : r.boxes) {
    boxes.push_back({{"param", b.param}, {"shard", b.shard}, {"box", BoxJson(b.box)}});
  }
  return {{"type", ParticipantTypeJson(ParticipantRecordType::kReserve)},
          {"tx", r.tx},
          {"region", r.region},
          {"boxes", std::move(boxes)},
          {"ts", r.ts}};
}

Result<ReserveRecord> DecodeReserve(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kReserve);
  ReserveRecord r;
  r.tx = f.String("tx");
  r.region = f.String("region");
  f.ForEachObject("boxes", true, [&](RecordFields& e) {
    ReservedBox b;
    b.param = e.String("param");
    b.shard = e.OptString("shard").value_or("");
    b.box = BoxAt(e, e.Array("box", true), "box");
    r.boxes.push_back(std::move(b));
  });
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

// ---- LANDED ----

json Encode(const LandedRecord& r) {
  return {{"type", ParticipantTypeJson(ParticipantRecordType::kLanded)},
          {"tx", r.tx},
          {"region", r.region},
          {"ts", r.ts}};
}

Result<LandedRecord> DecodeLanded(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kLanded);
  LandedRecord r;
  r.tx = f.String("tx");
  r.region = f.String("region");
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

// ---- UNDECLARED ----

json Encode(const UndeclaredRecord& r) {
  json diffs = json::array();
  for (const UndeclaredDifference& d : r.differences) {
    diffs.push_back({{"param", d.param}, {"chunks", {d.first_chunk, d.end_chunk}}});
  }
  return {{"type", ParticipantTypeJson(ParticipantRecordType::kUndeclared)},
          {"tx", OptionalStringJson(r.tx)},
          {"params", r.params},
          {"chunks", r.chunks},
          {"differences", std::move(diffs)},
          {"ts", r.ts}};
}

Result<UndeclaredRecord> DecodeUndeclared(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kUndeclared);
  UndeclaredRecord r;
  r.tx = f.OptString("tx");
  r.params = f.Strings("params");
  r.chunks = f.OptInt("chunks").value_or(0);
  f.ForEachObject("differences", false, [&](RecordFields& e) {
    UndeclaredDifference d;
    d.param = e.String("param");
    std::vector<int64_t> c = e.Ints("chunks", true);
    if (e.ok() && (c.size() != 2 || c[0] > c[1])) e.Fail("chunks", "is not [first, end)");
    if (!e.ok()) return;
    d.first_chunk = c[0];
    d.end_chunk = c[1];
    r.differences.push_back(std::move(d));
  });
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

// ---- REATTACH ----

json Encode(const ReattachRecord& r) {
  return {{"type", ParticipantTypeJson(ParticipantRecordType::kReattach)},
          {"committed_tx", r.committed_tx},
          {"chunks", r.chunks},
          {"ts", r.ts}};
}

Result<ReattachRecord> DecodeReattach(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kReattach);
  ReattachRecord r;
  r.committed_tx = f.String("committed_tx");
  r.chunks = f.OptInt("chunks").value_or(0);
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

// ---- STORAGE_MOVED, REBIND ----

namespace {

json StorageEntriesJson(const std::vector<StorageEntry>& entries) {
  json out = json::array();
  for (const StorageEntry& e : entries) {
    json o = {{"param", e.param},
              {"was", {e.was_address, e.was_bytes}},
              {"now", {e.now_address, e.now_bytes}}};
    if (!e.released.empty()) o["released"] = e.released;
    out.push_back(std::move(o));
  }
  return out;
}

std::vector<StorageEntry> StorageEntriesAt(RecordFields& f) {
  std::vector<StorageEntry> out;
  f.ForEachObject("params", true, [&](RecordFields& e) {
    StorageEntry s;
    s.param = e.String("param");
    const std::vector<int64_t> was = e.Ints("was", true);
    const std::vector<int64_t> now = e.Ints("now", true);
    if (e.ok() && was.size() != 2) e.Fail("was", "is not [address, bytes]");
    if (e.ok() && now.size() != 2) e.Fail("now", "is not [address, bytes]");
    s.released = e.OptString("released").value_or("");
    if (!e.ok()) return;
    s.was_address = was[0];
    s.was_bytes = was[1];
    s.now_address = now[0];
    s.now_bytes = now[1];
    out.push_back(std::move(s));
  });
  return out;
}

}  // namespace

json Encode(const StorageMovedRecord& r) {
  return {{"type", ParticipantTypeJson(ParticipantRecordType::kStorageMoved)},
          {"tx", OptionalStringJson(r.tx)},
          {"params", StorageEntriesJson(r.params)},
          {"ts", r.ts}};
}

Result<StorageMovedRecord> DecodeStorageMoved(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kStorageMoved);
  StorageMovedRecord r;
  r.tx = f.OptString("tx");
  r.params = StorageEntriesAt(f);
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

json Encode(const RebindRecord& r) {
  return {{"type", ParticipantTypeJson(ParticipantRecordType::kRebind)},
          {"params", StorageEntriesJson(r.params)},
          {"ts", r.ts}};
}

Result<RebindRecord> DecodeRebind(const json& j) {
  RecordFields f = ParticipantFields(j, ParticipantRecordType::kRebind);
  RebindRecord r;
  r.params = StorageEntriesAt(f);
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

// ---- entry points ----

JournalRecord ToJournalRecord(ParticipantRecord r) {
  if (auto* w = std::get_if<WriteRecord>(&r)) return JournalRecord(std::move(*w));
  return std::visit(
      [](const auto& rec) -> JournalRecord {
        using T = std::decay_t<decltype(rec)>;
        if constexpr (std::is_same_v<T, WriteRecord>) {
          return EncodeJson(rec);
        } else if constexpr (std::is_same_v<T, BeginRecord>) {
          return BeginFields<CborMap>(rec);
        } else if constexpr (std::is_same_v<T, PreparedRecord>) {
          return PreparedFields<CborMap>(rec);
        } else if constexpr (std::is_same_v<T, ChunksRecord>) {
          return ChunksFields<CborMap>(rec);
        } else if constexpr (std::is_same_v<T, OutcomeRecord>) {
          return OutcomeFields<CborMap>(rec);
        } else {
          return Encode(rec);
        }
      },
      r);
}

Result<ParticipantRecordType> ParticipantRecordTypeOf(const json& r) {
  if (!r.is_object()) return NotAnObjectRecord(r);
  auto it = r.find("type");
  const std::string at = "record " + std::to_string(RecordSeqOf(r));
  if (it == r.end() || !it->is_string()) {
    return Status::Corruption(at + ": field 'type' is missing or not a string");
  }
  auto t = ParticipantRecordTypeFromName(it->get_ref<const std::string&>());
  if (!t) {
    return Status::Corruption(at + ": unknown record type " +
                              it->dump(-1, ' ', false, json::error_handler_t::replace));
  }
  return *t;
}

namespace {

template <typename T>
Result<ParticipantRecord> WrapParticipant(Result<T> r) {
  if (!r.ok()) return r.status();
  return ParticipantRecord(std::move(r).value());
}

}  // namespace

Result<ParticipantRecord> DecodeParticipantRecord(const json& r) {
  WTX_ASSIGN_OR_RETURN(type, ParticipantRecordTypeOf(r));
  switch (type) {
    case ParticipantRecordType::kCreate:
      return WrapParticipant(DecodeCreate(r));
    case ParticipantRecordType::kBegin:
      return WrapParticipant(DecodeBegin(r));
    case ParticipantRecordType::kWrite:
      return WrapParticipant(DecodeWriteJson(r));
    case ParticipantRecordType::kPatch:
      return WrapParticipant(DecodePatch(r));
    case ParticipantRecordType::kRefresh:
      return WrapParticipant(DecodeRefresh(r));
    case ParticipantRecordType::kPrepared:
      return WrapParticipant(DecodePrepared(r));
    case ParticipantRecordType::kChunks:
      return WrapParticipant(DecodeChunks(r));
    case ParticipantRecordType::kOutcome:
      return WrapParticipant(DecodeOutcome(r));
    case ParticipantRecordType::kRestart:
      return WrapParticipant(DecodeRestart(r));
    case ParticipantRecordType::kReserve:
      return WrapParticipant(DecodeReserve(r));
    case ParticipantRecordType::kLanded:
      return WrapParticipant(DecodeLanded(r));
    case ParticipantRecordType::kUndeclared:
      return WrapParticipant(DecodeUndeclared(r));
    case ParticipantRecordType::kReattach:
      return WrapParticipant(DecodeReattach(r));
    case ParticipantRecordType::kAcceptedUnverified:
      return WrapParticipant(DecodeAcceptedUnverified(r));
    case ParticipantRecordType::kStorageMoved:
      return WrapParticipant(DecodeStorageMoved(r));
    case ParticipantRecordType::kRebind:
      return WrapParticipant(DecodeRebind(r));
    case ParticipantRecordType::kLineage:
      return WrapParticipant(DecodeLineage(r));
  }
  return Status::Corruption("record " + std::to_string(RecordSeqOf(r)) + ": unknown type");
}

Result<ParticipantRecord> DecodeParticipantRecord(const RecordRef& ref) {
  if (ref.json) return DecodeParticipantRecord(*ref.json);
  // A binary WRITE (its layout was verified by the journal walk), as its CBOR form decodes.
  return WrapParticipant(DecodeWriteJson(ref.write->ToJson()));
}

}  // namespace wtx
