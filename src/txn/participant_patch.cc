// ParticipantImpl (participant_impl.h): delta patches. Patch stages device-resident indices and
// values on the host; PatchLocked checks a part (source, part numbering, overlaps with landings
// and earlier parts) and scatters its values into the shards the source feeds.
#include "src/txn/participant_impl.h"

#include <algorithm>

#include "src/util/checked_math.h"
#include "wtx/limits.h"

namespace wtx::participant_internal {

Status ParticipantImpl::Patch(const PatchRequest& req) {
  MetricsScope metrics_scope(this, metrics::RankPhase::kWrite);
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckWritable());
  WTX_RETURN_IF_ERROR(CheckIdentityLocked(manifest_->ParamsOfSource(req.source)));
  const bool dev_idx = req.indices_location == BufferLocation::kDevice;
  const bool dev_val = req.values_location == BufferLocation::kDevice;
  if (!dev_idx && !dev_val) return PatchLocked(req);
  if (host_memory_) {
    return Status::InvalidArgument("patch of '" + req.source +
                                   "': index/value arrays in device "
                                   "memory need device live memory (this rank's live bytes are "
                                   "host memory)");
  }
  // The checks (range, duplicates, source-to-live translation) run on the host: bring the
  // device arrays over once, then patch as from host memory (the scatter goes back in one
  // kernel launch per parameter).
  PatchRequest host = req;
  std::vector<int64_t> indices;
  std::string values;
  if (dev_idx) {
    indices.resize(req.indices.size());
    Status st = memory_->CopyDeviceToHost(req.indices.data(), indices.data(),
                                          indices.size() * sizeof(int64_t));
    if (!st.ok()) return MemoryFailed(st);
    host.indices = indices;
  }
  if (dev_val && req.values != nullptr) {
    values.resize(req.value_bytes);
    Status st = memory_->CopyDeviceToHost(req.values, values.data(), values.size());
    if (!st.ok()) return MemoryFailed(st);
    host.values = values.data();
  }
  host.indices_location = host.values_location = BufferLocation::kHost;
  return PatchLocked(host);
}

Status ParticipantImpl::CheckPatchPiece(const PatchRequest& req, const PatchState& ps,
                                        const std::vector<ShardRef>& refs) const {
  const Box& box = *req.source_box;
  const std::string where = "patch of '" + req.source + "' piece " + BoxToString(box);
  if (req.part != 0 || req.parts != 1) {
    return Err(ErrorCode::kBadWrite, where + ": a patch by piece has no parts (part " +
                                         std::to_string(req.part) + " of " +
                                         std::to_string(req.parts) + ")");
  }
  const auto& params = manifest_->params();
  const Shape& shape = params[refs[0].param].shards[refs[0].shard].source_shape;
  WTX_RETURN_IF_ERROR(CheckSourceBox(box, shape, where));
  // Every index inside the piece: a sender patches only what it holds.
  const std::vector<int64_t> strides = Strides(shape);
  for (int64_t index : req.indices) {
    if (index < 0 || index >= NumElements(shape)) continue;  // named by the range check
    int64_t rem = index;
    for (size_t d = 0; d < shape.size(); ++d) {
      const int64_t c = rem / strides[d];
      rem %= strides[d];
      if (c < box[d].begin || c >= box[d].end) {
        return Err(ErrorCode::kOutOfRange,
                   where + ": index " + std::to_string(index) + " lies outside the piece");
      }
    }
  }
  for (const Box& earlier : ps.boxes) {
    for (const ShardRef& ref : refs) {
      const Box both =
          Intersect(Intersect(earlier, box), params[ref.param].shards[ref.shard].source_box);
      if (!BoxIsEmpty(both)) {
        return Err(ErrorCode::kDuplicateWrite,
                   where + " overlaps the piece " + BoxToString(earlier) +
                       " patched earlier in this transaction (elements " + BoxToString(both) +
                       " held by rank " + Rank() + ")");
      }
    }
  }
  return Status::OK();
}

Status ParticipantImpl::PatchLocked(const PatchRequest& req) {
  ActiveTx& tx = *active_;
  const std::string where = "patch of '" + req.source + "' part [" + std::to_string(req.part) +
                            ", " + std::to_string(req.parts) + "]";
  if (tx.req.kind != TxKind::kDelta) {
    return Err(ErrorCode::kOutOfScope, where + ": transaction '" + tx.req.tx + "' is " +
                                           std::string(TxKindName(tx.req.kind)) +
                                           "; patches belong to delta transactions");
  }
  if (!tx.sources.count(req.source)) {
    return Err(ErrorCode::kOutOfScope,
               where + ": source not declared by transaction '" + tx.req.tx + "'");
  }
  if (req.parts < 1 || req.part < 0 || req.part >= req.parts) {
    return Err(ErrorCode::kBadWrite, where + ": part must satisfy 0 <= k < n");
  }
  if (req.parts > kMaxPatchParts) {
    return Err(ErrorCode::kBadWrite, where + ": parts n = " + std::to_string(req.parts) +
                                         " exceeds the limit of " + std::to_string(kMaxPatchParts));
  }
  for (const auto& [key, landing] : tx.landings) {
    if (landing.source == req.source) {
      return Err(
          ErrorCode::kDuplicateWrite,
          where + ": the source is landed in place by this transaction (" + landing.name + ")");
    }
  }
  const auto& refs = manifest_->ShardsOfSource(req.source);
  if (refs.empty()) return Status::OK();  // this rank holds none of the source
  for (const ShardRef& ref : refs) {
    const ParamSpec& p = manifest_->params()[ref.param];
    if (p.served) return Err(ErrorCode::kBadWrite, where + ": " + ProcessedRefusal(p));
  }
  // Looked up, not inserted: a refused patch must leave no trace in the part accounting.
  static const PatchState kNoParts;
  auto existing = tx.patches.find(req.source);
  const PatchState& ps = existing == tx.patches.end() ? kNoParts : existing->second;
  const bool by_piece = req.source_box.has_value();
  if ((by_piece && ps.parts != 0) || (!by_piece && ps.by_piece)) {
    return Err(ErrorCode::kBadWrite, where + ": the source was patched " +
                                         (by_piece ? "by parts" : "by piece") +
                                         " earlier in this transaction; parts and pieces do not "
                                         "mix");
  }
  if (by_piece) {
    WTX_RETURN_IF_ERROR(CheckPatchPiece(req, ps, refs));
    bool held = false;
    for (const ShardRef& ref : refs) {
      held = held ||
             Overlaps(manifest_->params()[ref.param].shards[ref.shard].source_box, *req.source_box);
    }
    if (!held) return Status::OK();  // a piece of the source this rank does not hold
  }
  if (ps.parts != 0 && ps.parts != req.parts) {
    return Err(ErrorCode::kBadWrite,
               where + ": earlier parts said n = " + std::to_string(ps.parts));
  }
  if (ps.parts != 0 && ps.got[req.part]) {
    return Err(ErrorCode::kDuplicateWrite, where + ": part already applied");
  }
  const Shape source_shape = manifest_->SourceShape(req.source).value();
  const int64_t source_elems = NumElements(source_shape);
  const DType dtype = manifest_->params()[refs[0].param].dtype;
  for (const ShardRef& ref : refs) {
    if (manifest_->params()[ref.param].dtype != dtype) {
      return Err(ErrorCode::kBadWrite, where + ": the source feeds parameters of different dtypes");
    }
  }
  const size_t esz = DTypeSize(dtype);
  size_t want_bytes = 0;
  if (!CheckedMul(req.indices.size(), esz, &want_bytes) || req.value_bytes != want_bytes ||
      (!req.indices.empty() && !req.values)) {
    return Err(ErrorCode::kBadWrite, where + ": " + std::to_string(req.value_bytes) +
                                         " value bytes for " + std::to_string(req.indices.size()) +
                                         " indices of " + std::string(DTypeName(dtype)));
  }
  std::vector<int64_t> sorted(req.indices.begin(), req.indices.end());
  std::sort(sorted.begin(), sorted.end());
  for (size_t i = 0; i < sorted.size(); ++i) {
    if (sorted[i] < 0 || sorted[i] >= source_elems) {
      return Err(ErrorCode::kOutOfRange, where + ": index " + std::to_string(sorted[i]) +
                                             " outside source of " + std::to_string(source_elems) +
                                             " elements");
    }
    if (i > 0 && sorted[i] == sorted[i - 1]) {
      return Err(ErrorCode::kDuplicateWrite,
                 where + ": index " + std::to_string(sorted[i]) + " appears twice");
    }
  }
  {
    std::vector<int64_t> common;
    std::set_intersection(sorted.begin(), sorted.end(), ps.applied.begin(), ps.applied.end(),
                          std::back_inserter(common));
    if (!common.empty()) {
      return Err(ErrorCode::kDuplicateWrite, where + ": index " + std::to_string(common[0]) +
                                                 " was patched by an earlier part");
    }
  }
  // Map source indices to live elements through each shard's translation.
  struct Target {
    uint32_t param;
    int64_t flat;
    size_t value;
  };
  std::vector<Target> targets;
  const std::vector<int64_t> sstrides = Strides(source_shape);
  std::vector<int64_t> coord(source_shape.size());
  for (size_t i = 0; i < req.indices.size(); ++i) {
    int64_t rem = req.indices[i];
    for (size_t d = 0; d < source_shape.size(); ++d) {
      coord[d] = rem / sstrides[d];
      rem %= sstrides[d];
    }
    for (const ShardRef& ref : refs) {
      const ParamSpec& p = manifest_->params()[ref.param];
      const ShardSpec& s = p.shards[ref.shard];
      bool inside = true;
      for (size_t d = 0; d < coord.size() && inside; ++d) {
        inside = coord[d] >= s.source_box[d].begin && coord[d] < s.source_box[d].end;
      }
      if (!inside) continue;
      if (s.packed) {
        return Err(ErrorCode::kLayoutMismatch,
                   where + ": index " + std::to_string(req.indices[i]) + " lands in shard '" +
                       s.id + "' of '" + p.name +
                       "' whose packed layout is not a translation of the source");
      }
      const std::vector<int64_t> lstrides = Strides(p.shape);
      const size_t extra = s.box.size() - s.source_box.size();
      int64_t flat = 0;
      for (size_t d = 0; d < extra; ++d) flat += s.box[d].begin * lstrides[d];
      for (size_t d = 0; d < coord.size(); ++d) {
        flat += (s.box[extra + d].begin + coord[d] - s.source_box[d].begin) * lstrides[extra + d];
      }
      targets.push_back({ref.param, flat, i});
    }
  }
  // Apply.
  const int64_t now = options_.env.clock->NowMicros();
  if (!targets.empty()) {
    if (!tx.wrote) tx.t_first_write = now;
    tx.t_last_write = now;
  }
  const uint8_t* values = static_cast<const uint8_t*>(req.values);
  std::set<uint32_t> params_touched;
  for (const Target& t : targets) params_touched.insert(t.param);
  // One scatter per parameter (one kernel launch on a device), saving before-images with it.
  for (uint32_t p : params_touched) {
    std::vector<int64_t> flat;
    std::string vals;
    for (const Target& t : targets) {
      if (t.param != p) continue;
      flat.push_back(t.flat);
      vals.append(reinterpret_cast<const char*>(values + t.value * esz), esz);
    }
    for (int64_t f : flat) WTX_RETURN_IF_ERROR(CheckBeforeDeclare(p, f * esz, esz));
    std::string before(tx.req.rollback ? vals.size() : 0, '\0');
    Status st =
        memory_->Scatter(p, flat, vals.data(), esz, tx.req.rollback ? before.data() : nullptr);
    if (!st.ok()) return MemoryFailed(st);
    for (size_t k = 0; k < flat.size(); ++k) {
      const size_t off = static_cast<size_t>(flat[k]) * esz;
      if (tx.req.rollback) tx.before.push_back({p, off, before.substr(k * esz, esz)});
      TouchBytes(p, off, esz);
    }
  }
  for (uint32_t p : params_touched) {
    NoteWritten(p);
    for (const ShardRef& ref : refs) {
      if (ref.param == p) tx.shards_touched.insert({ref.param, ref.shard});
    }
  }
  PatchState& acc = tx.patches[req.source];
  if (by_piece) {
    // A source patched by pieces counts as done at its first piece (its extent is unknown).
    if (acc.boxes.empty()) tx.sources_patched += 1;
    acc.by_piece = true;
    acc.boxes.push_back(*req.source_box);
  } else if (acc.parts == 0) {
    acc.parts = req.parts;
    acc.got.assign(req.parts, false);
  }
  if (!by_piece) {
    acc.got[req.part] = true;
    tx.sources_patched += 1.0 / acc.parts;
  }
  std::vector<int64_t> merged;
  std::merge(acc.applied.begin(), acc.applied.end(), sorted.begin(), sorted.end(),
             std::back_inserter(merged));
  acc.applied = std::move(merged);
  tx.patched += static_cast<int64_t>(targets.size());
  tx.elements += static_cast<int64_t>(targets.size());
  tx.bytes += static_cast<int64_t>(targets.size() * esz);
  tx.wrote = tx.wrote || !targets.empty();
  PatchRecord rec;
  rec.tx = tx.req.tx;
  rec.source = req.source;
  rec.part = req.part;
  rec.parts = req.parts;
  rec.indices = static_cast<int64_t>(req.indices.size());
  rec.applied = static_cast<int64_t>(targets.size());
  rec.source_box = req.source_box;
  rec.ts = now;
  pending_.emplace_back(std::move(rec));
  if (pending_.size() >= kWriteRecordBatch) return FlushPending();
  return Status::OK();
}

}  // namespace wtx::participant_internal
