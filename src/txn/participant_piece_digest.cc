// ParticipantImpl (participant_impl.h): piece digests of an M-to-N update. ExpectPiece records
// a sender's digest of one piece; prepare (CheckPieceDigests) hashes the piece's bytes as they
// landed in live memory and votes no on any difference.
#include <algorithm>

#include "src/txn/participant_impl.h"
#include "wtx/piece_digest.h"

namespace wtx::participant_internal {

Status ParticipantImpl::ExpectPiece(const ExpectedPiece& piece) {
  MetricsScope metrics_scope(this, std::nullopt);
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckWritable());
  const std::string where = "source '" + piece.source + "' piece " + BoxToString(piece.source_box) +
                            " from " + piece.sender;
  if (!IsPieceDigest(piece.digest)) {
    return Status::InvalidArgument(where + ": digest '" + piece.digest +
                                   "' is not 32 lowercase hex digits");
  }
  const std::vector<ShardRef>& refs = manifest_->ShardsOfSource(piece.source);
  if (refs.empty()) {
    return Err(ErrorCode::kOutOfRange,
               where + ": rank " + Rank() + " holds none of this source (sent to the wrong rank)");
  }
  const auto& params = manifest_->params();
  for (const ShardRef& r : refs) {
    if (params[r.param].served) {
      return Err(ErrorCode::kBadWrite, where + ": " + ProcessedRefusal(params[r.param]) +
                                           " (the expected version covers its bytes)");
    }
  }
  const ShardSpec& first = params[refs[0].param].shards[refs[0].shard];
  WTX_RETURN_IF_ERROR(CheckSourceBox(piece.source_box, first.source_shape, where));
  const ShardRef* home = nullptr;
  std::string held;
  for (const ShardRef& r : refs) {
    const ShardSpec& sh = params[r.param].shards[r.shard];
    if (BoxContains(sh.source_box, piece.source_box)) {
      home = &r;
      break;
    }
    held += (held.empty() ? "" : ", ") + BoxToString(sh.source_box);
  }
  if (home == nullptr) {
    return Err(ErrorCode::kOutOfRange, where + ": not inside a shard of rank " + Rank() +
                                           " (it holds " + held + "; sent to the wrong rank)");
  }
  const ShardSpec& sh = params[home->param].shards[home->shard];
  if (sh.packed) {
    return Status::InvalidArgument(where + ": lands in the packed shard '" + sh.id + "' of '" +
                                   params[home->param].name +
                                   "', whose bytes are not the source's: no piece digest");
  }
  std::vector<size_t>& same_source = active_->expected_by_source[piece.source];
  for (size_t i : same_source) {
    const ExpectedPiece& e = active_->expected_pieces[i].piece;
    if (Overlaps(e.source_box, piece.source_box)) {
      return Err(ErrorCode::kDuplicateWrite, where + " overlaps the piece " +
                                                 BoxToString(e.source_box) + " from " + e.sender +
                                                 " expected earlier in this transaction");
    }
  }
  same_source.push_back(active_->expected_pieces.size());
  active_->expected_pieces.push_back({piece, home->param, home->shard});
  return Status::OK();
}

Status ParticipantImpl::CheckPieceDigests(Vote* vote) {
  ActiveTx& tx = *active_;
  if (tx.expected_pieces.empty()) return Status::OK();
  DrainLandingHashes();
  const auto& params = manifest_->params();
  std::vector<std::string> differ;
  std::vector<uint8_t> row;
  for (const ActiveTx::Expected& e : tx.expected_pieces) {
    const ParamSpec& p = params[e.param];
    const ShardSpec& sh = p.shards[e.shard];
    const size_t esz = DTypeSize(p.dtype);
    const Box live = LiveBoxOfSourcePart(sh, e.piece.source_box);
    PieceHasher h;
    Status read;
    const std::span<uint8_t> bytes = host_memory_ ? memory_->Param(e.param) : std::span<uint8_t>();
    ForEachFlatRun(p.shape, live, [&](int64_t b, int64_t len) {
      const size_t off = static_cast<size_t>(b) * esz, n = static_cast<size_t>(len) * esz;
      if (host_memory_) {
        h.Update(bytes.data() + off, n);
        return;
      }
      if (!read.ok()) return;
      row.resize(n);
      read = memory_->Load(e.param, off, row.data(), n);
      h.Update(row.data(), n);
    });
    if (!read.ok()) return MemoryFailed(read);
    const std::string landed = h.HexDigest();
    if (landed != e.piece.digest) {
      differ.push_back("source '" + e.piece.source + "' piece " + BoxToString(e.piece.source_box) +
                       " from " + e.piece.sender + ": landed digest " + landed + ", sender's " +
                       e.piece.digest);
    }
  }
  if (differ.empty()) return Status::OK();
  vote->errors.push_back(ErrorCode::kVersionMismatch);
  vote->error = vote->errors.front();
  vote->yes = false;
  std::string msg = vote->message.empty() ? "rank " + Rank() + ":" : vote->message;
  msg += " " + std::to_string(differ.size()) + " piece(s) differ from their sender's digest:";
  // Every difference is named up to a bound, so that a vote stays small.
  constexpr size_t kNamed = 8;
  for (size_t i = 0; i < std::min(differ.size(), kNamed); ++i) msg += " " + differ[i] + ";";
  if (differ.size() > kNamed) msg += " and " + std::to_string(differ.size() - kNamed) + " more;";
  vote->message = std::move(msg);
  return Status::OK();
}

}  // namespace wtx::participant_internal
