// Script's recovery and checks (script.h): every dead process restarted and in-doubt
// transactions resolved, the model told what recovery decided, open transactions closed, and
// the ranks checked against the model after every step, after recovery, and at the end (every
// journal passes `wtx check --strict` after a clean shutdown).
//
// Thread-safety: a Script runs on one thread.
#include "tools/torture/script.h"

#include <algorithm>

#include "src/txn/journal_check.h"

namespace wtx::torture {

using nlohmann::json;

namespace {

using Prep = ModelTx::Prep;
using DKind = ModelDecision::Kind;

// Concatenates strings (and string literals) with one allocation.
template <typename... Parts>
std::string StrCat(const Parts&... parts) {
  std::string out;
  out.reserve((std::string_view(parts).size() + ...));
  (out.append(std::string_view(parts)), ...);
  return out;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Recovery and checks

void Script::Recover() {
  std::vector<int> order;
  for (int r = -1; r < o_.ranks; ++r) order.push_back(r);
  std::shuffle(order.begin(), order.end(), rng_);
  for (int who : order) {
    if (who < 0 && !CoordAlive()) StartCoordinator(Chance(0.05));
    if (who >= 0 && !Alive(who)) StartRank(who, Chance(0.05));
  }
  ResolveUnknownDecisions();
  SyncResolution();
  CheckRanks();
}

void Script::ResolveUnknownDecisions() {
  if (!CoordAlive()) return;
  for (auto& [tx, d] : model_->decisions()) {
    if (d.kind != DKind::kUnknown) continue;
    auto v = Coord().CommittedVersion(tx);
    ModelDecision nd = d;
    if (v) {
      Expect(*v == d.version, "the recovered coordinator says " + tx + " committed as " + *v +
                                  " but the votes make version " + d.version);
      nd.kind = DKind::kCommit;
      ++rep_.committed;
    } else {
      nd.kind = DKind::kAbort;
      ++rep_.aborted;
    }
    Trace("in-doubt " + tx + " resolved by the recovered coordinator: " + (v ? "commit" : "abort"));
    const std::string id = tx;
    model_->RecordDecision(id, nd);
  }
}

void Script::SyncResolution() {
  for (int r = 0; r < o_.ranks; ++r) {
    if (!Alive(r) || !model_->rank(r).tx) continue;
    const std::string tx = model_->rank(r).tx->id;
    const RankStatus st = RankP(r).status();
    if (st.active_tx && *st.active_tx == tx) continue;  // still pending there
    auto it = model_->decisions().find(tx);
    DKind kind = DKind::kAbort;
    if (it != model_->decisions().end() && it->second.kind != DKind::kUnknown) {
      kind = it->second.kind;
    }
    if (model_->rank(r).tx->prepared == Prep::kYes) ++rep_.in_doubt_resolved;
    model_->ApplyDecision(r, tx, kind);
  }
}

void Script::CloseOpenTransactions() {
  if (!CoordAlive()) return;
  std::set<std::string> open;
  for (int r = 0; r < o_.ranks; ++r) {
    if (Alive(r) && model_->rank(r).tx) open.insert(model_->rank(r).tx->id);
  }
  for (const auto& tx : open) {
    ++step_;
    if (!commit_attempted_.count(tx) && Chance(0.5)) {
      // The sender goes on with a transaction the coordinator never saw before it restarted.
      Op c;
      c.kind = Op::Kind::kCommit;
      c.begin.tx = tx;
      DoCommit(c, std::nullopt);
    } else {
      DoAbort(tx, std::nullopt);
    }
    SyncResolution();
  }
}

void Script::CheckRanks() {
  for (int r = 0; r < o_.ranks; ++r) {
    if (!Alive(r)) continue;
    const std::string R = "rank " + std::to_string(r);
    const ModelRank& m = model_->rank(r);
    const RankStatus s = RankP(r).status();
    auto recomputed = RankP(r).RecomputeDigest();
    const std::string live = recomputed.ok() ? recomputed.value() : recomputed.status().ToString();
    Expect(live == model_->Digest(r), [&] {
      return StrCat(R, "'s live bytes (digest ", live,
                    ") are not what was written (model: ", model_->Digest(r), ")");
    });
    Expect(s.committed_tx.value_or("") == m.committed_tx, [&] {
      return R + " reports committed transaction '" + s.committed_tx.value_or("") +
             "'; the model says '" + m.committed_tx + "'";
    });
    if (!m.committed_tx.empty()) {
      const ModelDecision& d = model_->decisions()[m.committed_tx];
      Expect(s.version.value_or("") == d.version, [&] {
        return R + " reports version " + s.version.value_or("null") + " for " + m.committed_tx +
               "; committed was " + d.version;
      });
      if (!s.dirty) {
        // The heart of it: clean means the live bytes are the committed version.
        Expect(live == d.rank_digests[r], [&] {
          return StrCat(R, " is clean but its live bytes (digest ", live,
                        ") are not its part of committed version ", d.version, " (",
                        d.rank_digests[r], ")");
        });
      }
    }
    if (m.dirty != Tri::kUnknown) {
      Expect(s.dirty == (m.dirty == Tri::kYes), [&] {
        return R + " reports dirty=" + (s.dirty ? "true" : "false") + "; the model says " +
               std::string(TriName(m.dirty));
      });
    }
    Expect(s.loaded == m.loaded, [&] {
      return R + " reports loaded=" + (s.loaded ? "true" : "false") + "; the model says " +
             (m.loaded ? "true" : "false");
    });
    const bool model_doubt = m.tx && m.tx->prepared == Prep::kYes;
    if (!(m.tx && m.tx->prepared == Prep::kMaybe)) {
      Expect(s.in_doubt.has_value() == model_doubt, [&] {
        return R + (s.in_doubt ? " is in doubt" : " is not in doubt") + "; the model says " +
               (model_doubt ? "in doubt" : "not in doubt");
      });
      Expect(s.active_tx.value_or("") == (m.tx ? m.tx->id : std::string()), [&] {
        return R + " reports active transaction '" + s.active_tx.value_or("") +
               "'; the model says '" + (m.tx ? m.tx->id : std::string()) + "'";
      });
    }
    std::set<std::string> stale;
    for (uint32_t d = 0; d < m.stale.size(); ++d) {
      if (m.stale[d]) stale.insert(model_->manifest(r).derived()[d].name);
    }
    Expect(std::set<std::string>(s.stale_derived.begin(), s.stale_derived.end()) == stale, [&] {
      return R + " reports stale " + json(s.stale_derived).dump() + "; the model says " +
             json(stale).dump();
    });
    if (s.serving) {
      Expect(!s.dirty && s.loaded && s.version && !s.in_doubt && s.stale_derived.empty(),
             [&] { return R + " serves while dirty, unloaded, uncommitted, in doubt or stale"; });
      Expect(m.dirty != Tri::kYes && m.loaded && stale.empty(),
             [&] { return R + " serves although the model says it must not"; });
    }
    if (m.dirty != Tri::kUnknown) {
      const bool should = m.loaded && m.dirty == Tri::kNo && !m.committed_tx.empty() &&
                          !s.in_doubt && stale.empty();
      Expect(s.serving == should, [&] {
        return R + " serving=" + (s.serving ? "true" : "false") + "; the model says " +
               (should ? "true" : "false");
      });
    }
  }
}

void Script::CheckAfterRecovery() {
  Expect(CoordAlive(), "the coordinator is down after recovery");
  for (int r = 0; r < o_.ranks; ++r) {
    Expect(Alive(r), "rank " + std::to_string(r) + " is down after recovery");
    const RankStatus s = RankP(r).status();
    Expect(!s.in_doubt, "rank " + std::to_string(r) + " is still in doubt about " +
                            s.in_doubt.value_or("") + " after recovery");
    Expect(!s.active_tx, "rank " + std::to_string(r) + " still has transaction " +
                             s.active_tx.value_or("") +
                             " active after the coordinator aborted "
                             "or decided it");
    Expect(s.committed_tx.value_or("") == model_->last_committed(),
           "rank " + std::to_string(r) + " records '" + s.committed_tx.value_or("") +
               "' as its last commit; the coordinator last committed '" + model_->last_committed() +
               "' (a decided commit was lost)");
  }
  for (const auto& [tx, d] : model_->decisions()) {
    if (d.kind != DKind::kCommit) continue;
    auto v = Coord().CommittedVersion(tx);
    Expect(v && *v == d.version, "the coordinator no longer knows that " + tx + " committed as " +
                                     d.version + " (a decided commit was lost)");
  }
  CheckRanks();
}

void Script::FinalCheck() {
  // After the fault-free full commit every rank serves the same committed version.
  for (int r = 0; r < o_.ranks; ++r) {
    const RankStatus s = RankP(r).status();
    Expect(s.serving && !s.dirty && s.loaded,
           "rank " + std::to_string(r) + " does not serve after a fault-free full commit");
  }
  // Clean shutdown, then every journal must pass `wtx check`.
  cluster_->CloseCoordinator();
  for (int r = 0; r < o_.ranks; ++r) cluster_->CloseRank(r);
  std::vector<std::string> dirs = {dir_ + "/coordinator"};
  for (int r = 0; r < o_.ranks; ++r) dirs.push_back(dir_ + "/rank-" + std::to_string(r));
  for (const auto& d : dirs) {
    VerifyOptions vo;
    vo.strict = true;  // closed cleanly: not even a warning
    JournalCheckReport v = VerifyJournalDir(d, vo);
    ++rep_.journals_verified;
    Expect(v.status.ok(), "wtx check --strict fails on " + d +
                              " after recovery and a clean "
                              "shutdown: " +
                              v.status.ToString());
  }
}

}  // namespace wtx::torture
