#include "src/txn/coordinator_records.h"

#include <array>
#include <utility>

#include "journal/record_fields.h"
#include "src/txn/decision_fields.h"

namespace wtx {

using nlohmann::json;

namespace {

// The stored names, in enum (and variant) order. The only place they are spelled.
// (Event records shared with the participant's journal are spelled in event_records.h.)
constexpr std::array<std::string_view, 5> kCoordinatorTypeNames = {
    "CREATE", "DECISION", "END", kAcceptedUnverifiedType, "BEGIN_REFUSED"};

json CoordinatorTypeJson(CoordinatorRecordType t) {
  return json(std::string(CoordinatorRecordTypeName(t)));
}

RecordFields CoordinatorFields(const json& r, CoordinatorRecordType type) {
  return RecordFields(r, RecordSeqOf(r), std::string(CoordinatorRecordTypeName(type)));
}

template <typename T>
Result<CoordinatorRecord> WrapCoordinator(Result<T> r) {
  if (!r.ok()) return r.status();
  return CoordinatorRecord(std::move(r).value());
}

}  // namespace

std::string_view CoordinatorRecordTypeName(CoordinatorRecordType t) {
  return kCoordinatorTypeNames[static_cast<size_t>(t)];
}

json Encode(const CoordinatorCreateRecord& r) {
  return {{"type", CoordinatorTypeJson(CoordinatorRecordType::kCreate)}, {"ts", r.ts}};
}

Result<CoordinatorCreateRecord> DecodeCoordinatorCreate(const json& j) {
  RecordFields f = CoordinatorFields(j, CoordinatorRecordType::kCreate);
  CoordinatorCreateRecord r;
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, r);
}

json Encode(const DecisionRecord& r) {
  json out = {{"type", CoordinatorTypeJson(CoordinatorRecordType::kDecision)},
              {"tx", r.tx},
              {"decision", std::string(DecisionName(r.decision))},
              {"version", r.version ? json(*r.version) : json()},
              {"reason", r.reason},
              {"ts", r.ts}};
  if (!r.votes.empty()) {
    json votes = json::array();
    for (const DecisionVote& v : r.votes) {
      json jv = {{"rank", v.rank}, {"vote", v.vote}};
      if (!v.error.empty()) jv["error"] = v.error;
      votes.push_back(std::move(jv));
    }
    out["votes"] = std::move(votes);
  }
  if (r.prepare_us) out["timings_us"] = {{"prepare", *r.prepare_us}};
  if (r.served_digest) out["served_digest"] = *r.served_digest;
  if (r.writer) out["writer"] = *r.writer;
  if (r.epoch) out["epoch"] = *r.epoch;
  if (!r.lineage.empty()) out["lineage"] = r.lineage;
  if (r.step) out["step"] = *r.step;
  return out;
}

Result<DecisionRecord> DecodeDecision(const json& j) {
  RecordFields f = CoordinatorFields(j, CoordinatorRecordType::kDecision);
  DecisionRecord r;
  r.tx = f.String("tx");
  ReadDecision(f, &r.decision, &r.version);
  r.served_digest = f.OptString("served_digest");
  if (f.ok() && r.served_digest && !r.version) f.Fail("served_digest", "without a version");
  r.reason = f.OptString("reason").value_or("");
  f.ForEachObject("votes", false, [&](RecordFields& v) {
    DecisionVote dv;
    const int64_t rank = v.Int("rank");
    if (v.ok() && (rank < 0 || rank > INT32_MAX)) v.Fail("rank", "is not a rank");
    dv.rank = static_cast<int>(rank);
    dv.vote = v.String("vote");
    dv.error = v.OptString("error").value_or("");
    r.votes.push_back(std::move(dv));
  });
  f.WithObject("timings_us", false, [&](RecordFields& t) { r.prepare_us = t.OptInt("prepare"); });
  r.ts = f.OptInt("ts").value_or(0);
  r.writer = f.OptString("writer");
  r.epoch = f.OptInt("epoch");
  r.lineage = f.OptString("lineage").value_or("");
  r.step = ReadStep(f, "step");
  return FieldsResult(f, std::move(r));
}

json Encode(const EndRecord& r) {
  return {{"type", CoordinatorTypeJson(CoordinatorRecordType::kEnd)}, {"tx", r.tx}, {"ts", r.ts}};
}

Result<EndRecord> DecodeEnd(const json& j) {
  RecordFields f = CoordinatorFields(j, CoordinatorRecordType::kEnd);
  EndRecord r;
  r.tx = f.String("tx");
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

json Encode(const BeginRefusedRecord& r) {
  json ranks = json::array();
  for (const RefusedRank& k : r.ranks) {
    ranks.push_back({{"rank", k.rank}, {"code", k.code}, {"message", k.message}});
  }
  return {{"type", CoordinatorTypeJson(CoordinatorRecordType::kBeginRefused)},
          {"tx", r.tx},
          {"kind", std::string(TxKindName(r.kind))},
          {"ranks", std::move(ranks)},
          {"ts", r.ts}};
}

Result<BeginRefusedRecord> DecodeBeginRefused(const json& j) {
  RecordFields f = CoordinatorFields(j, CoordinatorRecordType::kBeginRefused);
  BeginRefusedRecord r;
  r.tx = f.String("tx");
  const std::string kind = f.String("kind");
  if (f.ok()) {
    auto k = TxKindFromName(kind);
    if (!k) f.Fail("kind", "is not a transaction kind");
    r.kind = k.value_or(TxKind::kFull);
  }
  f.ForEachObject("ranks", true, [&](RecordFields& e) {
    RefusedRank k;
    const int64_t rank = e.Int("rank");
    if (e.ok() && (rank < -1 || rank > INT32_MAX)) e.Fail("rank", "is not a rank");
    k.rank = static_cast<int>(rank);
    k.code = e.String("code");
    k.message = e.String("message");
    r.ranks.push_back(std::move(k));
  });
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

Result<CoordinatorRecord> DecodeCoordinatorRecord(const json& r) {
  const std::string at = "record " + std::to_string(RecordSeqOf(r));
  if (!r.is_object()) return Status::Corruption(at + " is not an object");
  auto it = r.find("type");
  if (it == r.end() || !it->is_string()) {
    return Status::Corruption(at + ": field 'type' is missing or not a string");
  }
  const std::string& type = it->get_ref<const std::string&>();
  if (type == kCoordinatorTypeNames[0]) return WrapCoordinator(DecodeCoordinatorCreate(r));
  if (type == kCoordinatorTypeNames[1]) return WrapCoordinator(DecodeDecision(r));
  if (type == kCoordinatorTypeNames[2]) return WrapCoordinator(DecodeEnd(r));
  if (type == kCoordinatorTypeNames[3]) return WrapCoordinator(DecodeAcceptedUnverified(r));
  if (type == kCoordinatorTypeNames[4]) return WrapCoordinator(DecodeBeginRefused(r));
  return Status::Corruption(at + ": unknown coordinator record type " +
                            it->dump(-1, ' ', false, json::error_handler_t::replace));
}

json EncodeCoordinatorState(const CoordinatorState& s) {
  return {{"decisions", s.decisions}, {"pending", s.pending}};
}

Result<CoordinatorState> DecodeCoordinatorState(const json& j, std::string_view what) {
  if (!j.is_object()) return Status::Corruption(std::string(what) + " is not an object");
  RecordFields f = RecordFields::Named(j, std::string(what));
  CoordinatorState s;
  s.decisions = f.Uint("decisions");
  s.pending = f.Strings("pending", true);
  if (!f.ok()) return f.status();
  return s;
}

Status CoordinatorReplay::Apply(const CoordinatorRecord& r, uint64_t seq) {
  (void)seq;
  if (const auto* d = std::get_if<DecisionRecord>(&r)) {
    ++decisions_;
    pending_[d->tx] = true;
  } else if (const auto* e = std::get_if<EndRecord>(&r)) {
    pending_.erase(e->tx);
  }
  return Status::OK();
}

Status CoordinatorReplay::Apply(const json& r) {
  auto rec = DecodeCoordinatorRecord(r);
  if (!rec.ok()) return rec.status();
  return Apply(rec.value(), RecordSeqOf(r));
}

CoordinatorState CoordinatorReplay::state() const {
  CoordinatorState s;
  s.decisions = decisions_;
  for (const auto& [tx, _] : pending_) s.pending.push_back(tx);
  return s;
}

}  // namespace wtx
