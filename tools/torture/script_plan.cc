// Script's planning (script.h): the random operations of one transaction (begin, writes,
// patches, refreshes, kernel identity changes, commit or abort, with their deliberate
// mistakes) and the fault to inject into an operation.
//
// Thread-safety: a Script runs on one thread.
#include "tools/torture/script.h"

#include <algorithm>

namespace wtx::torture {

// ---------------------------------------------------------------------------------------------
// Planning

std::vector<Op> Script::PlanTransaction(const std::string& tx, bool clean) {
  std::vector<Op> ops;
  const Manifest& m0 = model_->manifest(0);
  const uint64_t seed = rng_() % 1000000;
  Op b;
  b.kind = Op::Kind::kBegin;
  b.begin.tx = tx;
  // Sparse updates when every rank has a clean base (mostly); otherwise mostly full reloads,
  // with some partial/delta begins that must be refused.
  bool base_ok = true;
  for (int r = 0; r < o_.ranks; ++r) {
    const ModelRank& rk = model_->rank(r);
    base_ok = base_ok && rk.alive && rk.loaded && rk.dirty == Tri::kNo && !rk.committed_tx.empty();
  }
  const int full_pct = base_ok ? 40 : 85;
  const int pick = clean ? 0 : static_cast<int>(Rand(100));
  b.begin.kind = pick < full_pct                          ? TxKind::kFull
                 : pick < full_pct + (100 - full_pct) / 2 ? TxKind::kPartial
                                                          : TxKind::kDelta;
  if (b.begin.kind != TxKind::kFull) {
    const std::string last = model_->last_committed();
    auto it = model_->decisions().find(last);
    b.begin.base =
        (it != model_->decisions().end() && !Chance(0.1)) ? it->second.version : "00badba5e";
    b.begin.rollback = Chance(0.4);
  }
  std::set<uint32_t> scope;
  if (b.begin.kind == TxKind::kPartial) {
    for (const auto& mod : m0.modules()) {
      if (Chance(0.5)) b.begin.modules.push_back(mod.name);
    }
    if (b.begin.modules.empty()) {
      b.begin.modules.push_back(m0.modules()[Rand(m0.modules().size())].name);
    }
  }
  std::vector<std::string> patchable;
  for (const auto& p : m0.params()) {
    for (const auto& s : p.shards) {
      if (!s.packed) patchable.push_back(s.source);
    }
  }
  if (b.begin.kind == TxKind::kDelta) {
    std::shuffle(patchable.begin(), patchable.end(), rng_);
    const size_t n = 1 + Rand(3);
    for (size_t i = 0; i < n && i < patchable.size(); ++i) b.begin.sources.push_back(patchable[i]);
    if (Chance(0.08)) b.begin.sources.push_back("l1.packed.weight");
  }
  ops.push_back(b);

  // An empty transaction (nothing written anywhere: a noop) must clean nothing, typically
  // right after a half-failed one left the ranks dirty.
  if (!clean && Chance(0.06)) {
    Op end;
    end.kind = Chance(0.8) ? Op::Kind::kCommit : Op::Kind::kAbort;
    end.begin.tx = tx;
    ops.push_back(end);
    return ops;
  }
  // Per rank: refresh-before (does not count), writes or patches, refresh after.
  std::vector<int> order(o_.ranks);
  for (int r = 0; r < o_.ranks; ++r) order[r] = r;
  std::shuffle(order.begin(), order.end(), rng_);
  for (int r : order) {
    const Manifest& m = model_->manifest(r);
    const double refresh_mode = clean ? 0 : std::uniform_real_distribution<double>(0, 1)(rng_);
    if (refresh_mode > 0.97) {
      Op rf;
      rf.kind = Op::Kind::kRefresh;
      rf.rank = r;
      rf.name = "*";
      ops.push_back(rf);
    }
    if (!clean && Chance(0.03)) {
      Op k;
      k.kind = Op::Kind::kSetKernel;
      k.rank = r;
      k.name = "other-kernel";
      ops.push_back(k);
    }
    if (b.begin.kind != TxKind::kDelta) {
      for (uint32_t pi = 0; pi < m.params().size(); ++pi) {
        const ParamSpec& p = m.params()[pi];
        bool in = b.begin.kind == TxKind::kFull;
        for (const auto& mod : b.begin.modules) {
          const auto& ps = m.modules()[*m.FindModule(mod)].params;
          in = in || std::find(ps.begin(), ps.end(), p.name) != ps.end();
        }
        if (!in) {
          if (!clean && Chance(0.03)) {  // out of scope: E_OUT_OF_SCOPE
            Op w;
            w.kind = Op::Kind::kWrite;
            w.rank = r;
            w.writes.push_back({pi, "", WholeBox(p.shape), seed});
            ops.push_back(w);
          }
          continue;
        }
        const uint64_t pseed = (!clean && Chance(0.05)) ? seed + 17 : seed;
        const double mode = clean ? 0 : std::uniform_real_distribution<double>(0, 1)(rng_);
        if (mode < 0.7) {
          for (const auto& s : p.shards) {
            if (!clean && Chance(0.01)) continue;  // a missing shard
            Op w;
            w.kind = Op::Kind::kWrite;
            w.rank = r;
            w.writes.push_back({pi, s.id, s.box, pseed});
            ops.push_back(w);
          }
        } else if (mode < 0.85) {
          Op w;
          w.kind = Op::Kind::kWrite;
          w.rank = r;
          w.writes.push_back({pi, "", WholeBox(p.shape), pseed});
          ops.push_back(w);
        } else if (mode < 0.95) {
          // Each shard in two pieces split along its first dimension of extent >= 2, sent as
          // one call (or as two).
          Op w;
          w.kind = Op::Kind::kWrite;
          w.rank = r;
          for (const auto& s : p.shards) {
            size_t d = 0;
            while (d < s.box.size() && s.box[d].end - s.box[d].begin < 2) ++d;
            if (d == s.box.size()) {
              w.writes.push_back({pi, s.id, s.box, pseed});
              continue;
            }
            Box lo = s.box, hi = s.box;
            lo[d].end = hi[d].begin = (s.box[d].begin + s.box[d].end) / 2;
            w.writes.push_back({pi, s.id, lo, pseed});
            if (Chance(0.5)) {
              ops.push_back(w);
              w.writes.clear();
            }
            w.writes.push_back({pi, s.id, hi, pseed});
          }
          if (!w.writes.empty()) ops.push_back(w);
        }                              // else: the whole parameter is missing
        if (!clean && Chance(0.03)) {  // a duplicate: E_DUPLICATE_WRITE, nothing lands
          Op w;
          w.kind = Op::Kind::kWrite;
          w.rank = r;
          w.writes.push_back({pi, p.shards[0].id, p.shards[0].box, seed + 1});
          ops.push_back(w);
        }
        if (!clean && Chance(0.02)) {  // out of range: E_OUT_OF_RANGE
          Op w;
          w.kind = Op::Kind::kWrite;
          w.rank = r;
          Box box = WholeBox(p.shape);
          box[0].end += 1;
          w.writes.push_back({pi, "", box, seed});
          ops.push_back(w);
        }
      }
    } else {
      for (const auto& src : b.begin.sources) {
        // Indices over the whole source (every rank's slice): each rank applies those it holds.
        const Shape sshape = model_->manifest(0).SourceShape(src).value();
        const int64_t total = NumElements(sshape);
        std::vector<int64_t> idx;
        const size_t k = 1 + Rand(std::min<int64_t>(8, total));
        std::set<int64_t> pickset;
        while (pickset.size() < k) pickset.insert(static_cast<int64_t>(Rand(total)));
        idx.assign(pickset.begin(), pickset.end());
        std::shuffle(idx.begin(), idx.end(), rng_);
        const int parts = 1 + static_cast<int>(Rand(3));
        std::vector<std::vector<int64_t>> part_idx(parts);
        for (size_t i = 0; i < idx.size(); ++i) part_idx[i % parts].push_back(idx[i]);
        for (int pt = 0; pt < parts; ++pt) {
          if (!clean && Chance(0.04)) continue;  // a missing part
          Op pa;
          pa.kind = Op::Kind::kPatch;
          pa.rank = r;
          pa.source = src;
          pa.indices = part_idx[pt];
          pa.part = pt;
          pa.parts = parts;
          pa.seed = seed;
          ops.push_back(pa);
          if (!clean && Chance(0.03)) ops.push_back(pa);  // the part again: E_DUPLICATE_WRITE
          if (!clean && Chance(0.02) && pt + 1 < parts && !pa.indices.empty()) {
            // A later part repeating an index: E_DUPLICATE_WRITE (and that part is lost).
            part_idx[pt + 1].push_back(pa.indices[0]);
          }
          if (!clean && Chance(0.02)) {
            Op bad = pa;
            bad.indices = {total};  // E_OUT_OF_RANGE
            ops.push_back(bad);
          }
        }
      }
    }
    if (clean || refresh_mode < 0.92) {
      Op rf;
      rf.kind = Op::Kind::kRefresh;
      rf.rank = r;
      rf.name = "*";
      ops.push_back(rf);
    } else if (refresh_mode < 0.95) {
      Op rf;
      rf.kind = Op::Kind::kRefresh;
      rf.rank = r;
      rf.name = m.derived()[Rand(m.derived().size())].name;
      ops.push_back(rf);
    }  // else: no refresh, derived state may be stale
  }
  // Interleave ranks a little: the protocol does not care about the order across ranks.
  if (!clean && Chance(0.3) && ops.size() > 2) std::shuffle(ops.begin() + 1, ops.end(), rng_);
  Op end;
  end.kind = (!clean && Chance(0.12)) ? Op::Kind::kAbort : Op::Kind::kCommit;
  end.begin.tx = tx;
  if (!clean && end.kind == Op::Kind::kCommit && Chance(0.05)) {
    end.silent.insert(static_cast<int>(Rand(o_.ranks)));
  }
  ops.push_back(end);
  return ops;
}

std::optional<Fault> Script::PlanFault(const Op* op) {
  Fault f;
  f.power = RandomPower();
  f.recover_now = Chance(0.5);
  const bool journals = op && (op->kind == Op::Kind::kBegin || op->kind == Op::Kind::kCommit ||
                               op->kind == Op::Kind::kAbort);
  const uint64_t roll = Rand(100);
  if (op && op->kind == Op::Kind::kCommit && roll < 45) {
    f.kind = Fault::Kind::kCrashPoint;
    static const char* kRank[] = {"before_prepare_logged", "after_prepare_logged"};
    static const char* kCoord[] = {"before_decision_logged", "after_decision_logged"};
    if (Chance(0.5)) {
      f.who = static_cast<int>(Rand(o_.ranks));
      f.at = kRank[Rand(2)];
    } else {
      f.who = -1;
      f.at = kCoord[Rand(2)];
    }
    return f;
  }
  if (journals && roll < 75) {
    f.kind = Chance(0.5) ? Fault::Kind::kIoWrite : Fault::Kind::kIoSync;
    f.who = Chance(0.7) ? static_cast<int>(Rand(o_.ranks)) : -1;
    f.after = static_cast<int>(Rand(3));
    return f;
  }
  const uint64_t k = Rand(10);
  if (k < 6) {
    f.kind = Fault::Kind::kKillRank;
    f.who = static_cast<int>(Rand(o_.ranks));
  } else if (k < 9) {
    f.kind = Fault::Kind::kKillCoordinator;
  } else {
    f.kind = Fault::Kind::kKillAll;
  }
  return f;
}

}  // namespace wtx::torture
