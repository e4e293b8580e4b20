// PlanTransfer (wtx/transfer_plan.h): every engine rank's needed boxes, made disjoint, each
// covered by the trainer ranks' holdings taken in turn; the plan's sizes; the engine-rank
// identity checks.
#include "wtx/transfer_plan.h"

#include <algorithm>
#include <cstring>
#include <iterator>
#include <unordered_map>

#include "src/util/hash_util.h"
#include "wtx/limits.h"

namespace wtx {
namespace {

// The sources the engine ranks hold, in the order they name them (engine rank 0's manifest
// order, then what later ranks add), with one shape and one live dtype each; *index finds them
// by name; (*shard_source)[n] lists, for engine rank n's non-padding shards in manifest order,
// the index of their source (one hash lookup per shard, here only).
Status CollectSources(std::span<const ManifestPtr> engine, std::vector<PlannedSource>* out,
                      std::unordered_map<std::string_view, uint32_t>* index,
                      std::vector<std::vector<uint32_t>>* shard_source) {
  std::vector<int> first_rank;  // the first engine rank that holds each source
  shard_source->assign(engine.size(), {});
  index->reserve(engine[0]->TotalShards() * 2);
  for (size_t n = 0; n < engine.size(); ++n) {
    (*shard_source)[n].reserve(engine[n]->TotalShards());
    for (const ParamSpec& p : engine[n]->params()) {
      for (const ShardSpec& s : p.shards) {
        if (s.padding) continue;
        auto [it, added] = index->try_emplace(s.source, static_cast<uint32_t>(out->size()));
        (*shard_source)[n].push_back(it->second);
        if (added) {
          out->push_back(PlannedSource{s.source, s.source_shape, p.dtype});
          first_rank.push_back(static_cast<int>(n));
          continue;
        }
        const PlannedSource& first = (*out)[it->second];
        if (first.shape != s.source_shape || first.dtype != p.dtype) {
          return Status::InvalidArgument(
              "source '" + s.source + "' is " + ShapeToString(s.source_shape) + " " +
              std::string(DTypeName(p.dtype)) + " on engine rank " + std::to_string(n) + " but " +
              ShapeToString(first.shape) + " " + std::string(DTypeName(first.dtype)) +
              " on engine rank " + std::to_string(first_rank[it->second]) +
              ": the engine ranks are not one model");
        }
      }
    }
  }
  return Status::OK();
}

// A box without a heap allocation, copied by its dimensions only: planning Kimi-K2 for 64
// FSDP ranks makes ~10^7 pieces.
struct FlatBox {
  struct R {
    int64_t begin, end;
  };
  size_t dims = 0;
  R r[kMaxTensorDims];  // the first `dims` are set
  FlatBox() = default;
  FlatBox(const FlatBox& o) { *this = o; }
  FlatBox& operator=(const FlatBox& o) {
    if (this == &o) return *this;
    dims = o.dims;
    // Sources have at most 4 dimensions in practice: a fixed-size copy the compiler inlines
    // (`r` past `dims` holds garbage either way).
    static_assert(kMaxTensorDims >= 4);
    std::memcpy(r, o.r, 4 * sizeof(R));
    for (size_t d = 4; d < o.dims; ++d) r[d] = o.r[d];
    return *this;
  }
  Box ToBox() const {
    Box b(dims);
    for (size_t d = 0; d < dims; ++d) b[d] = {r[d].begin, r[d].end};
    return b;
  }
};

FlatBox ToFlat(const Box& b) {
  FlatBox f;
  f.dims = b.size();
  for (size_t d = 0; d < b.size(); ++d) f.r[d] = {b[d].begin, b[d].end};
  return f;
}

// *out = a intersected with b; false when they do not overlap.
bool IntersectFlat(const FlatBox& a, const FlatBox& b, FlatBox* out) {
  out->dims = a.dims;
  for (size_t d = 0; d < a.dims; ++d) {
    out->r[d] = {std::max(a.r[d].begin, b.r[d].begin), std::min(a.r[d].end, b.r[d].end)};
    if (out->r[d].end <= out->r[d].begin) return false;
  }
  return true;
}

// SubtractBox (wtx/box.h) for boxes known to overlap.
void SubtractFlat(const FlatBox& a, const FlatBox& b, std::vector<FlatBox>* out) {
  FlatBox rest = a;
  for (size_t d = 0; d < a.dims; ++d) {
    if (rest.r[d].begin < b.r[d].begin) {
      out->push_back(rest);
      out->back().r[d].end = b.r[d].begin;
      rest.r[d].begin = b.r[d].begin;
    }
    if (rest.r[d].end > b.r[d].end) {
      out->push_back(rest);
      out->back().r[d].begin = b.r[d].end;
      rest.r[d].end = b.r[d].end;
    }
  }
}

}  // namespace

Box TransferPlan::BoxOf(size_t piece) const {
  const PlannedPiece& p = pieces[piece];
  const size_t dims = sources[p.source].shape.size();
  return Box(ranges.begin() + p.first_range, ranges.begin() + p.first_range + dims);
}

int64_t TransferPlan::BytesOf(size_t piece) const {
  const PlannedPiece& p = pieces[piece];
  const PlannedSource& s = sources[p.source];
  int64_t n = 1;
  for (size_t d = 0; d < s.shape.size(); ++d) n *= ranges[p.first_range + d].extent();
  return n * static_cast<int64_t>(DTypeSize(s.dtype));
}

TransferPlan::Sizes TransferPlan::BytesByRank() const {
  Sizes out;
  out.per_trainer.assign(trainer_ranks, 0);
  out.per_engine.assign(engine_ranks, 0);
  for (size_t i = 0; i < pieces.size(); ++i) {
    const int64_t b = BytesOf(i);
    out.total += b;
    out.per_trainer[pieces[i].trainer] += b;
    out.per_engine[pieces[i].engine] += b;
  }
  return out;
}

int64_t TransferPlan::TotalBytes() const { return BytesByRank().total; }

std::vector<int64_t> TransferPlan::BytesPerTrainer() const { return BytesByRank().per_trainer; }

std::vector<int64_t> TransferPlan::BytesPerEngine() const { return BytesByRank().per_engine; }

void TrainerSharding::ForEachHolderFrom(std::string_view source, const Shape& shape,
                                        const Box& region, int first,
                                        const std::function<bool(int, const Box&)>& fn) const {
  std::vector<std::pair<int, Box>> holders;
  ForEachHolder(source, shape, region,
                [&](int r, const Box& held) { holders.emplace_back(r, held); });
  const size_t start =
      static_cast<size_t>(std::find_if(holders.begin(), holders.end(),
                                       [&](const auto& h) { return h.first >= first; }) -
                          holders.begin());
  for (size_t i = 0; i < holders.size(); ++i) {
    const auto& [r, held] = holders[(start + i) % holders.size()];
    if (!fn(r, held)) return;
  }
}

std::string EngineLayoutDigest(const Manifest& m) {
  Hasher128 h;
  h.Str("wtx-engine-layout-v1");
  h.Str(m.Fingerprint());
  for (const ParamSpec& p : m.params()) {
    for (const ShardSpec& s : p.shards) {
      h.Str(s.source);
      h.U64(s.source_box.size());
      for (const Range& r : s.source_box) {
        h.U64(static_cast<uint64_t>(r.begin));
        h.U64(static_cast<uint64_t>(r.end));
      }
    }
  }
  return h.HexDigest();
}

Status CheckPlanForEngine(const TransferPlan& plan, int rank, const Manifest& m) {
  if (rank < 0 || rank >= plan.engine_ranks) {
    return Status::InvalidArgument("transfer plan: engine rank " + std::to_string(rank) +
                                   " is not one of its " + std::to_string(plan.engine_ranks) +
                                   " engine ranks");
  }
  if (plan.engine_fingerprints[rank] != m.Fingerprint()) {
    return Status::InvalidArgument("transfer plan: made for a manifest of fingerprint " +
                                   plan.engine_fingerprints[rank] + " at engine rank " +
                                   std::to_string(rank) + ", but this rank's manifest is " +
                                   m.Fingerprint() + " (another model, dtype or parallel layout)");
  }
  const std::string layout = EngineLayoutDigest(m);
  if (plan.engine_layouts[rank] != layout) {
    return Status::InvalidArgument("transfer plan: engine rank " + std::to_string(rank) +
                                   " holds other source boxes than the plan's rank " +
                                   std::to_string(rank) + " (layout " + layout + ", plan " +
                                   plan.engine_layouts[rank] +
                                   "): the plan is for another rank of the group");
  }
  return Status::OK();
}

namespace {

// Plans engine rank `n`, appending its pieces to *pieces and their boxes to *ranges: what it
// needs of each source, as disjoint boxes (a source feeding two shards the same way is needed
// once), each covered by the trainer ranks' holdings in turn.
Status PlanEngineRank(const TrainerSharding& trainer, const Manifest& m, size_t n,
                      const std::vector<PlannedSource>& sources,
                      const std::vector<uint32_t>& shard_source, std::vector<PlannedPiece>* pieces,
                      std::vector<Range>* ranges) {
  std::map<uint32_t, std::vector<Box>> need;
  size_t shard = 0;
  for (const ParamSpec& p : m.params()) {
    for (const ShardSpec& s : p.shards) {
      if (s.padding) continue;
      const uint32_t src = shard_source[shard++];
      if (BoxIsEmpty(s.source_box)) continue;
      std::vector<Box>& have = need[src];
      if (have.empty()) {  // the usual case: a source feeds one shard of the rank
        have.push_back(s.source_box);
        continue;
      }
      std::vector<Box> rest = SubtractBoxes(s.source_box, have);
      have.insert(have.end(), std::make_move_iterator(rest.begin()),
                  std::make_move_iterator(rest.end()));
    }
  }
  const int first = static_cast<int>(n % static_cast<size_t>(trainer.ranks()));
  std::vector<FlatBox> remaining, next;
  for (const auto& [source_index, boxes] : need) {
    const uint32_t src = source_index;  // a structured binding cannot be captured (clang 14)
    const PlannedSource& ps = sources[src];
    for (const Box& b : boxes) {
      remaining.assign(1, ToFlat(b));
      FlatBox piece;
      // Holders from rank `first` on, then the ones before it: a replicated tensor's senders
      // rotate with the engine rank. Asked until the box is covered.
      trainer.ForEachHolderFrom(ps.name, ps.shape, b, first, [&](int r, const Box& held_box) {
        const FlatBox held = ToFlat(held_box);
        next.clear();
        for (const FlatBox& rest : remaining) {
          if (!IntersectFlat(rest, held, &piece)) {
            next.push_back(rest);
            continue;
          }
          pieces->push_back(
              {r, static_cast<int32_t>(n), src, static_cast<uint32_t>(ranges->size())});
          for (size_t d = 0; d < piece.dims; ++d) {
            ranges->push_back({piece.r[d].begin, piece.r[d].end});
          }
          SubtractFlat(rest, held, &next);
        }
        remaining.swap(next);
        return !remaining.empty();
      });
      if (!remaining.empty()) {
        return Status::InvalidArgument("transfer plan: no trainer rank of '" + trainer.spec() +
                                       "' holds source '" + ps.name + "' box " +
                                       BoxToString(remaining[0].ToBox()) +
                                       " (needed by engine rank " + std::to_string(n) + ")");
      }
    }
  }
  return Status::OK();
}

}  // namespace

Result<TransferPlan> PlanTransfer(const TrainerSharding& trainer,
                                  std::span<const ManifestPtr> engine,
                                  const std::function<void(size_t, size_t)>& on_rank) {
  if (engine.empty()) return Status::InvalidArgument("transfer plan: no engine rank");
  TransferPlan plan;
  plan.trainer_spec = trainer.spec();
  plan.trainer_ranks = trainer.ranks();
  plan.engine_ranks = static_cast<int>(engine.size());
  std::unordered_map<std::string_view, uint32_t> index;
  std::vector<std::vector<uint32_t>> shard_source;
  WTX_RETURN_IF_ERROR(CollectSources(engine, &plan.sources, &index, &shard_source));
  WTX_RETURN_IF_ERROR(trainer.Check([&](std::string_view name) -> const Shape* {
    auto it = index.find(name);
    return it == index.end() ? nullptr : &plan.sources[it->second].shape;
  }));
  for (size_t n = 0; n < engine.size(); ++n) {
    plan.engine_fingerprints.push_back(engine[n]->Fingerprint());
    plan.engine_layouts.push_back(EngineLayoutDigest(*engine[n]));
    WTX_RETURN_IF_ERROR(PlanEngineRank(trainer, *engine[n], n, plan.sources, shard_source[n],
                                       &plan.pieces, &plan.ranges));
    if (n == 0) {  // the other ranks need about as many pieces: grow once, not by doubling
      plan.pieces.reserve(plan.pieces.size() * engine.size() + plan.pieces.size() / 4);
      plan.ranges.reserve(plan.ranges.size() * engine.size() + plan.ranges.size() / 4);
    }
    if (on_rank) on_rank(n + 1, engine.size());
  }
  return plan;
}

}  // namespace wtx
