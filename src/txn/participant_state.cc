#include "src/txn/participant_state.h"

#include <cassert>
#include <type_traits>
#include <utility>

#include "journal/record_fields.h"
#include "src/util/json_map.h"

namespace wtx {

using nlohmann::json;

namespace {

// A JSON value for an error message: never throws (invalid UTF-8 in a crafted record's strings
// is replaced, not an exception).
std::string QuotedText(std::string_view s) {
  return json(std::string(s)).dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string RecordAt(uint64_t seq, ParticipantRecordType type) {
  return "record " + std::to_string(seq) + " (" + std::string(ParticipantRecordTypeName(type)) +
         ")";
}

Status NotActiveRecord(uint64_t seq, ParticipantRecordType type, std::string_view tx) {
  return Status::Corruption(RecordAt(seq, type) + " names transaction " + QuotedText(tx) +
                            " which is not the active one");
}

std::string BoolText(bool b) { return b ? "true" : "false"; }

std::string DescribeFacts(const OutcomeFacts& f) {
  std::string s = std::string(DecisionName(f.decision)) + " of a " +
                  std::string(TxKindName(f.kind)) + " transaction";
  if (f.rollback) s += " with before-images";
  s += f.wrote ? ", wrote" : ", wrote nothing";
  s += ", dirty before BEGIN " + BoolText(f.dirty_at_begin);
  if (f.undeclared) s += ", undeclared changes found";
  if (f.interrupted) s += ", interrupted by a restart";
  s += ", loaded " + BoolText(f.loaded);
  return s;
}

// A stored value of what the rule derives must equal it.
Status CheckDerived(uint64_t seq, ParticipantRecordType type, std::string_view field,
                    const std::optional<bool>& stored, bool derived, const std::string& from) {
  if (!stored || *stored == derived) return Status::OK();
  return Status::Corruption(RecordAt(seq, type) + ": field '" + std::string(field) + "' is " +
                            BoolText(*stored) + " but the dirty rule derives " + BoolText(derived) +
                            " (" + from + ")");
}

}  // namespace

ParticipantState InitialParticipantState(int rank) {
  ParticipantState s;
  s.rank = rank;
  return s;
}

// ---- The state snapshot ----

namespace {

// Written once for both forms (src/util/json_map.h): the JSON object, and the CBOR bytes of
// that object that every participant append stores without building it.
template <typename M>
M StateFields(const ParticipantState& s) {
  M out;
  out.Int("rank", s.rank)
      .OptText("version", s.version)
      .OptText("committed_tx", s.committed_tx)
      .Bool("dirty", s.dirty)
      .Bool("loaded", s.loaded)
      .Int("txs", s.txs)
      .Text("model", s.model)
      .Text("lineage", s.lineage);
  if (s.step) out.Int("step", *s.step);
  if (s.digest) out.Text("digest", *s.digest);  // set by the first commit
  if (s.served_digest) out.Text("served_digest", *s.served_digest);
  if (!s.active) {
    out.Null("active");
    return out;
  }
  const ActiveTxState& a = *s.active;
  M act;
  act.Text("tx", a.tx)
      .Text("kind", TxKindName(a.kind))
      .OptText("base", a.base)
      .Texts("modules", a.modules)
      .Texts("sources", a.sources)
      .Bool("rollback", a.rollback)
      .Bool("wrote", a.wrote)
      .Bool("prepared", a.prepared)
      .OptText("digest", a.digest)
      // The dirty rule's facts (a snapshot written before them has none of the keys).
      .Bool("dirty_at_begin", a.dirty_at_begin)
      .Bool("undeclared", a.undeclared)
      .Bool("interrupted", a.interrupted);
  if (a.served_digest) act.Text("served_digest", *a.served_digest);
  if (!a.lineage.empty()) act.Text("lineage", a.lineage);
  if (a.step) act.Int("step", *a.step);
  if (a.begin_ts != 0) act.Int("begin_ts", a.begin_ts);
  if (a.vote_yes) {
    act.Text("vote", *a.vote_yes ? "yes" : "no");
  } else {
    act.Null("vote");
  }
  out.Map("active", act);
  return out;
}

}  // namespace

json EncodeParticipantState(const ParticipantState& s) { return StateFields<JsonMap>(s).Take(); }

CborMap EncodeParticipantStateCbor(const ParticipantState& s) { return StateFields<CborMap>(s); }

Result<ParticipantState> DecodeParticipantState(const json& j, std::string_view what,
                                                bool* legacy_facts) {
  if (legacy_facts) *legacy_facts = false;
  if (!j.is_object()) return Status::Corruption(std::string(what) + " is not an object");
  RecordFields f = RecordFields::Named(j, std::string(what));
  ParticipantState s;
  const int64_t rank = f.Int("rank");
  if (f.ok() && (rank < 0 || rank > INT32_MAX)) f.Fail("rank", "is not a rank");
  s.rank = static_cast<int>(rank);
  s.version = f.OptString("version");
  s.committed_tx = f.OptString("committed_tx");
  s.digest = f.OptString("digest");
  s.served_digest = f.OptString("served_digest");
  s.dirty = f.Bool("dirty");
  s.loaded = f.OptBool("loaded").value_or(false);
  s.txs = f.Int("txs");
  if (legacy_facts && !j.contains("model")) *legacy_facts = true;
  s.model = f.OptString("model").value_or("");
  s.lineage = f.OptString("lineage").value_or("");
  s.step = f.OptInt("step");
  if (const json* a = f.Object("active")) {
    RecordFields af = f.Nested(*a, "active transaction");
    ActiveTxState t;
    t.tx = af.String("tx");
    t.kind = af.Enum<TxKind>("kind", TxKindFromName, "is not full, partial or delta")
                 .value_or(TxKind::kFull);
    t.base = af.OptString("base");
    t.modules = af.Strings("modules");
    t.sources = af.Strings("sources");
    t.rollback = af.OptBool("rollback").value_or(false);
    t.wrote = af.OptBool("wrote").value_or(false);
    t.prepared = af.OptBool("prepared").value_or(false);
    t.vote_yes = af.Enum<bool>("vote", VoteFromName, "is not yes or no", /*required=*/false);
    t.digest = af.OptString("digest");
    t.served_digest = af.OptString("served_digest");
    // A snapshot of the active transaction written before these facts existed has none of the
    // three keys.
    if (legacy_facts && !a->contains("dirty_at_begin") && !a->contains("undeclared") &&
        !a->contains("interrupted")) {
      *legacy_facts = true;
    }
    t.dirty_at_begin = af.OptBool("dirty_at_begin").value_or(false);
    t.undeclared = af.OptBool("undeclared").value_or(false);
    t.interrupted = af.OptBool("interrupted").value_or(false);
    t.lineage = af.OptString("lineage").value_or("");
    t.step = af.OptInt("step");
    t.begin_ts = af.OptInt("begin_ts").value_or(0);
    if (!af.ok()) return af.status();
    s.active = std::move(t);
  }
  if (!f.ok()) return f.status();
  return s;
}

// ---- The dirty rule ----

OutcomeEffect DecideOutcome(const OutcomeFacts& f) {
  OutcomeEffect e;
  e.loaded = f.loaded;
  // A process that did not hold the bytes from BEGIN on cannot vouch for them: as dirty at
  // BEGIN, whatever the journal said then.
  const bool before = f.dirty_at_begin || f.interrupted;
  switch (f.decision) {
    case Decision::kCommit:
      // Begin refused a partial/delta on a dirty rank, so `before` matters only after a restart.
      e.dirty = f.interrupted || (f.kind != TxKind::kFull && before);
      if (!f.interrupted && f.kind == TxKind::kFull) e.loaded = true;
      break;
    case Decision::kAbort:
      e.restored = f.rollback && !f.interrupted && f.wrote;
      e.dirty = e.restored ? before || f.undeclared : f.wrote || before || f.undeclared;
      break;
    case Decision::kNoop:
      e.dirty = before || f.undeclared;
      break;
  }
  return e;
}

OutcomeFacts FactsOf(const ParticipantState& s, Decision decision) {
  assert(s.active && "facts of a decision need an active transaction");
  const ActiveTxState& a = *s.active;
  OutcomeFacts f;
  f.decision = decision;
  f.kind = a.kind;
  f.rollback = a.rollback;
  f.dirty_at_begin = a.dirty_at_begin;
  f.wrote = a.wrote;
  f.undeclared = a.undeclared;
  f.interrupted = a.interrupted;
  f.loaded = s.loaded;
  return f;
}

bool DirtyAfterRestart(const ParticipantState& s) {
  return s.dirty || s.version.has_value() || s.active.has_value();
}

// ---- Replay ----

Status ParticipantReplay::ApplyWrite(uint64_t seq, std::string_view tx) {
  if (!state_) {
    return Status::Corruption("record " + std::to_string(seq) +
                              " comes before the journal's CREATE record");
  }
  ParticipantState& s = *state_;
  if (!s.active || s.active->tx != tx)
    return NotActiveRecord(seq, ParticipantRecordType::kWrite, tx);
  s.active->wrote = true;
  s.dirty = true;
  return Status::OK();
}

Status ParticipantReplay::Apply(const json& record) {
  auto r = DecodeParticipantRecord(record);
  if (!r.ok()) return r.status();
  return Apply(r.value(), RecordSeqOf(record));
}

Status ParticipantReplay::Apply(const ParticipantRecord& record, uint64_t seq) {
  const ParticipantRecordType type = TypeOf(record);
  if (!state_) {
    if (type != ParticipantRecordType::kCreate) {
      return Status::Corruption(RecordAt(seq, type) + " comes before the journal's CREATE record");
    }
    const auto& create = std::get<CreateRecord>(record);
    state_ = InitialParticipantState(create.rank);
    state_->model = create.fingerprint;
    state_->lineage = create.lineage;
    return Status::OK();
  }
  ParticipantState& s = *state_;
  auto need_active = [&](const std::string& tx) -> Status {
    if (!s.active || s.active->tx != tx) return NotActiveRecord(seq, type, tx);
    return Status::OK();
  };
  auto mark_written = [&] {
    s.active->wrote = true;
    s.dirty = true;
  };
  return std::visit(
      [&](const auto& r) -> Status {
        using T = std::decay_t<decltype(r)>;
        if constexpr (std::is_same_v<T, CreateRecord>) {
          return Status::Corruption(RecordAt(seq, type) +
                                    ": CREATE record after the journal began");
        } else if constexpr (std::is_same_v<T, BeginRecord>) {
          if (s.active) {
            return Status::Corruption(RecordAt(seq, type) + ": BEGIN of " + QuotedText(r.tx) +
                                      " while " + QuotedText(s.active->tx) + " is active");
          }
          ActiveTxState a;
          a.tx = r.tx;
          a.kind = r.kind;
          a.base = r.base;
          a.modules = r.modules;
          a.sources = r.sources;
          a.rollback = r.rollback;
          a.dirty_at_begin = s.dirty;
          a.lineage = r.lineage;
          a.step = r.step;
          a.begin_ts = r.ts;
          s.active = std::move(a);
          s.txs += 1;
          // Durably dirty from BEGIN to the decision (WRITE records are batched). A BEGIN
          // without the field (older journals) leaves the flag as it was.
          if (r.marks_dirty) s.dirty = true;
        } else if constexpr (std::is_same_v<T, WriteRecord>) {
          WTX_RETURN_IF_ERROR(need_active(r.tx));
          mark_written();
        } else if constexpr (std::is_same_v<T, PatchRecord>) {
          WTX_RETURN_IF_ERROR(need_active(r.tx));
          if (r.applied > 0) mark_written();
        } else if constexpr (std::is_same_v<T, ReserveRecord>) {
          // An in-place landing: the engine may change the region's bytes from now on.
          WTX_RETURN_IF_ERROR(need_active(r.tx));
          mark_written();
        } else if constexpr (std::is_same_v<T, RefreshRecord>) {
          // Staleness is process state (derived copies die with the process); nothing durable.
        } else if constexpr (std::is_same_v<T, LandedRecord> || std::is_same_v<T, ChunksRecord>) {
          // LANDED: coverage bookkeeping; CHUNKS: the chunk digests behind a yes vote (read
          // back by Reattach). Neither changes the state.
          WTX_RETURN_IF_ERROR(need_active(r.tx));
        } else if constexpr (std::is_same_v<T, PreparedRecord>) {
          WTX_RETURN_IF_ERROR(need_active(r.tx));
          s.active->prepared = true;
          s.active->vote_yes = r.yes;
          s.active->digest = r.digest;
          s.active->served_digest = r.served_digest;
        } else if constexpr (std::is_same_v<T, UndeclaredRecord>) {
          // The verifier found live bytes that changed without a declared write.
          if (r.tx) {
            WTX_RETURN_IF_ERROR(need_active(*r.tx));
            s.active->undeclared = true;
          }
          s.dirty = true;
        } else if constexpr (std::is_same_v<T, StorageMovedRecord>) {
          // The engine moved storage wtx was bound to: its bytes are no longer those wtx
          // vouches for. An active transaction cannot leave the rank clean (as undeclared).
          if (r.tx) {
            WTX_RETURN_IF_ERROR(need_active(*r.tx));
            s.active->undeclared = true;
          }
          s.dirty = true;
        } else if constexpr (std::is_same_v<T, RebindRecord>) {
          if (s.active) {
            return Status::Corruption(RecordAt(seq, type) +
                                      ": REBIND while a transaction is active");
          }
          // New storage: its bytes are unknown until a verify (REATTACH) or a full commit.
          s.dirty = true;
          s.loaded = false;
        } else if constexpr (std::is_same_v<T, ReattachRecord>) {
          if (s.active) {
            return Status::Corruption(RecordAt(seq, type) +
                                      ": REATTACH while a transaction is active");
          }
          if (s.committed_tx != r.committed_tx) {
            return Status::Corruption(RecordAt(seq, type) + ": field 'committed_tx' names " +
                                      QuotedText(r.committed_tx) +
                                      ", not the committed transaction");
          }
          // The live bytes that survived a restart equal the committed version, chunk for chunk.
          s.dirty = false;
          s.loaded = true;
        } else if constexpr (std::is_same_v<T, OutcomeRecord>) {
          WTX_RETURN_IF_ERROR(need_active(r.tx));
          OutcomeFacts facts = FactsOf(s, r.decision);
          // The fact as the writer knew it; journals from before the field imply it (a recovery
          // abort of theirs, written before its RESTART, is the only OUTCOME without `loaded`).
          facts.interrupted = facts.interrupted || r.interrupted.value_or(!r.loaded.has_value());
          const OutcomeEffect e = DecideOutcome(facts);
          const std::string from = DescribeFacts(facts);
          WTX_RETURN_IF_ERROR(CheckDerived(seq, type, "dirty", r.dirty, e.dirty, from));
          WTX_RETURN_IF_ERROR(CheckDerived(seq, type, "loaded", r.loaded, e.loaded, from));
          WTX_RETURN_IF_ERROR(CheckDerived(seq, type, "restored", r.restored, e.restored, from));
          if (r.decision == Decision::kCommit) {
            if (!s.active->prepared || s.active->vote_yes != true) {
              return Status::Corruption(RecordAt(seq, type) + ": commit of " + QuotedText(r.tx) +
                                        ", which this rank did not vote yes on");
            }
            s.version = r.version;
            s.served_digest = r.served_digest;
            s.committed_tx = r.tx;
            s.digest = s.active->digest;
          }
          // A commit's version, or a noop's (the version unchanged) is now the step's.
          if (r.decision == Decision::kCommit || (r.decision == Decision::kNoop && s.version)) {
            if (s.active->step) s.step = s.active->step;
            if (s.lineage.empty()) s.lineage = s.active->lineage;
          }
          s.dirty = e.dirty;
          s.loaded = e.loaded;
          s.active.reset();
        } else if constexpr (std::is_same_v<T, RestartRecord>) {
          const bool dirty = DirtyAfterRestart(s);
          WTX_RETURN_IF_ERROR(CheckDerived(
              seq, type, "dirty", r.dirty, dirty,
              "a restart of a rank with " +
                  std::string(s.version ? "a committed version" : "no committed version") +
                  (s.active ? " and an active transaction" : "") + ", dirty before " +
                  BoolText(s.dirty)));
          s.dirty = dirty;
          s.loaded = false;
          if (s.active) s.active->interrupted = true;  // its live bytes died with the process
        } else if constexpr (std::is_same_v<T, AcceptedUnverifiedRecord>) {
          // An operator's decision at start-up, kept for the audit; no state changes.
        } else if constexpr (std::is_same_v<T, LineageRecord>) {
          if (s.active) {
            return Status::Corruption(RecordAt(seq, type) +
                                      ": LINEAGE while a transaction is active");
          }
          // A new lineage: nothing of the old one is committed here any more.
          s.model = r.fingerprint;
          s.lineage = r.lineage;
          s.version.reset();
          s.committed_tx.reset();
          s.digest.reset();
          s.step.reset();
          s.dirty = false;
          s.loaded = false;
        } else {
          static_assert(sizeof(T) == 0, "every participant record type has a replay rule");
        }
        return Status::OK();
      },
      record);
}

Result<std::optional<ParticipantState>> ReplayParticipantJournal(const Journal& journal) {
  // In place; binary WRITE records (nearly all of a large journal) without building anything.
  ParticipantReplay replay;
  Status s = journal.ForEachRecordRef([&](const RecordRef& r) -> Status {
    if (r.write) return replay.ApplyWrite(r.seq, r.write->tx);
    return replay.Apply(*r.json);
  });
  if (!s.ok()) return s;
  return std::move(replay).Take();
}

Status CheckParticipantState(const Journal& journal) {
  const auto& id = journal.identity();
  WTX_ASSIGN_OR_RETURN(replayed, ReplayParticipantJournal(journal));
  if (journal.state().is_null() != !replayed.has_value()) {
    return Status::Corruption(
        journal.dir() + ": " +
        (replayed ? "records but no stored state" : "a state but no records"));
  }
  if (!replayed) return Status::OK();
  bool legacy = false;
  auto stored = DecodeParticipantState(journal.state(), journal.dir() + ": stored state", &legacy);
  if (!stored.ok()) return stored.status();
  ParticipantState want = std::move(stored).value();
  if (want.rank != id.rank) {
    return Status::Corruption(journal.dir() + ": state of rank " + std::to_string(want.rank) +
                              " in the journal of rank " + std::to_string(id.rank));
  }
  if (legacy) {
    // Written before lineages: the model, lineage and steps are the replay's.
    want.model = replayed->model;
    want.lineage = replayed->lineage;
    want.step = replayed->step;
    if (want.active && replayed->active) {
      want.active->lineage = replayed->active->lineage;
      want.active->step = replayed->active->step;
    }
  }
  if (legacy && want.active && replayed->active) {
    // Written before the dirty rule's facts were stored: compare what it does hold.
    want.active->dirty_at_begin = replayed->active->dirty_at_begin;
    want.active->undeclared = replayed->active->undeclared;
    want.active->interrupted = replayed->active->interrupted;
  }
  if (want.active && replayed->active && want.active->begin_ts == 0) {
    // Written before BEGIN's time was stored with the active transaction: the replay's.
    want.active->begin_ts = replayed->active->begin_ts;
  }
  if (*replayed != want) {
    return Status::Corruption(
        journal.dir() + ": replayed state " + EncodeParticipantState(*replayed).dump() +
        " differs from the stored state " + EncodeParticipantState(want).dump());
  }
  return Status::OK();
}

}  // namespace wtx
