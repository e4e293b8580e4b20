#include "tools/torture/model.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "wtx/content_hash.h"

namespace wtx::torture {

using nlohmann::json;

std::string_view TriName(Tri t) {
  switch (t) {
    case Tri::kNo:
      return "no";
    case Tri::kYes:
      return "yes";
    case Tri::kUnknown:
      return "unknown";
  }
  return "?";
}

json TortureManifestJson(int rank, int ranks) {
  auto rows = [](int b, int e) { return json::array({b, e}); };
  const int r = rank, n = ranks;
  json qkv_shards = json::array();
  const char* names[] = {"q", "k", "v"};
  for (int i = 0; i < 3; ++i) {
    qkv_shards.push_back({{"id", names[i]},
                          {"source", std::string("l0.") + names[i] + ".weight"},
                          {"source_shape", {4 * n, 4}},
                          {"box", {rows(4 * i, 4 * i + 4), rows(0, 4)}},
                          {"source_box", {rows(4 * r, 4 * r + 4), rows(0, 4)}}});
  }
  json expert_shards = json::array();
  for (int e = 0; e < 2; ++e) {
    expert_shards.push_back({{"id", "e" + std::to_string(e)},
                             {"source", "l1.experts." + std::to_string(e) + ".w"},
                             {"source_shape", {3, 4}},
                             {"box", {rows(e, e + 1), rows(0, 3), rows(0, 4)}},
                             {"source_box", {rows(0, 3), rows(0, 4)}}});
  }
  return {
      {"params",
       {{{"name", "embed.weight"}, {"dtype", "f32"}, {"shape", {8, 4}}},
        {{"name", "l0.qkv.weight"}, {"dtype", "bf16"}, {"shape", {12, 4}}, {"shards", qkv_shards}},
        {{"name", "l0.norm.weight"}, {"dtype", "f32"}, {"shape", {4}}},
        {{"name", "l0.o.weight"},
         {"dtype", "bf16"},
         {"shape", {4, 2}},
         {"shards",
          {{{"id", "0"},
            {"source", "l0.o.weight"},
            {"source_shape", {4, 2 * n}},
            {"box", {rows(0, 4), rows(0, 2)}},
            {"source_box", {rows(0, 4), rows(2 * r, 2 * r + 2)}}}}}},
        {{"name", "l1.experts.w"},
         {"dtype", "f16"},
         {"shape", {2, 3, 4}},
         {"shards", expert_shards}},
        {{"name", "l1.packed.weight"},
         {"dtype", "u8"},
         {"shape", {8}},
         {"shards",
          {{{"id", "0"},
            {"source", "l1.packed.weight"},
            {"source_shape", {8 * n}},
            {"box", {rows(0, 8)}},
            {"source_box", {rows(8 * r, 8 * r + 8)}},
            {"layout", "packed"}}}}}}},
      {"modules",
       {{{"name", "embed"}, {"params", {"embed.weight"}}},
        {{"name", "l0"}, {"params", {"l0.qkv.weight", "l0.norm.weight", "l0.o.weight"}}},
        {{"name", "l1"}, {"params", {"l1.experts.w", "l1.packed.weight"}}}}},
      {"derived",
       {{{"name", "l0.attn.W_UK_T"}, {"sources", {"l0.qkv.weight"}}, {"phase", "attention"}},
        {{"name", "l0.o.fp8_scale"}, {"sources", {"l0.o.weight"}}, {"phase", "kernel"}},
        {{"name", "l1.experts.scale"}, {"sources", {"l1.experts.w"}}, {"phase", "post_load"}}}}};
}

namespace {

// Visits the live elements of `box` in row-major order with their coordinates.
template <typename F>
void ForEachElement(const Box& box, F&& f) {
  std::vector<int64_t> idx(box.size());
  for (size_t d = 0; d < box.size(); ++d) idx[d] = box[d].begin;
  const int64_t n = NumElements(box);
  for (int64_t e = 0; e < n; ++e) {
    f(idx);
    for (size_t d = box.size(); d-- > 0;) {
      if (++idx[d] < box[d].end) break;
      idx[d] = box[d].begin;
    }
  }
}

int64_t Flat(const Shape& shape, const std::vector<int64_t>& idx) {
  int64_t f = 0;
  for (size_t d = 0; d < shape.size(); ++d) f = f * shape[d] + idx[d];
  return f;
}

bool Inside(const Box& b, const std::vector<int64_t>& idx, size_t offset = 0) {
  for (size_t d = 0; d < b.size(); ++d) {
    if (idx[offset + d] < b[d].begin || idx[offset + d] >= b[d].end) return false;
  }
  return true;
}

// Source coordinates of flat index `i` of a tensor of `shape`.
std::vector<int64_t> Unflat(const Shape& shape, int64_t i) {
  std::vector<int64_t> c(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    c[d] = i % shape[d];
    i /= shape[d];
  }
  return c;
}

bool BoxesOverlap(const Box& a, const Box& b) {
  for (size_t d = 0; d < a.size(); ++d) {
    if (a[d].end <= b[d].begin || b[d].end <= a[d].begin) return false;
  }
  return true;
}

}  // namespace

Model::Model(std::vector<ManifestPtr> manifests, std::string kernel_identity)
    : manifests_(std::move(manifests)), kernel_(std::move(kernel_identity)) {
  ranks_.resize(manifests_.size());
  for (size_t r = 0; r < ranks_.size(); ++r) {
    const Manifest& m = *manifests_[r];
    for (const auto& p : m.params()) ranks_[r].live.emplace_back(p.num_bytes(), 0);
    ranks_[r].stale.assign(m.derived().size(), false);
    ranks_[r].kernel = kernel_;
  }
}

std::vector<uint8_t> Model::ExpectedBytes(int r, uint32_t param, const Box& box,
                                          uint64_t seed) const {
  const ParamSpec& p = manifests_[r]->params()[param];
  const size_t esz = DTypeSize(p.dtype);
  std::vector<uint8_t> out(static_cast<size_t>(NumElements(box)) * esz);
  sim::FillSpec fill;
  fill.seed = seed;
  size_t at = 0;
  ForEachElement(box, [&](const std::vector<int64_t>& idx) {
    for (const ShardSpec& s : p.shards) {
      if (!Inside(s.box, idx)) continue;
      const size_t extra = s.box.size() - s.source_box.size();
      std::vector<int64_t> src(s.source_box.size());
      for (size_t d = 0; d < src.size(); ++d) {
        src[d] = s.source_box[d].begin + idx[extra + d] - s.box[extra + d].begin;
      }
      sim::FillElement(fill, sim::SourceNameHash(s.source), Flat(s.source_shape, src), p.dtype,
                       out.data() + at);
      break;
    }
    at += esz;
  });
  return out;
}

std::vector<uint8_t> Model::PatchValues(int r, const std::string& source,
                                        const std::vector<int64_t>& indices, uint64_t seed) const {
  const auto& refs = manifests_[r]->ShardsOfSource(source);
  if (refs.empty()) return {};
  const DType dt = manifests_[r]->params()[refs[0].param].dtype;
  const size_t esz = DTypeSize(dt);
  std::vector<uint8_t> out(indices.size() * esz);
  sim::FillSpec fill;
  fill.seed = seed;
  for (size_t i = 0; i < indices.size(); ++i) {
    sim::FillElement(fill, sim::SourceNameHash(source), indices[i], dt, out.data() + i * esz);
  }
  return out;
}

std::optional<ErrorCode> Model::PredictBegin(int r, const BeginRequest& req) const {
  const ModelRank& rk = ranks_[r];
  const Manifest& m = *manifests_[r];
  if (!rk.alive) return ErrorCode::kCrashed;
  if (rk.tx) return ErrorCode::kTxActive;
  if (req.kind != TxKind::kFull) {
    if (rk.dirty == Tri::kUnknown) return std::nullopt;
    if (rk.dirty == Tri::kYes || (!rk.loaded && !rk.committed_tx.empty())) return ErrorCode::kDirty;
    auto it = decisions_.find(rk.committed_tx);
    if (rk.committed_tx.empty() || it == decisions_.end() || it->second.version != req.base) {
      return ErrorCode::kBaseMismatch;  // never committed: no base can match
    }
  }
  if (req.kind == TxKind::kPartial) {
    if (req.modules.empty()) return ErrorCode::kOutOfScope;
    for (const auto& mod : req.modules) {
      if (!m.FindModule(mod)) return ErrorCode::kUnknownParam;
    }
  }
  if (req.kind == TxKind::kDelta && req.sources.empty()) return ErrorCode::kOutOfScope;
  return ErrorCode::kOk;
}

std::optional<ErrorCode> Model::PredictWrite(int r, const std::vector<ModelWrite>& pieces) const {
  const ModelRank& rk = ranks_[r];
  const Manifest& m = *manifests_[r];
  if (!rk.alive) return ErrorCode::kCrashed;
  if (!rk.tx) return ErrorCode::kNoTx;
  const ModelTx& tx = *rk.tx;
  if (tx.prepared != ModelTx::Prep::kNone) return ErrorCode::kTxActive;
  for (const ModelWrite& w : pieces) {
    if (w.param >= m.params().size()) return ErrorCode::kUnknownParam;
    const ParamSpec& p = m.params()[w.param];
    const ShardSpec* shard = nullptr;
    if (!w.shard.empty()) {
      for (const auto& s : p.shards) {
        if (s.id == w.shard) shard = &s;
      }
      if (!shard) return ErrorCode::kUnknownParam;
    }
    if (tx.kind == TxKind::kDelta) return ErrorCode::kOutOfScope;
    if (!tx.in_scope[w.param]) return ErrorCode::kOutOfScope;
    if (w.box.size() != p.shape.size()) return ErrorCode::kBadWrite;
    for (size_t d = 0; d < w.box.size(); ++d) {
      if (w.box[d].begin >= w.box[d].end) return ErrorCode::kBadWrite;
    }
    for (size_t d = 0; d < w.box.size(); ++d) {
      if (w.box[d].begin < 0 || w.box[d].end > p.shape[d]) return ErrorCode::kOutOfRange;
    }
    if (shard) {
      for (size_t d = 0; d < w.box.size(); ++d) {
        if (w.box[d].begin < shard->box[d].begin || w.box[d].end > shard->box[d].end) {
          return ErrorCode::kOutOfRange;
        }
      }
    }
    bool dup = false;
    ForEachElement(w.box, [&](const std::vector<int64_t>& idx) {
      dup = dup || tx.covered[w.param][Flat(p.shape, idx)];
    });
    if (dup) return ErrorCode::kDuplicateWrite;
  }
  for (size_t i = 0; i < pieces.size(); ++i) {
    for (size_t k = i + 1; k < pieces.size(); ++k) {
      if (pieces[i].param == pieces[k].param && BoxesOverlap(pieces[i].box, pieces[k].box)) {
        return ErrorCode::kDuplicateWrite;
      }
    }
  }
  return ErrorCode::kOk;
}

std::optional<ErrorCode> Model::PredictPatch(int r, const std::string& source,
                                             const std::vector<int64_t>& indices, int part,
                                             int parts) const {
  const ModelRank& rk = ranks_[r];
  const Manifest& m = *manifests_[r];
  if (!rk.alive) return ErrorCode::kCrashed;
  if (!rk.tx) return ErrorCode::kNoTx;
  const ModelTx& tx = *rk.tx;
  if (tx.prepared != ModelTx::Prep::kNone) return ErrorCode::kTxActive;
  if (tx.kind != TxKind::kDelta) return ErrorCode::kOutOfScope;
  if (!tx.sources.count(source)) return ErrorCode::kOutOfScope;
  if (parts < 1 || part < 0 || part >= parts) return ErrorCode::kBadWrite;
  const auto& refs = m.ShardsOfSource(source);
  if (refs.empty()) return ErrorCode::kOk;
  auto it = tx.patches.find(source);
  if (it != tx.patches.end() && it->second.n != 0) {
    if (it->second.n != parts) return ErrorCode::kBadWrite;
    if (it->second.got[part]) return ErrorCode::kDuplicateWrite;
  }
  const Shape shape = *m.SourceShape(source);
  const int64_t elems = NumElements(shape);
  std::set<int64_t> seen;
  for (int64_t i : indices) {
    if (i < 0 || i >= elems) return ErrorCode::kOutOfRange;
  }
  for (int64_t i : indices) {
    if (!seen.insert(i).second) return ErrorCode::kDuplicateWrite;
  }
  if (it != tx.patches.end()) {
    for (int64_t i : indices) {
      if (it->second.indices.count(i)) return ErrorCode::kDuplicateWrite;
    }
  }
  for (int64_t i : indices) {
    const auto c = Unflat(shape, i);
    for (const ShardRef& ref : refs) {
      const ShardSpec& s = m.params()[ref.param].shards[ref.shard];
      if (Inside(s.source_box, c) && s.packed) return ErrorCode::kLayoutMismatch;
    }
  }
  return ErrorCode::kOk;
}

std::optional<std::vector<ErrorCode>> Model::PredictVote(int r, const std::string& txid) const {
  const ModelRank& rk = ranks_[r];
  const Manifest& m = *manifests_[r];
  if (!rk.tx || rk.tx->id != txid) return std::nullopt;
  const ModelTx& tx = *rk.tx;
  std::vector<ErrorCode> errors;
  bool complete = true;
  if (tx.kind == TxKind::kDelta) {
    for (const auto& src : tx.sources) {
      if (m.ShardsOfSource(src).empty()) continue;
      auto it = tx.patches.find(src);
      if (it == tx.patches.end() || it->second.n == 0 ||
          std::find(it->second.got.begin(), it->second.got.end(), false) != it->second.got.end()) {
        complete = false;
      }
    }
  } else {
    for (uint32_t p = 0; p < m.params().size(); ++p) {
      if (!tx.in_scope[p]) continue;
      if (std::find(tx.covered[p].begin(), tx.covered[p].end(), false) != tx.covered[p].end()) {
        complete = false;
      }
    }
  }
  if (!complete) errors.push_back(ErrorCode::kCoverageIncomplete);
  if (std::find(rk.stale.begin(), rk.stale.end(), true) != rk.stale.end()) {
    errors.push_back(ErrorCode::kStaleDerived);
  }
  if (rk.kernel != tx.kernel_at_begin) errors.push_back(ErrorCode::kKernelIdentityChanged);
  return errors;
}

void Model::Begin(int r, const BeginRequest& req) {
  ModelRank& rk = ranks_[r];
  const Manifest& m = *manifests_[r];
  ModelTx tx;
  tx.id = req.tx;
  tx.kind = req.kind;
  tx.rollback = req.rollback && req.kind != TxKind::kFull;
  tx.in_scope.assign(m.params().size(), req.kind == TxKind::kFull);
  if (req.kind == TxKind::kPartial) {
    for (const auto& mod : req.modules) {
      for (const auto& pn : m.modules()[*m.FindModule(mod)].params) {
        tx.in_scope[*m.FindParam(pn)] = true;
      }
    }
  }
  tx.sources.insert(req.sources.begin(), req.sources.end());
  for (const auto& p : m.params()) tx.covered.emplace_back(p.num_elements(), false);
  tx.dirty_at_begin = rk.dirty;
  if (tx.rollback) tx.live_at_begin = rk.live;
  tx.stale_at_begin = rk.stale;
  tx.kernel_at_begin = rk.kernel;
  rk.tx = std::move(tx);
  rk.ever_began = true;
}

void Model::MarkWritten(int r, uint32_t param) {
  ModelRank& rk = ranks_[r];
  const Manifest& m = *manifests_[r];
  for (uint32_t d = 0; d < m.derived().size(); ++d) {
    for (const auto& src : m.derived()[d].sources) {
      if (*m.FindParam(src) == param) rk.stale[d] = true;
    }
  }
  rk.tx->wrote = true;
  rk.tx->written.insert(param);
  Dirty(rk);
}

void Model::Write(int r, const std::vector<ModelWrite>& pieces) {
  ModelRank& rk = ranks_[r];
  const Manifest& m = *manifests_[r];
  for (const ModelWrite& w : pieces) {
    const ParamSpec& p = m.params()[w.param];
    const size_t esz = DTypeSize(p.dtype);
    std::vector<uint8_t> bytes = ExpectedBytes(r, w.param, w.box, w.seed);
    size_t at = 0;
    ForEachElement(w.box, [&](const std::vector<int64_t>& idx) {
      const int64_t f = Flat(p.shape, idx);
      std::memcpy(rk.live[w.param].data() + f * esz, bytes.data() + at, esz);
      rk.tx->covered[w.param][f] = true;
      at += esz;
    });
    MarkWritten(r, w.param);
  }
}

void Model::Patch(int r, const std::string& source, const std::vector<int64_t>& indices, int part,
                  int parts, uint64_t seed) {
  ModelRank& rk = ranks_[r];
  const Manifest& m = *manifests_[r];
  const auto& refs = m.ShardsOfSource(source);
  if (refs.empty()) return;
  const Shape shape = *m.SourceShape(source);
  const std::vector<uint8_t> values = PatchValues(r, source, indices, seed);
  const size_t esz = values.size() / std::max<size_t>(1, indices.size());
  std::set<uint32_t> touched;
  for (size_t i = 0; i < indices.size(); ++i) {
    const auto c = Unflat(shape, indices[i]);
    for (const ShardRef& ref : refs) {
      const ParamSpec& p = m.params()[ref.param];
      const ShardSpec& s = p.shards[ref.shard];
      if (!Inside(s.source_box, c)) continue;
      const size_t extra = s.box.size() - s.source_box.size();
      std::vector<int64_t> live(s.box.size());
      for (size_t d = 0; d < extra; ++d) live[d] = s.box[d].begin;
      for (size_t d = 0; d < c.size(); ++d) {
        live[extra + d] = s.box[extra + d].begin + c[d] - s.source_box[d].begin;
      }
      std::memcpy(rk.live[ref.param].data() + Flat(p.shape, live) * esz, values.data() + i * esz,
                  esz);
      touched.insert(ref.param);
    }
  }
  for (uint32_t p : touched) MarkWritten(r, p);
  ModelTx::Parts& ps = rk.tx->patches[source];
  if (ps.n == 0) {
    ps.n = parts;
    ps.got.assign(parts, false);
  }
  ps.got[part] = true;
  ps.indices.insert(indices.begin(), indices.end());
}

void Model::Refresh(int r, const std::string& name) {
  ModelRank& rk = ranks_[r];
  const Manifest& m = *manifests_[r];
  for (uint32_t d = 0; d < m.derived().size(); ++d) {
    const bool target = name == "*" ? rk.stale[d] : m.derived()[d].name == name;
    if (!target) continue;
    rk.stale[d] = false;
    if (rk.tx) {
      rk.tx->refreshed.insert(d);
      bool from_written = false;
      for (const auto& src : m.derived()[d].sources) {
        from_written = from_written || rk.tx->written.count(*m.FindParam(src)) > 0;
      }
      if (from_written) {
        rk.tx->refreshed_from_written.insert(d);
      } else {
        rk.tx->refreshed_from_written.erase(d);
      }
    }
  }
}

void Model::Prepared(int r, ModelTx::Prep prep) {
  ModelRank& rk = ranks_[r];
  if (!rk.tx) return;
  rk.tx->prepared = prep;
  if (prep == ModelTx::Prep::kYes || prep == ModelTx::Prep::kMaybe) rk.tx->digest = Digest(r);
}

void Model::ApplyDecision(int r, const std::string& txid, ModelDecision::Kind kind) {
  ModelRank& rk = ranks_[r];
  if (!rk.tx || rk.tx->id != txid) return;
  ModelTx& tx = *rk.tx;
  switch (kind) {
    case ModelDecision::Kind::kCommit:
      rk.committed_tx = txid;
      if (tx.interrupted) {
        rk.dirty = Tri::kYes;
      } else if (tx.kind == TxKind::kFull) {
        rk.dirty = Tri::kNo;
        rk.loaded = true;
      } else {
        rk.dirty = tx.dirty_at_begin;  // begin refused a dirty base: kNo
      }
      break;
    case ModelDecision::Kind::kAbort:
      if (tx.rollback && !tx.interrupted && tx.wrote) {
        rk.live = tx.live_at_begin;
        // The bytes are those of begin again: what was not refreshed has its standing of
        // begin; a copy refreshed before any of its sources was written is of those very bytes
        // (fresh); one refreshed after such a write holds aborted bytes (stale). Nothing else.
        rk.stale = tx.stale_at_begin;
        for (uint32_t d : tx.refreshed) rk.stale[d] = tx.refreshed_from_written.count(d) > 0;
        rk.dirty = tx.dirty_at_begin;
      } else if (tx.wrote) {
        rk.dirty = Tri::kYes;
      }
      break;
    case ModelDecision::Kind::kNoop:
    case ModelDecision::Kind::kUnknown:
      break;
  }
  rk.tx.reset();
}

void Model::Kill(int r) { ranks_[r].alive = false; }

void Model::Restart(int r) {
  ModelRank& rk = ranks_[r];
  const Manifest& m = *manifests_[r];
  rk.alive = true;
  rk.loaded = false;
  for (size_t p = 0; p < rk.live.size(); ++p) rk.live[p].assign(m.params()[p].num_bytes(), 0);
  rk.stale.assign(m.derived().size(), false);
  rk.kernel = kernel_;
  const bool in_doubt =
      rk.tx && (rk.tx->prepared == ModelTx::Prep::kYes || rk.tx->prepared == ModelTx::Prep::kMaybe);
  const bool began = rk.tx.has_value() || rk.begin_maybe_logged;
  if (in_doubt) {
    rk.tx->interrupted = true;
    rk.tx->wrote = true;  // conservatively: the journal may say so
    rk.dirty = Tri::kYes;
  } else {
    rk.tx.reset();
    if (!rk.committed_tx.empty() || rk.dirty == Tri::kYes) {
      rk.dirty = Tri::kYes;
    } else if (began) {
      rk.dirty = rk.begin_maybe_logged ? Tri::kUnknown : Tri::kYes;
    } else if (rk.ever_began) {
      rk.dirty = Tri::kUnknown;  // an empty transaction's OUTCOME may be lost with power
    }
  }
  rk.begin_maybe_logged = false;
}

std::string Model::Digest(int r) const {
  const Manifest& m = *manifests_[r];
  std::vector<uint64_t> d;
  for (uint32_t p = 0; p < m.params().size(); ++p) d.push_back(ParamDigest(ranks_[r].live[p]));
  return RankDigest(m, d);
}

void Model::RecordDecision(const std::string& tx, ModelDecision d) {
  if (d.kind == ModelDecision::Kind::kCommit) last_committed_ = tx;
  decisions_[tx] = std::move(d);
}

}  // namespace wtx::torture
