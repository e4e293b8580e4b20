// ParticipantImpl (participant_impl.h): in-place landings. Reserve hands out the live memory of
// a region for the caller to fill and Landed declares it written; HashWritten and HashLanded
// hash the chunks a change covers whole (landings possibly in the background, data_pool_),
// and DrainLandingHashes installs those background digests.
#include "src/txn/participant_impl.h"

#include <algorithm>

namespace wtx::participant_internal {

namespace {

std::string RegionKey(const LandingRegion& r) {
  return r.param + '\x1f' + r.shard + '\x1f' + r.source + '\x1f' +
         (r.box ? BoxToString(*r.box) : std::string("-")) + '\x1f' +
         (r.source_box ? BoxToString(*r.source_box) : std::string("-"));
}

std::string RegionName(const LandingRegion& r) {
  std::string s;
  if (!r.param.empty()) s += "'" + r.param + "'";
  if (!r.shard.empty()) s += " shard '" + r.shard + "'";
  if (!r.source.empty()) s += (s.empty() ? "" : " ") + std::string("source '") + r.source + "'";
  if (r.box) s += " box " + BoxToString(*r.box);
  if (r.source_box) s += " piece " + BoxToString(*r.source_box);
  return s.empty() ? std::string("(empty region)") : s;
}

}  // namespace

Result<std::vector<Reservation>> ParticipantImpl::Reserve(const LandingRegion& region) {
  MetricsScope metrics_scope(this, std::nullopt);
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckWritable());
  ActiveTx& tx = *active_;
  const std::string name = RegionName(region);
  const std::string key = RegionKey(region);
  if (tx.landings.count(key)) {
    return Err(ErrorCode::kDuplicateWrite,
               "reserve " + name + ": already reserved by transaction '" + tx.req.tx + "'");
  }
  const bool delta = tx.req.kind == TxKind::kDelta;
  std::vector<Target> targets;
  std::vector<Box> parts;  // with a piece: the source part of each target
  if (region.source_box && region.source.empty()) {
    return Err(ErrorCode::kBadWrite, "reserve " + name + ": a piece needs its source");
  }
  if (region.source_box && region.box) {
    return Err(ErrorCode::kBadWrite, "reserve " + name + ": give a piece or a box, not both");
  }
  if (!region.source.empty()) {
    if (region.box && region.param.empty()) {
      return Err(ErrorCode::kBadWrite, "reserve " + name + ": a box needs its parameter");
    }
    if (region.source_box) {
      const std::optional<Shape> shape = manifest_->SourceShape(region.source);
      if (shape) {
        WTX_RETURN_IF_ERROR(CheckSourceBox(*region.source_box, *shape, "reserve " + name));
      }
    }
    if (delta && !tx.sources.count(region.source)) {
      return Err(ErrorCode::kOutOfScope, "reserve " + name +
                                             ": source not declared by delta "
                                             "transaction '" +
                                             tx.req.tx + "'");
    }
    if (delta && tx.patches.count(region.source)) {
      return Err(ErrorCode::kDuplicateWrite, "reserve " + name +
                                                 ": the source was already "
                                                 "patched by transaction '" +
                                                 tx.req.tx + "'");
    }
    const auto& refs = manifest_->ShardsOfSource(region.source);
    if (refs.empty() && !delta && !manifest_->SourceShape(region.source)) {
      return Err(ErrorCode::kUnknownParam, "reserve " + name + ": unknown source");
    }
    for (const ShardRef& ref : refs) {
      const ParamSpec& p = manifest_->params()[ref.param];
      const ShardSpec& sh = p.shards[ref.shard];
      if (!region.param.empty() && region.param != p.name) continue;
      if (!region.shard.empty() && region.shard != sh.id) continue;
      if (delta && sh.packed) {
        return Err(ErrorCode::kLayoutMismatch,
                   "reserve " + name + ": shard '" + sh.id + "' of '" + p.name +
                       "' has a packed layout that is not a translation of the source; a delta "
                       "cannot be landed in place there");
      }
      std::optional<Box> live = region.box;
      if (region.source_box) {
        Box part = Intersect(sh.source_box, *region.source_box);
        if (BoxIsEmpty(part)) continue;
        if (sh.packed && part != sh.source_box) {
          return Err(ErrorCode::kLayoutMismatch,
                     "reserve " + name + ": covers part of the packed shard '" + sh.id + "' of '" +
                         p.name + "' (send its whole source box " + BoxToString(sh.source_box) +
                         ")");
        }
        live = sh.packed ? sh.box : LiveBoxOfSourcePart(sh, part);
        parts.push_back(std::move(part));
      }
      WTX_ASSIGN_OR_RETURN(t, ResolveBox(p.name, sh.id, live,
                                         [&](uint32_t param) { return CheckInScope(tx, param); }));
      targets.push_back(std::move(t));
    }
  } else {
    if (region.param.empty()) {
      return Err(ErrorCode::kBadWrite,
                 "reserve: the region names neither a parameter nor a source");
    }
    WTX_ASSIGN_OR_RETURN(t, ResolveBox(region.param, region.shard, region.box, [&](uint32_t param) {
                           if (delta) {
                             return Err(ErrorCode::kOutOfScope,
                                        "reserve " + name + ": transaction '" + tx.req.tx +
                                            "' is a delta; land a delta in place by source");
                           }
                           return CheckInScope(tx, param);
                         }));
    targets.push_back(std::move(t));
  }
  for (const Target& t : targets) {
    const ParamSpec& p = manifest_->params()[t.param];
    if (p.served) return Err(ErrorCode::kBadWrite, "reserve " + name + ": " + ProcessedRefusal(p));
  }
  // Runs, checked against what this transaction already wrote or reserved, and each other.
  Landing landing;
  landing.name = name;
  if (delta) landing.source = region.source;
  for (const Target& t : targets) {
    const ParamSpec& p = manifest_->params()[t.param];
    ForEachFlatRun(p.shape, t.box, [&](int64_t b, int64_t len) {
      landing.runs.push_back({t.param, {b, len}});
    });
  }
  for (const auto& [param, run] : landing.runs) {
    if (OverlapsDeclared(tx, param, run.first, run.second)) {
      return Err(ErrorCode::kDuplicateWrite, "reserve " + name + ": overlaps elements of '" +
                                                 manifest_->params()[param].name +
                                                 "' this transaction already wrote or reserved");
    }
  }
  {
    auto sorted = landing.runs;
    std::sort(sorted.begin(), sorted.end());
    for (size_t i = 1; i < sorted.size(); ++i) {
      if (sorted[i - 1].first == sorted[i].first &&
          sorted[i - 1].second.first + sorted[i - 1].second.second > sorted[i].second.first) {
        return Err(ErrorCode::kDuplicateWrite, "reserve " + name + ": the region's shards overlap");
      }
    }
  }
  // The engine's storage of every parameter the region touches is still where wtx is bound.
  {
    std::vector<uint32_t> params;
    params.reserve(targets.size());
    for (const Target& t : targets) params.push_back(t.param);
    WTX_RETURN_IF_ERROR(CheckIdentityLocked(Distinct(std::move(params))));
  }
  // Everything checked. Before the engine changes a byte: before-images, touched chunks.
  const int64_t now = options_.env.clock->NowMicros();
  if (!tx.wrote) tx.t_first_write = now;
  tx.t_last_write = now;
  for (const auto& [param, run] : landing.runs) {
    const ParamSpec& p = manifest_->params()[param];
    const size_t esz = DTypeSize(p.dtype);
    const size_t off = static_cast<size_t>(run.first) * esz;
    const size_t len = static_cast<size_t>(run.second) * esz;
    WTX_RETURN_IF_ERROR(CheckBeforeDeclare(param, off, len));
    if (tx.req.rollback) WTX_RETURN_IF_ERROR(SaveBefore(param, off, len));
    TouchBytes(param, off, len);
    auto& res = tx.reserved[param];
    if (!res) {
      res = std::make_unique<CoverageSet>(p.num_elements(), p.shape.empty() ? 0 : p.shape.back());
    }
    res->Add(run.first, run.second);
    NoteWritten(param);
  }
  std::vector<Reservation> out;
  ReserveRecord rec;
  rec.tx = tx.req.tx;
  rec.region = name;
  rec.ts = now;
  for (size_t i = 0; i < targets.size(); ++i) {
    const Target& t = targets[i];
    const ParamSpec& p = manifest_->params()[t.param];
    Reservation r;
    if (!parts.empty()) r.source_box = parts[i];
    r.param = p.name;
    r.shard = t.shard ? p.shards[*t.shard].id : std::string();
    r.box = t.box;
    r.param_index = t.param;
    r.host = host_memory_ ? memory_->Param(t.param).data() : nullptr;
    r.device_ptr = host_memory_ ? 0 : memory_->DeviceAddress(t.param);
    r.param_bytes = static_cast<size_t>(p.live_bytes());
    if (t.shard) {
      tx.shards_touched.insert({t.param, *t.shard});
    } else {
      for (uint32_t k = 0; k < p.shards.size(); ++k) {
        if (Overlaps(p.shards[k].box, t.box)) tx.shards_touched.insert({t.param, k});
      }
    }
    rec.boxes.push_back(ReservedBox{p.name, r.shard, t.box});
    out.push_back(std::move(r));
  }
  tx.wrote = true;
  tx.landings.emplace(key, std::move(landing));
  UpdateCoveragePeak();
  // The rank is durably dirty already: the synced BEGIN makes an interrupted transaction dirty
  // on recovery, and tx.wrote makes it dirty now. The record is for the history: batched like
  // WRITE records (a bucketed landing reserves thousands of regions).
  pending_.emplace_back(std::move(rec));
  if (pending_.size() >= kWriteRecordBatch) WTX_RETURN_IF_ERROR(FlushPending());
  return out;
}

Status ParticipantImpl::Landed(const LandingRegion& region) {
  MetricsScope metrics_scope(this, metrics::RankPhase::kLanded);
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckWritable());
  ActiveTx& tx = *active_;
  const std::string name = RegionName(region);
  auto it = tx.landings.find(RegionKey(region));
  if (it == tx.landings.end()) {
    return Err(ErrorCode::kBadWrite, "landed " + name +
                                         ": this region was not reserved in "
                                         "transaction '" +
                                         tx.req.tx +
                                         "' (report exactly the "
                                         "region passed to Reserve)");
  }
  Landing& landing = it->second;
  if (landing.landed) {
    return Err(ErrorCode::kDuplicateWrite,
               "landed " + name + ": already landed in transaction '" + tx.req.tx + "'");
  }
  {
    // The landed bytes are read from the engine's storage: it must still be there.
    std::vector<uint32_t> params;
    for (const auto& [param, run] : landing.runs) params.push_back(param);
    WTX_RETURN_IF_ERROR(CheckIdentityLocked(Distinct(std::move(params))));
  }
  // The transfer is complete (the contract): hash the chunks it covers whole now, while the
  // engine's copy most likely left them in cache, instead of reading them again at prepare.
  // Under verify "all" always in this thread: a change right after Landed must be caught, and
  // that prepare rehashes every chunk anyway.
  WTX_RETURN_IF_ERROR(HashLanded(landing, /*background=*/tx.req.verify != VerifyMode::kAll));
  for (const auto& [param, run] : landing.runs) {
    const ParamSpec& p = manifest_->params()[param];
    auto& cov = tx.coverage[param];
    if (!cov) {
      cov = std::make_unique<CoverageSet>(p.num_elements(), p.shape.empty() ? 0 : p.shape.back());
    }
    cov->Add(run.first, run.second);
    tx.covered_elements += run.second;
    // The engine changed these bytes up to now: a refresh between Reserve and Landed was
    // computed from bytes still in flight and does not count.
    NoteWritten(param);
    tx.elements += run.second;
    tx.bytes += static_cast<int64_t>(static_cast<size_t>(run.second) * DTypeSize(p.dtype));
    tx.rows += p.shape.empty() ? 1 : std::max<int64_t>(1, run.second / p.shape.back());
  }
  if (!landing.source.empty()) {  // a delta source landed whole: all its parts arrived
    PatchState& acc = tx.patches[landing.source];
    acc.parts = 1;
    acc.got.assign(1, true);
  }
  landing.landed = true;
  tx.pieces += 1;
  tx.t_last_write = options_.env.clock->NowMicros();
  UpdateCoveragePeak();
  pending_.emplace_back(LandedRecord{tx.req.tx, name, tx.t_last_write});
  if (pending_.size() >= kWriteRecordBatch) return FlushPending();
  return Status::OK();
}

Status ParticipantImpl::HashWritten(uint32_t param, size_t offset, size_t len) {
  if (host_memory_) {
    hash_[param].HashCovered(memory_->Param(param), offset, len);
    return Status::OK();
  }
  auto hashed =
      hash_[param].HashCovered(offset, len, [&](size_t first, size_t count, uint64_t* out) {
        return memory_->ChunkDigests(param, first, count, out);
      });
  if (!hashed.ok()) return MemoryFailed(hashed.status());
  return Status::OK();
}

Status ParticipantImpl::HashLanded(const Landing& landing, bool background) {
  if (hooks_.benchmark_hash_landings_at_prepare && *hooks_.benchmark_hash_landings_at_prepare) {
    return Status::OK();
  }
  // Runs of one parameter that touch are hashed as one range (rows of a box, adjacent shards).
  auto runs = landing.runs;
  std::sort(runs.begin(), runs.end());
  for (size_t i = 0; i < runs.size();) {
    const uint32_t param = runs[i].first;
    const int64_t begin = runs[i].second.first;
    int64_t end = begin + runs[i].second.second;
    for (++i; i < runs.size() && runs[i].first == param && runs[i].second.first == end; ++i) {
      end += runs[i].second.second;
    }
    const size_t esz = DTypeSize(manifest_->params()[param].dtype);
    const size_t off = static_cast<size_t>(begin) * esz;
    const size_t len = static_cast<size_t>(end - begin) * esz;
    if (host_memory_ && data_pool_ && background) {
      const auto [first_chunk, end_chunk] = hash_[param].CoveredChunks(off, len);
      // Threads asked for landings take every landing; the data path's threads take those of
      // at least 1 MiB of whole chunks (a smaller one is hashed here, hot in cache, for less
      // than a wake-up costs).
      constexpr size_t kBackgroundChunks = (size_t{1} << 20) / kHashChunkBytes;
      const bool large = end_chunk - first_chunk >= kBackgroundChunks;
      if (first_chunk == end_chunk) continue;
      if (large || options_.landing_hash_threads > 0) {
        data_pool_->Submit(param, memory_->Param(param), first_chunk, end_chunk - first_chunk);
        continue;
      }
    }
    WTX_RETURN_IF_ERROR(HashWritten(param, off, len));
  }
  return Status::OK();
}

void ParticipantImpl::DrainLandingHashes() {
  if (!data_pool_) return;
  for (const ChunkHashPool::Done& d : data_pool_->Drain()) {
    for (size_t k = 0; k < d.digests.size(); ++k) {
      hash_[d.tag].SetChunkDigest(d.first + k, d.digests[k]);
    }
  }
}

}  // namespace wtx::participant_internal
