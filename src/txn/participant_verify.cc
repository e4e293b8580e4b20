// ParticipantImpl (participant_impl.h): checking live bytes against what was declared.
// VerifyLiveLocked rehashes every chunk and compares it with the committed (or declared)
// digests; LogUndeclared journals what it found; LoadCommitted reads the committed chunk digests
// back from the journal; Verify (between transactions) and Reattach (after a restart) use them.
#include "src/txn/participant_impl.h"

#include <algorithm>

namespace wtx::participant_internal {

Status ParticipantImpl::VerifyLiveLocked(const ActiveTx* tx,
                                         const std::vector<std::vector<uint64_t>>* committed,
                                         VerifyReport* report) {
  DrainLandingHashes();
  const auto& params = manifest_->params();
  report->comparable = committed != nullptr;
  std::vector<uint64_t> fresh;
  size_t changed_after_declared = 0;
  for (uint32_t i = 0; i < params.size(); ++i) {
    const size_t bytes = memory_->Size(i);
    const size_t n = hash_[i].num_chunks();
    fresh.resize(n);
    if (host_memory_) {
      const uint8_t* base = memory_->Param(i).data();
      for (size_t c = 0; c < n; ++c) {
        const size_t off = c * kHashChunkBytes;
        fresh[c] = ChunkDigest(base + off, std::min(kHashChunkBytes, bytes - off));
      }
    } else if (n > 0) {
      Status s = memory_->ChunkDigests(i, 0, n, fresh.data());
      if (!s.ok()) return MemoryFailed(s);
    }
    report->chunks_checked += n;
    const std::vector<bool>* declared =
        tx && !tx->declared_chunks[i].empty() ? &tx->declared_chunks[i] : nullptr;
    bool param_differs = false;
    for (size_t c = 0; c < n; ++c) {
      const bool is_declared = declared && (*declared)[c];
      // Declared only in part: its undeclared bytes must be those from before the declaration.
      bool before = false;
      if (tx) {
        auto changed = tx->partly_declared.UndeclaredBytesChanged(*memory_, i, c, fresh[c]);
        if (!changed.ok()) return MemoryFailed(changed.status());
        before = changed.value();
      }
      // Declared and not touched since: its digest was taken when the write or landing was
      // declared complete, so the bytes must still be those.
      const bool settled = is_declared && !hash_[i].touched(c);
      const bool differs =
          before || (settled ? hash_[i].chunk_digests()[c] != fresh[c]
                             : committed && !is_declared &&
                                   ((*committed)[i].size() != n || (*committed)[i][c] != fresh[c]));
      hash_[i].SetChunkDigest(c, fresh[c]);
      if (!differs) continue;
      ++report->chunks_differing;
      if (settled && !before) ++changed_after_declared;
      param_differs = true;
      auto& diffs = report->differences;
      if (!diffs.empty() && diffs.back().param == params[i].name &&
          diffs.back().first_chunk + diffs.back().chunks == c) {
        ++diffs.back().chunks;
      } else {
        diffs.push_back({params[i].name, c, 1, {}});
      }
    }
    if (param_differs) report->params.push_back(params[i].name);
  }
  // Boxes: the elements each run of differing chunks holds (bounding box of the flat range).
  for (auto& d : report->differences) {
    const ParamSpec& p = params[*manifest_->FindParam(d.param)];
    // In the live tensor's coordinates: a processed parameter's served form.
    const DType dtype = p.served ? p.served->dtype : p.dtype;
    const Shape& shape = p.served ? p.served->shape : p.shape;
    const int64_t esz = static_cast<int64_t>(DTypeSize(dtype));
    const int64_t b = static_cast<int64_t>(d.first_chunk * kHashChunkBytes) / esz;
    const int64_t e = std::min<int64_t>(
        NumElements(shape),
        (static_cast<int64_t>((d.first_chunk + d.chunks) * kHashChunkBytes) + esz - 1) / esz);
    std::vector<Box> boxes;
    if (e > b) FlatIntervalToBoxes(shape, b, e, &boxes);
    if (!boxes.empty()) {
      Box bb = boxes.front();
      for (const Box& x : boxes) {
        for (size_t k = 0; k < bb.size(); ++k) {
          bb[k].begin = std::min(bb[k].begin, x[k].begin);
          bb[k].end = std::max(bb[k].end, x[k].end);
        }
      }
      d.box = std::move(bb);
    }
    report->boxes.push_back(d.box);
  }
  report->ok = report->comparable && report->chunks_differing == 0;
  if (report->chunks_differing == 0 && !report->comparable) {
    report->message = "rank " + Rank() + ": no committed chunk digests to compare with";
  } else if (report->ok) {
    report->message = "rank " + Rank() + ": " + std::to_string(report->chunks_checked) +
                      " chunk(s) match the committed version";
  } else {
    std::string m = "rank " + Rank() + ": live bytes changed without a declared write in " +
                    std::to_string(report->chunks_differing) + " chunk(s) of";
    size_t shown = 0;
    for (const auto& d : report->differences) {
      if (shown++ == 8) {
        m += " ...";
        break;
      }
      m += " '" + d.param + "' chunks [" + std::to_string(d.first_chunk) + ", " +
           std::to_string(d.first_chunk + d.chunks) + ") box " + BoxToString(d.box) + ";";
    }
    if (m.back() == ';') m.pop_back();
    if (changed_after_declared > 0) {
      m += " (" + std::to_string(changed_after_declared) +
           " of them after this transaction declared them written or landed)";
    }
    report->message = m;
  }
  return Status::OK();
}

Status ParticipantImpl::LogUndeclared(const VerifyReport& report) {
  // The record names every parameter; chunk runs are listed up to a bound (the count of
  // differing chunks is recorded whole), so a rank whose every other chunk changed cannot
  // write a record of millions of entries.
  constexpr size_t kMaxDifferencesRecorded = 4096;
  UndeclaredRecord rec;
  if (active_) rec.tx = active_->req.tx;
  rec.params = report.params;
  rec.chunks = static_cast<int64_t>(report.chunks_differing);
  for (size_t k = 0; k < report.differences.size() && k < kMaxDifferencesRecorded; ++k) {
    const auto& d = report.differences[k];
    rec.differences.push_back(UndeclaredDifference{d.param, static_cast<int64_t>(d.first_chunk),
                                                   static_cast<int64_t>(d.first_chunk + d.chunks)});
  }
  rec.ts = options_.env.clock->NowMicros();
  return Log(std::move(rec), true);  // synced: durably dirty before anyone is told
}

Status ParticipantImpl::LoadCommitted(std::optional<std::vector<std::vector<uint64_t>>>* chunks,
                                      std::string* rank_digest) {
  if (!state_.committed_tx) return Status::OK();
  const std::string committed = *state_.committed_tx;
  const auto& params = manifest_->params();
  Status bad;
  Status s = journal_->ForEachRecordRef([&](const RecordRef& r) -> Status {
    if (!r.json) return Status::OK();
    WTX_ASSIGN_OR_RETURN(type, ParticipantRecordTypeOf(*r.json));
    if (type != ParticipantRecordType::kPrepared && type != ParticipantRecordType::kChunks) {
      return Status::OK();
    }
    WTX_ASSIGN_OR_RETURN(rec, DecodeParticipantRecord(*r.json));
    if (const auto* p = std::get_if<PreparedRecord>(&rec)) {
      // The live bytes are the served form: the served digest where it differs.
      if (p->tx == committed && p->yes && p->digest) {
        *rank_digest = p->served_digest.value_or(*p->digest);
      }
    } else if (const auto* c = std::get_if<ChunksRecord>(&rec); c && c->tx == committed) {
      if (c->counts.size() != params.size()) {
        bad =
            Status::Corruption("CHUNKS record of '" + committed + "' does not match the manifest");
        return Status::OK();
      }
      const auto& bytes = c->digests;
      std::vector<std::vector<uint64_t>> out(params.size());
      size_t pos = 0;
      for (size_t i = 0; i < params.size(); ++i) {
        const size_t n = static_cast<size_t>(c->counts[i]);
        if (n != hash_[i].num_chunks() || bytes.size() - pos < n * 8) {
          bad = Status::Corruption("CHUNKS record of '" + committed + "': '" + params[i].name +
                                   "' has the wrong number of chunk digests");
          return Status::OK();
        }
        out[i].resize(n);
        for (size_t c = 0; c < n; ++c, pos += 8) {
          uint64_t v = 0;
          for (int b = 7; b >= 0; --b) v = (v << 8) | bytes[pos + b];
          out[i][c] = v;
        }
      }
      *chunks = std::move(out);
      // Processed parameters' checkpoint digests, which the live bytes do not show.
      for (size_t k = 0; k < c->checkpoint_params.size(); ++k) {
        uint64_t v = 0;
        for (int b = 7; b >= 0; --b) v = (v << 8) | c->checkpoint_digests[k * 8 + b];
        checkpoint_digest_[static_cast<size_t>(c->checkpoint_params[k])] = v;
      }
      bad = Status::OK();
    }
    return Status::OK();
  });
  WTX_RETURN_IF_ERROR(s);
  return bad;
}

Result<VerifyReport> ParticipantImpl::Verify() {
  MetricsScope metrics_scope(this, metrics::RankPhase::kVerify);
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckAlive());
  if (active_) {
    return Err(ErrorCode::kTxActive, "rank " + Rank() + ": verify: transaction '" +
                                         active_->req.tx +
                                         "' is active; verify between "
                                         "transactions (or begin with verify all)");
  }
  WTX_RETURN_IF_ERROR(CheckIdentityLocked(all_params_));
  // After a rebind the bytes are the engine's new storage: proving them equal to the
  // committed version is exactly a reattach.
  if (rebound_ && !loaded_) return ReattachLocked();
  VerifyReport rep;
  std::string why;
  if (!state_.version) {
    why = "never committed";
  } else if (!loaded_) {
    why = "not loaded (after a restart: Reattach)";
  } else if (state_.dirty) {
    why = "dirty (its bytes are expected to differ from the committed version)";
  } else if (!committed_chunks_known_) {
    std::optional<std::vector<std::vector<uint64_t>>> chunks;
    std::string digest;
    WTX_RETURN_IF_ERROR(LoadCommitted(&chunks, &digest));
    if (chunks) {
      committed_chunks_ = std::move(*chunks);
      committed_chunks_known_ = true;
    } else {
      why = "no committed chunk digests stored (journal written by an older wtx)";
    }
  }
  WTX_RETURN_IF_ERROR(VerifyLiveLocked(nullptr, why.empty() ? &committed_chunks_ : nullptr, &rep));
  if (!why.empty()) {
    rep.message = "rank " + Rank() + ": not comparable: " + why;
    return rep;
  }
  if (!rep.ok) WTX_RETURN_IF_ERROR(LogUndeclared(rep));
  return rep;
}

Result<VerifyReport> ParticipantImpl::Reattach() {
  MetricsScope metrics_scope(this, metrics::RankPhase::kVerify);
  std::lock_guard<std::mutex> l(mu_);
  return ReattachLocked();
}

Result<VerifyReport> ParticipantImpl::ReattachLocked() {
  WTX_RETURN_IF_ERROR(CheckAlive());
  if (active_) {
    return Err(ErrorCode::kTxActive,
               "rank " + Rank() + ": reattach: transaction '" + active_->req.tx + "' is " +
                   (active_->prepared ? "in doubt; resolve it first" : "active"));
  }
  WTX_RETURN_IF_ERROR(CheckIdentityLocked(all_params_));
  VerifyReport rep;
  if (!state_.version) {
    rep.message = "rank " + Rank() + ": not comparable: never committed, nothing to reattach to";
    return rep;
  }
  std::optional<std::vector<std::vector<uint64_t>>> chunks;
  std::string committed_digest;
  WTX_RETURN_IF_ERROR(LoadCommitted(&chunks, &committed_digest));
  if (chunks) {
    WTX_RETURN_IF_ERROR(VerifyLiveLocked(nullptr, &*chunks, &rep));
  } else {
    // A journal from before CHUNKS records: the rank digest alone says match or not.
    WTX_RETURN_IF_ERROR(VerifyLiveLocked(nullptr, nullptr, &rep));
    if (committed_digest.empty()) {
      rep.message =
          "rank " + Rank() + ": not comparable: the committed digest is not in the journal";
      return rep;
    }
    auto live = DigestLocked();
    if (!live.ok()) return live.status();
    rep.comparable = true;
    rep.ok = live.value().served == committed_digest;
    rep.message = "rank " + Rank() +
                  (rep.ok ? ": live bytes match the committed digest"
                          : ": live bytes differ from the committed digest "
                            "(no chunk digests stored to say where)");
  }
  if (!rep.ok) {
    rep.message += "; stays loaded=false";
    return rep;
  }
  WTX_RETURN_IF_ERROR(
      Log(ReattachRecord{state_.committed_tx.value_or(""), static_cast<int64_t>(rep.chunks_checked),
                         options_.env.clock->NowMicros()},
          true));
  loaded_ = true;
  rebound_ = false;
  if (chunks) {
    committed_chunks_ = std::move(*chunks);
    committed_chunks_known_ = true;
  }
  return rep;
}

}  // namespace wtx::participant_internal
