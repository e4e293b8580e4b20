// Participant::WriteSource by source box: one piece of a source tensor (an M-to-N update, a
// trainer rank holding part of it) written into the intersection with every shard this rank
// holds, through the same Write as a full source (participant_write.cc).
#include <string>
#include <vector>

#include "src/txn/participant_impl.h"

namespace wtx::participant_internal {

namespace {

// `box` in coordinates relative to `origin` (the piece's first element).
Box Relative(const Box& box, const Box& origin) {
  Box out(box.size());
  for (size_t d = 0; d < box.size(); ++d) {
    out[d] = {box[d].begin - origin[d].begin, box[d].end - origin[d].begin};
  }
  return out;
}

}  // namespace

Box LiveBoxOfSourcePart(const ShardSpec& sh, const Box& part) {
  Box out = sh.box;
  const size_t lead = sh.box.size() - sh.source_box.size();
  for (size_t d = 0; d < part.size(); ++d) {
    const int64_t at = sh.box[lead + d].begin + (part[d].begin - sh.source_box[d].begin);
    out[lead + d] = {at, at + (part[d].end - part[d].begin)};
  }
  return out;
}

Status CheckSourceBox(const Box& box, const Shape& shape, const std::string& what) {
  if (box.size() != shape.size() || !BoxInsideShape(box, shape) || BoxIsEmpty(box)) {
    return Status(ErrorCode::kOutOfRange,
                  what + ": outside the source (shape " + ShapeToString(shape) + ")");
  }
  return Status::OK();
}

Result<int> ParticipantImpl::WriteSource(std::string_view source, const void* data, size_t bytes,
                                         const Box& source_box) {
  MetricsScope metrics_scope(this, metrics::RankPhase::kWrite);
  const std::vector<ShardRef>& refs = manifest_->ShardsOfSource(source);
  if (refs.empty()) return 0;
  const std::string where = "source '" + std::string(source) + "' piece " + BoxToString(source_box);
  const auto& params = manifest_->params();
  const ShardSpec& first = params[refs[0].param].shards[refs[0].shard];
  const Shape& shape = first.source_shape;
  const DType dtype = params[refs[0].param].dtype;
  WTX_RETURN_IF_ERROR(CheckSourceBox(source_box, shape, where));
  const size_t esz = DTypeSize(dtype);
  const size_t want = static_cast<size_t>(NumElements(source_box)) * esz;
  if (bytes != want || data == nullptr) {
    return Status(ErrorCode::kBadWrite, where + ": " + std::to_string(bytes) + " bytes, expected " +
                                            std::to_string(want) + " (" +
                                            std::string(DTypeName(dtype)) + ")");
  }
  const Shape piece_shape = BoxExtents(source_box);
  // The parts of the piece each shard holds; their boxes and layouts live until the write.
  std::vector<Box> held, rel;
  std::vector<WritePiece> pieces;
  std::vector<SourceLayout> layouts;
  std::vector<std::vector<uint8_t>> gathered;
  held.reserve(refs.size());
  rel.reserve(refs.size());
  pieces.reserve(refs.size());
  layouts.reserve(refs.size());
  gathered.reserve(refs.size());
  const auto* base = static_cast<const uint8_t*>(data);
  for (const ShardRef& r : refs) {
    const ParamSpec& p = params[r.param];
    const ShardSpec& sh = p.shards[r.shard];
    if (p.dtype != dtype) {
      return Status::InvalidArgument(where + " feeds parameters of different dtypes ('" +
                                     params[refs[0].param].name + "', '" + p.name +
                                     "'); write its shards one by one");
    }
    Box inter = Intersect(sh.source_box, source_box);
    if (BoxIsEmpty(inter)) continue;
    if (sh.packed && inter != sh.source_box) {
      return Status::InvalidArgument(where + " covers part of the packed shard '" + sh.id +
                                     "' of '" + p.name +
                                     "' (its live bytes are not a "
                                     "translation of the source: send its whole source box " +
                                     BoxToString(sh.source_box) + ")");
    }
    held.push_back(inter);
    rel.push_back(Relative(inter, source_box));
    WritePiece w;
    w.param = p.name;
    w.shard = sh.id;
    w.box = sh.packed ? sh.box : LiveBoxOfSourcePart(sh, inter);
    w.bytes = static_cast<size_t>(NumElements(inter)) * esz;
    SourceLayout layout;
    if (NumFlatRuns(piece_shape, rel.back()) == 1) {
      int64_t run_begin = 0;
      ForEachFlatRun(piece_shape, rel.back(), [&](int64_t b, int64_t) { run_begin = b; });
      w.data = base + static_cast<size_t>(run_begin) * esz;
    } else if (host_memory_) {
      w.data = base;
      layout.shape = &piece_shape;
      layout.box = &rel.back();
    } else {
      std::vector<uint8_t>& buf = gathered.emplace_back(w.bytes);
      CopyBoxOut(piece_shape, rel.back(), esz, base, buf.data());
      w.data = buf.data();
    }
    pieces.push_back(std::move(w));
    layouts.push_back(layout);
  }
  if (pieces.empty()) return 0;
  Status s;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (active_) {
      // Name the earlier piece this one overlaps where this rank holds the overlap.
      auto it = active_->source_pieces.find(source);
      if (it != active_->source_pieces.end()) {
        for (const Box& earlier : it->second) {
          for (const Box& h : held) {
            const Box both = Intersect(earlier, h);
            if (!BoxIsEmpty(both)) {
              return Status(ErrorCode::kDuplicateWrite,
                            where + " overlaps the piece " + BoxToString(earlier) +
                                " written earlier in this transaction (elements " +
                                BoxToString(both) + " held by rank " + Rank() + ")");
            }
          }
        }
      }
    }
    s = WriteLocked(pieces, layouts, /*declare=*/false);
    if (s.ok() && active_) active_->source_pieces[std::string(source)].push_back(source_box);
  }
  if (!s.ok()) return Status(s.code(), where + ": " + s.message());
  return static_cast<int>(pieces.size());
}

}  // namespace wtx::participant_internal
