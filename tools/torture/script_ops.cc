// Script's operations (script.h): each planned operation run on the cluster under its fault
// (an injected journal write or sync error, a commit crash point), its outcome checked against
// the model's prediction, and the model brought along.
//
// Thread-safety: a Script runs on one thread.
#include "tools/torture/script.h"

#include <algorithm>

#include "wtx/content_hash.h"

namespace wtx::torture {

using nlohmann::json;

namespace {

using Prep = ModelTx::Prep;
using DKind = ModelDecision::Kind;

DKind KindOf(Decision d) {
  switch (d) {
    case Decision::kCommit:
      return DKind::kCommit;
    case Decision::kAbort:
      return DKind::kAbort;
    case Decision::kNoop:
      return DKind::kNoop;
  }
  return DKind::kUnknown;
}

std::string BoxStr(const Box& b) {
  std::string s = "[";
  for (size_t d = 0; d < b.size(); ++d) {
    if (d > 0) s.push_back(',');
    s.append(std::to_string(b[d].begin)).push_back(':');
    s.append(std::to_string(b[d].end));
  }
  return s + "]";
}

std::string Codes(const std::vector<ErrorCode>& v) {
  std::string s;
  for (auto c : v) {
    if (!s.empty()) s.push_back(',');
    s.append(ErrorCodeName(c));
  }
  return s.empty() ? "-" : s;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Operations

template <typename F>
Script::IoResult Script::WithIo(const std::optional<Fault>& f, F&& call) {
  std::vector<uint64_t> before(o_.ranks);
  for (int r = 0; r < o_.ranks; ++r) before[r] = FsOf(r).injected_errors();
  const uint64_t cbefore = FsOf(-1).injected_errors();
  const bool io = f && (f->kind == Fault::Kind::kIoWrite || f->kind == Fault::Kind::kIoSync);
  if (io) {
    if (f->kind == Fault::Kind::kIoWrite) FsOf(f->who).FailNextWrites(1, f->after);
    if (f->kind == Fault::Kind::kIoSync) FsOf(f->who).FailNextSyncs(1, f->after);
  }
  call();
  if (io) {
    FsOf(f->who).FailNextWrites(0);
    FsOf(f->who).FailNextSyncs(0);
  }
  IoResult out;
  for (int r = 0; r < o_.ranks; ++r) {
    if (FsOf(r).injected_errors() > before[r]) out.ranks.push_back(r);
  }
  out.coordinator = FsOf(-1).injected_errors() > cbefore;
  if (io && (!out.ranks.empty() || out.coordinator)) {
    ++rep_.io_errors_injected;
    CrashPoint(
        std::string(f->kind == Fault::Kind::kIoWrite ? "io_write_error_" : "io_sync_error_") +
            (f->who < 0 ? "coordinator" : "rank"),
        f->power);
  }
  return out;
}

void Script::Execute(const Op& op, const std::optional<Fault>& f) {
  ++step_;
  ++rep_.steps;
  if (f && (f->kind == Fault::Kind::kIoWrite || f->kind == Fault::Kind::kIoSync)) {
    Trace(std::string("arm one ") + (f->kind == Fault::Kind::kIoWrite ? "write" : "sync") +
          " error (after " + std::to_string(f->after) + ") in the journal of " + Who(f->who));
  }
  switch (op.kind) {
    case Op::Kind::kBegin:
      DoBegin(op, f);
      break;
    case Op::Kind::kWrite:
      DoWrite(op, f);
      break;
    case Op::Kind::kPatch:
      DoPatch(op, f);
      break;
    case Op::Kind::kRefresh:
      DoRefresh(op);
      break;
    case Op::Kind::kSetKernel:
      if (!Alive(op.rank)) return;
      RankP(op.rank).SetKernelIdentity(op.name);
      model_->SetKernelIdentity(op.rank, op.name);
      Trace("rank " + std::to_string(op.rank) + " kernel identity -> " + op.name);
      break;
    case Op::Kind::kCommit:
      DoCommit(op, f);
      break;
    case Op::Kind::kAbort:
      DoAbort(op.begin.tx, f);
      break;
  }
  CheckRanks();
}

void Script::DoBegin(const Op& op, const std::optional<Fault>& f) {
  const BeginRequest& req = op.begin;
  std::string what = "begin " + req.tx + " " + std::string(TxKindName(req.kind)) +
                     (req.rollback ? " rollback" : "") +
                     (req.base.empty() ? "" : " base " + req.base.substr(0, 8));
  for (const auto& m : req.modules) what += " module:" + m;
  for (const auto& s : req.sources) what += " source:" + s;
  if (!CoordAlive()) {
    Trace(what + " -> skipped (coordinator down)");
    return;
  }
  // Prediction: dead ranks (Describe), kernel identities, then each rank's CheckBegin in order.
  ErrorCode expect = ErrorCode::kOk;
  bool known = true;
  for (int r = 0; r < o_.ranks; ++r) {
    if (!model_->rank(r).alive) {
      expect = ErrorCode::kCrashed;
      break;
    }
  }
  if (expect == ErrorCode::kOk) {
    for (int r = 1; r < o_.ranks; ++r) {
      if (model_->rank(r).kernel != model_->rank(0).kernel) expect = ErrorCode::kManifestMismatch;
    }
  }
  if (expect == ErrorCode::kOk) {
    for (int r = 0; r < o_.ranks; ++r) {
      auto e = model_->PredictBegin(r, req);
      if (!e) {
        known = false;
        break;
      }
      if (*e != ErrorCode::kOk) {
        expect = *e;
        break;
      }
    }
  }
  BeginOutcome out;
  IoResult io = WithIo(f, [&] { out = Coord().Begin(req); });
  Trace(what + " -> " + out.status.ToString());
  if (!io.ranks.empty() || io.coordinator) {
    Expect(!out.status.ok(), "begin " + req.tx + " succeeded although a journal write failed on " +
                                 Who(io.ranks.empty() ? -1 : io.ranks[0]));
    for (int r : io.ranks) model_->rank(r).begin_maybe_logged = true;
    // Ranks that began before the failure were told to abort; they journaled a BEGIN.
    for (int r = 0; r < o_.ranks; ++r) model_->rank(r).ever_began |= model_->rank(r).alive;
    ReapIoCrashes(io, "begin");
    ++rep_.begin_refused;
    return;
  }
  if (known) {
    Expect(out.status.code() == expect, "begin " + req.tx + ": expected " +
                                            std::string(ErrorCodeName(expect)) + ", got " +
                                            out.status.ToString());
  }
  if (!out.status.ok()) {
    ++rep_.begin_refused;
    return;
  }
  current_tx_ = req.tx;
  for (int r = 0; r < o_.ranks; ++r) {
    if (req.kind != TxKind::kFull) {
      // The rank accepted a partial/delta begin: it was clean (learned, when unknown).
      if (model_->rank(r).dirty == Tri::kUnknown) model_->rank(r).dirty = Tri::kNo;
    }
    model_->Begin(r, req);
  }
}

void Script::DoWrite(const Op& op, const std::optional<Fault>& f) {
  const int r = op.rank;
  std::string what = "rank " + std::to_string(r) + " write";
  const Manifest& m = model_->manifest(r);
  for (const auto& w : op.writes) {
    what += " " + m.params()[w.param].name + (w.shard.empty() ? "" : "/" + w.shard) +
            BoxStr(w.box) + "#" + std::to_string(w.seed);
  }
  if (!Alive(r)) {
    Trace(what + " -> skipped (rank down)");
    return;
  }
  const std::optional<ErrorCode> expect = model_->PredictWrite(r, op.writes);
  std::vector<std::vector<uint8_t>> buffers;
  std::vector<WritePiece> pieces;
  for (const auto& w : op.writes) {
    const ParamSpec& p = m.params()[w.param];
    bool fits = w.box.size() == p.shape.size();
    for (size_t d = 0; fits && d < w.box.size(); ++d) {
      fits = w.box[d].begin >= 0 && w.box[d].end <= p.shape[d] && w.box[d].begin < w.box[d].end;
    }
    buffers.push_back(fits ? model_->ExpectedBytes(r, w.param, w.box, w.seed)
                           : std::vector<uint8_t>());
    pieces.push_back({p.name, w.shard, w.box, buffers.back().data(), buffers.back().size()});
  }
  Status s;
  IoResult io = WithIo(f, [&] { s = RankP(r).Write(pieces); });
  Trace(what + " -> " + s.ToString());
  if (std::find(io.ranks.begin(), io.ranks.end(), r) != io.ranks.end()) {
    Expect(!s.ok(),
           "write succeeded although its journal flush failed on rank " + std::to_string(r));
    ReapIoCrashes(io, "write");
    return;
  }
  ReapIoCrashes(io, "write");
  if (expect) {
    Expect(s.code() == *expect, "rank " + std::to_string(r) + " write: expected " +
                                    std::string(ErrorCodeName(*expect)) + ", got " + s.ToString());
  }
  if (s.ok()) model_->Write(r, op.writes);
}

void Script::DoPatch(const Op& op, const std::optional<Fault>& f) {
  const int r = op.rank;
  std::string what = "rank " + std::to_string(r) + " patch " + op.source + " part " +
                     std::to_string(op.part) + "/" + std::to_string(op.parts) + " indices";
  for (int64_t i : op.indices) what += " " + std::to_string(i);
  if (!Alive(r)) {
    Trace(what + " -> skipped (rank down)");
    return;
  }
  const auto expect = model_->PredictPatch(r, op.source, op.indices, op.part, op.parts);
  const std::vector<uint8_t> values = model_->PatchValues(r, op.source, op.indices, op.seed);
  PatchRequest req;
  req.source = op.source;
  req.indices = op.indices;
  req.values = values.data();
  req.value_bytes = values.size();
  req.part = op.part;
  req.parts = op.parts;
  Status s;
  IoResult io = WithIo(f, [&] { s = RankP(r).Patch(req); });
  Trace(what + " -> " + s.ToString());
  if (std::find(io.ranks.begin(), io.ranks.end(), r) != io.ranks.end()) {
    Expect(!s.ok(),
           "patch succeeded although its journal flush failed on rank " + std::to_string(r));
    ReapIoCrashes(io, "patch");
    return;
  }
  ReapIoCrashes(io, "patch");
  if (expect) {
    Expect(s.code() == *expect, "rank " + std::to_string(r) + " patch: expected " +
                                    std::string(ErrorCodeName(*expect)) + ", got " + s.ToString());
  }
  if (s.ok()) model_->Patch(r, op.source, op.indices, op.part, op.parts, op.seed);
}

void Script::DoRefresh(const Op& op) {
  const int r = op.rank;
  if (!Alive(r)) {
    Trace("rank " + std::to_string(r) + " refresh " + op.name + " -> skipped (rank down)");
    return;
  }
  std::set<std::string> expect;
  const Manifest& m = model_->manifest(r);
  for (uint32_t d = 0; d < m.derived().size(); ++d) {
    if (op.name == "*" ? model_->rank(r).stale[d] : m.derived()[d].name == op.name) {
      expect.insert(m.derived()[d].name);
    }
  }
  auto res = RankP(r).Refresh(op.name);
  Trace("rank " + std::to_string(r) + " refresh " + op.name + " -> " + res.status().ToString());
  Expect(res.ok(), "rank " + std::to_string(r) + " refresh failed: " + res.status().ToString());
  std::set<std::string> got(res.value().begin(), res.value().end());
  Expect(got == expect, "rank " + std::to_string(r) + " refresh " + op.name + " refreshed " +
                            json(got).dump() + ", the model expected " + json(expect).dump());
  model_->Refresh(r, op.name);
}

void Script::DoCommit(const Op& op, const std::optional<Fault>& f) {
  const std::string& tx = op.begin.tx;
  std::string what = "commit " + tx;
  for (int s : op.silent) what += " silent:" + std::to_string(s);
  if (f && f->kind == Fault::Kind::kCrashPoint) what += " crash:" + Who(f->who) + "@" + f->at;
  if (!CoordAlive()) {
    Trace(what + " -> skipped (coordinator down)");
    return;
  }
  commit_attempted_.insert(tx);
  std::vector<std::optional<std::vector<ErrorCode>>> predicted(o_.ranks);
  for (int r = 0; r < o_.ranks; ++r) predicted[r] = model_->PredictVote(r, tx);
  ArmedCrashPoint* armed = nullptr;
  if (f && f->kind == Fault::Kind::kCrashPoint) {
    armed = f->who < 0 ? &cluster_->coordinator_crash_point() : &cluster_->rank_crash_point(f->who);
    armed->Arm(f->at);
  }
  cluster_->transport().SetSilent(op.silent);
  CommitOutcome out;
  IoResult io = WithIo(f, [&] { out = Coord().Commit(tx); });
  cluster_->transport().SetSilent({});
  const bool point_fired = armed && armed->Disarm();
  std::string votes;
  for (const auto& v : out.votes) {
    votes += " r" + std::to_string(v.rank) + ":" + std::string(VoteKindName(v.kind)) +
             (v.kind == VoteReport::Kind::kNo ? "(" + Codes(v.vote.errors) + ")" : "");
  }
  Trace(what + " -> " + out.status.ToString() + " decision " +
        (out.decision ? std::string(DecisionName(*out.decision)) : "-") +
        (out.decision_logged ? " (logged)" : "") + " votes" + votes);
  if (point_fired) CrashPoint(f->at, f->power);

  // Votes against the model.
  std::vector<std::string> digests(o_.ranks);
  bool all_yes = !out.votes.empty();
  bool any_missing = false, any_wrote = false;
  for (const auto& v : out.votes) {
    const int r = v.rank;
    const bool rank_point = point_fired && f->who == r;
    const bool rank_io = std::find(io.ranks.begin(), io.ranks.end(), r) != io.ranks.end();
    switch (v.kind) {
      case VoteReport::Kind::kYes:
        Expect(predicted[r] && predicted[r]->empty(),
               "rank " + std::to_string(r) + " voted yes on " + tx + "; the model expected " +
                   (predicted[r] ? "no (" + Codes(*predicted[r]) + ")" : "E_NO_TX"));
        Expect(v.vote.digest == model_->Digest(r),
               "rank " + std::to_string(r) + " voted yes with digest " + v.vote.digest +
                   " but its live bytes per the model hash to " + model_->Digest(r));
        model_->Prepared(r, Prep::kYes);
        digests[r] = v.vote.digest;
        any_wrote = any_wrote || v.vote.wrote;
        break;
      case VoteReport::Kind::kNo:
        all_yes = false;
        if (!predicted[r]) {
          Expect(v.vote.error == ErrorCode::kNoTx,
                 "rank " + std::to_string(r) + " voted " + Codes(v.vote.errors) +
                     "; the model expected E_NO_TX (it has no transaction " + tx + ")");
        } else {
          Expect(v.vote.errors == *predicted[r],
                 "rank " + std::to_string(r) + " voted no (" + Codes(v.vote.errors) +
                     "); the model expected " +
                     (predicted[r]->empty() ? "yes" : Codes(*predicted[r])));
          model_->Prepared(r, Prep::kNo);
        }
        any_wrote = any_wrote || v.vote.wrote;
        break;
      case VoteReport::Kind::kTimeout:
        all_yes = false;
        any_missing = true;
        Expect(op.silent.count(r) > 0,
               "rank " + std::to_string(r) + " timed out without being silent");
        break;
      case VoteReport::Kind::kCrashed:
        all_yes = false;
        any_missing = true;
        if (rank_point && f->at == "after_prepare_logged" && predicted[r]) {
          model_->Prepared(r, predicted[r]->empty() ? Prep::kYes : Prep::kNo);
          if (predicted[r]->empty()) digests[r] = model_->Digest(r);
        } else if (rank_io && predicted[r]) {
          model_->Prepared(r, predicted[r]->empty() ? Prep::kMaybe : Prep::kNo);
        } else {
          Expect(rank_point || rank_io || !model_->rank(r).alive,
                 "rank " + std::to_string(r) + " reported crashed during commit of " + tx +
                     " without a fault: " + v.status.ToString());
        }
        break;
    }
  }
  // Processes that died in the commit.
  if (point_fired) {
    if (f->who < 0) {
      KillCoordinator(f->power);
    } else {
      Expect(Alive(f->who) && Crashed(f->who),
             "rank " + std::to_string(f->who) + " survived its crash point " + f->at);
      KillRank(f->who, f->power);
    }
  }
  for (int r : io.ranks) {
    bool surfaced = false;
    for (const auto& v : out.votes) {
      surfaced |= v.rank == r && v.kind == VoteReport::Kind::kCrashed;
    }
    surfaced |= std::find(out.unacknowledged.begin(), out.unacknowledged.end(), r) !=
                out.unacknowledged.end();
    Expect(surfaced, "rank " + std::to_string(r) + "'s journal failed during commit of " + tx +
                         " but the coordinator saw neither a crashed vote nor an unacknowledged "
                         "decision (an I/O error became a silent success)");
  }
  const bool coord_io = io.coordinator;
  ReapIoCrashes(io, "commit");

  // The decision.
  const bool all_unknown =
      !out.votes.empty() &&
      std::all_of(out.votes.begin(), out.votes.end(), [](const VoteReport& v) {
        return v.kind == VoteReport::Kind::kNo && v.vote.error == ErrorCode::kNoTx;
      });
  DKind expect_kind = !any_missing && !any_wrote ? DKind::kNoop
                      : all_yes                  ? DKind::kCommit
                                                 : DKind::kAbort;
  std::string expect_version;
  if (expect_kind == DKind::kCommit) expect_version = CombineRankDigests(digests);
  if (out.decision_logged) {
    const DKind kind = KindOf(*out.decision);
    Expect(kind == expect_kind, "coordinator decided " + std::string(DecisionName(*out.decision)) +
                                    " on " + tx + " where the votes call for another outcome");
    if (kind == DKind::kCommit) {
      Expect(out.version == expect_version, "coordinator committed " + tx + " as version " +
                                                out.version + "; the model computes " +
                                                expect_version);
    }
    ModelDecision d;
    d.kind = kind;
    d.version = out.version;
    d.rank_digests = digests;
    model_->RecordDecision(tx, d);
    if (kind == DKind::kCommit) ++rep_.committed;
    if (kind == DKind::kAbort) ++rep_.aborted;
    if (kind == DKind::kNoop) ++rep_.noop;
    const bool delivered = !(point_fired && f->who < 0 && f->at == "after_decision_logged");
    if (delivered) {
      for (int r = 0; r < o_.ranks; ++r) {
        if (!Alive(r)) continue;
        if (std::find(out.unacknowledged.begin(), out.unacknowledged.end(), r) !=
            out.unacknowledged.end()) {
          Fail("rank " + std::to_string(r) + " is alive but did not acknowledge the decision on " +
               tx);
        }
        model_->ApplyDecision(r, tx, kind);
      }
    }
  } else if ((point_fired && f->who < 0) || coord_io) {
    // The coordinator died around its commit point: the outcome is in doubt until it recovers.
    ModelDecision d;
    d.kind = DKind::kUnknown;
    d.version = expect_version;
    d.rank_digests = digests;
    model_->RecordDecision(tx, d);
  } else {
    // A transaction the recovered coordinator aborted as an orphan stays aborted.
    auto it = model_->decisions().find(tx);
    const bool aborted_before = it != model_->decisions().end() && it->second.kind == DKind::kAbort;
    Expect((all_unknown || aborted_before) && out.status.code() == ErrorCode::kNoTx,
           "commit of " + tx + " returned no decision: " + out.status.ToString());
  }
}

void Script::DoAbort(const std::string& tx, const std::optional<Fault>& f) {
  if (!CoordAlive()) {
    Trace("abort " + tx + " -> skipped (coordinator down)");
    return;
  }
  BeginOutcome out;
  IoResult io = WithIo(f, [&] { out = Coord().Abort(tx); });
  Trace("abort " + tx + " -> " + out.status.ToString());
  bool any = false;
  for (int r = 0; r < o_.ranks; ++r) {
    if (!Alive(r) || std::find(io.ranks.begin(), io.ranks.end(), r) != io.ranks.end()) continue;
    if (model_->rank(r).tx && model_->rank(r).tx->id == tx) {
      any = true;
      model_->ApplyDecision(r, tx, DKind::kAbort);
    }
  }
  if (io.coordinator) {
    Expect(!out.status.ok(),
           "abort of " + tx + " succeeded although the coordinator's journal failed");
  }
  ReapIoCrashes(io, "abort");
  if (any || out.status.ok()) {
    ModelDecision d;
    d.kind = DKind::kAbort;
    if (!model_->decisions().count(tx)) {
      model_->RecordDecision(tx, d);
      ++rep_.aborted;
    }
  }
}

}  // namespace wtx::torture
