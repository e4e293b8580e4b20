// landed_update_vs_memcpy and verify_all_vs_xxh3 (tools/bench/bench.h).
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "src/util/xxh3.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_util.h"
#include "wtx/content_hash.h"
#include "wtx/coordinator.h"
#include "wtx/hf_manifest.h"
#include "wtx/inproc_transport.h"
#include "wtx/live_memory.h"
#include "wtx/participant.h"

namespace wtx::bench {

using nlohmann::json;

Result<json> BenchLanding(const BenchOptions& o) {
  WTX_ASSIGN_OR_RETURN(manifest, Tp1Bf16Manifest(o));
  const auto& params = manifest->params();
  const size_t total = static_cast<size_t>(manifest->TotalBytes());
  Progress(o, "landing: " + o.model + ": " + std::to_string(params.size()) + " params, " +
                  std::to_string(total) + " bytes");
  Buffer src(total, /*zeroed=*/false);
  if (!src.data()) return Status::IOError("cannot allocate " + std::to_string(total) + " bytes");
  FillPattern(src.data(), total, 13);

  WTX_ASSIGN_OR_RETURN(dir, ScratchDir::Make(o.scratch_dir, "landing"));
  bool hash_at_prepare = false;  // the hook: Landed leaves all hashing to prepare
  OneRankOptions ro;
  ro.hooks.benchmark_hash_landings_at_prepare = &hash_at_prepare;
  ro.threads = 1;  // everything in the engine's thread
  WTX_ASSIGN_OR_RETURN(rank, OpenOneRank(dir.path(), manifest, ro));
  // The same live buffers under a second participant (own journal) with the default data path
  // on `threads` threads: Landed hands a large landing's chunks to the data-path threads and
  // returns at once.
  std::vector<std::span<uint8_t>> spans;
  for (size_t i = 0; i < params.size(); ++i) {
    spans.push_back(rank.participant->memory().Param(static_cast<uint32_t>(i)));
  }
  WTX_ASSIGN_OR_RETURN(borrowed, NewBorrowedLiveMemory(*manifest, spans));
  OneRankOptions tro;
  tro.memory = std::shared_ptr<LiveMemory>(std::move(borrowed));
  const int threads = ResolvedThreads(o);
  tro.threads = threads;
  WTX_ASSIGN_OR_RETURN(threaded_dir, ScratchDir::Make(o.scratch_dir, "landing-threaded"));
  WTX_ASSIGN_OR_RETURN(threaded, OpenOneRank(threaded_dir.path(), manifest, tro));
  Participant* participant = rank.participant.get();

  // Where each parameter's new bytes come from (the engine's receive buffer).
  std::vector<const uint8_t*> from(params.size());
  std::vector<uint8_t*> live(params.size());
  for (size_t i = 0, off = 0; i < params.size(); ++i) {
    from[i] = src.data() + off;
    live[i] = participant->memory().Param(static_cast<uint32_t>(i)).data();
    off += static_cast<size_t>(params[i].num_bytes());
  }

  // The engine's buckets (as a bucketed weight sync sends them): parameters in manifest order,
  // packed whole while they fit; one larger than a bucket goes in row slices of at most a
  // bucket (one row at least), each slice its own bucket.
  struct Piece {
    uint32_t param;
    LandingRegion region;
    size_t offset;  // bytes into the parameter
    size_t bytes;
  };
  const size_t cap = o.landing_bucket_bytes;
  std::vector<std::vector<Piece>> buckets;
  size_t used = 0;
  for (uint32_t i = 0; i < params.size(); ++i) {
    const ParamSpec& p = params[i];
    const size_t nb = static_cast<size_t>(p.num_bytes());
    const bool split = cap > 0 && nb > cap && !p.shape.empty() && p.shape[0] > 1;
    if (!split) {
      if (buckets.empty() || cap == 0 || used + nb > cap) {
        buckets.emplace_back();
        used = 0;
      }
      buckets.back().push_back({i, {p.name, "", "", std::nullopt, std::nullopt}, 0, nb});
      used += nb;
      continue;
    }
    const int64_t rows = p.shape[0];
    const size_t row_bytes = nb / static_cast<size_t>(rows);
    const int64_t per = std::max<int64_t>(1, static_cast<int64_t>(cap / row_bytes));
    for (int64_t r = 0; r < rows; r += per) {
      const int64_t e = std::min(rows, r + per);
      Box box = WholeBox(p.shape);
      box[0] = {r, e};
      buckets.push_back({{i,
                          {p.name, "", "", box, std::nullopt},
                          static_cast<size_t>(r) * row_bytes,
                          static_cast<size_t>(e - r) * row_bytes}});
    }
    used = cap;  // the next parameter opens a new bucket
  }
  size_t pieces = 0;
  for (const auto& b : buckets) pieces += b.size();

  // An in-place landed full update: per bucket, Reserve each piece, the engine's own copy
  // (one memcpy per piece, as the transfer of the bucket), Landed each piece.
  int tx_counter = 0;
  auto run_landed = [&](OneRank& on, double* seconds, double* commit_seconds) -> Status {
    Participant* lander = on.participant.get();
    Coordinator* coord = on.coordinator.get();
    BeginRequest req;
    req.tx = "landed-" + std::to_string(++tx_counter);
    req.kind = TxKind::kFull;
    const double t0 = NowSeconds();
    BeginOutcome b = coord->Begin(req);
    if (!b.status.ok()) return b.status;
    std::vector<uint8_t*> to;
    for (const auto& bucket : buckets) {
      to.clear();
      for (const Piece& piece : bucket) {
        auto res = lander->Reserve(piece.region);
        if (!res.ok()) return res.status();
        to.push_back(static_cast<uint8_t*>(res->front().host) + piece.offset);
      }
      for (size_t k = 0; k < bucket.size(); ++k) {
        std::memcpy(to[k], from[bucket[k].param] + bucket[k].offset, bucket[k].bytes);
      }
      for (const Piece& piece : bucket) WTX_RETURN_IF_ERROR(lander->Landed(piece.region));
    }
    if (!manifest->derived().empty()) {
      auto r = lander->Refresh("*");
      if (!r.ok()) return r.status();
    }
    const double t1 = NowSeconds();
    CommitOutcome c = coord->Commit(req.tx);
    if (!c.status.ok()) return c.status;
    if (c.decision != Decision::kCommit) {
      return Status::Error(ErrorCode::kVoteNo, "landed transaction did not commit");
    }
    const double t2 = NowSeconds();
    *seconds = t2 - t0;
    *commit_seconds = t2 - t1;
    return Status::OK();
  };
  // The baseline: the very same copies, bucket by bucket, without wtx.
  auto run_memcpy = [&]() {
    const double t0 = NowSeconds();
    for (const auto& bucket : buckets) {
      for (const Piece& piece : bucket) {
        std::memcpy(live[piece.param] + piece.offset, from[piece.param] + piece.offset,
                    piece.bytes);
      }
    }
    return NowSeconds() - t0;
  };
  // The limit of any copy-then-hash landing, without wtx: the same memcpy calls, and XXH3 of
  // the same 64 KiB chunks once each bucket is copied, by a second thread that follows the
  // copying one bucket by bucket (newest chunk first, as the data-path threads take them), or
  // by the copying thread itself (`one_thread`). Landed bytes must be read once more after the
  // engine's copy to be hashed; on this path that read is what the memory has to give.
  auto hash_piece_chunks = [&](const Piece& piece, uint64_t* sink) {
    const uint8_t* base = live[piece.param] + piece.offset;
    for (size_t at = piece.bytes; at > 0;) {
      const size_t n = at % kHashChunkBytes ? at % kHashChunkBytes : kHashChunkBytes;
      at -= n;
      *sink += Xxh3_64(base + at, n);
    }
  };
  auto run_copy_then_hash = [&](bool one_thread) {
    std::atomic<size_t> copied{0};
    uint64_t hashed = 0;
    const double t0 = NowSeconds();
    std::thread hasher;
    if (!one_thread) {
      hasher = std::thread([&] {
        for (size_t b = 0; b < buckets.size(); ++b) {
          while (copied.load(std::memory_order_acquire) <= b) std::this_thread::yield();
          for (auto it = buckets[b].rbegin(); it != buckets[b].rend(); ++it) {
            hash_piece_chunks(*it, &hashed);
          }
        }
      });
    }
    for (size_t b = 0; b < buckets.size(); ++b) {
      for (const Piece& piece : buckets[b]) {
        std::memcpy(live[piece.param] + piece.offset, from[piece.param] + piece.offset,
                    piece.bytes);
      }
      if (one_thread) {
        for (const Piece& piece : buckets[b]) hash_piece_chunks(piece, &hashed);
      }
      copied.store(b + 1, std::memory_order_release);
    }
    if (hasher.joinable()) hasher.join();
    volatile uint64_t keep = hashed;  // the hashes are computed, not optimized away
    (void)keep;
    return NowSeconds() - t0;
  };
  // And one memcpy per whole parameter (large ones then take glibc's non-temporal path).
  auto run_memcpy_params = [&]() {
    const double t0 = NowSeconds();
    for (size_t i = 0; i < params.size(); ++i) {
      std::memcpy(live[i], from[i], static_cast<size_t>(params[i].num_bytes()));
    }
    return NowSeconds() - t0;
  };
  // Participant::Verify() on the clean rank against one XXH3_64bits pass over the same bytes.
  auto run_verify = [&](double* seconds) -> Status {
    const double t0 = NowSeconds();
    auto rep = participant->Verify();
    if (!rep.ok()) return rep.status();
    if (!rep->ok) return Status::Corruption("verify found differences: " + rep->message);
    *seconds = NowSeconds() - t0;
    return Status::OK();
  };
  volatile uint64_t sink = 0;
  auto run_xxh3 = [&]() {
    const double t0 = NowSeconds();
    for (size_t i = 0; i < params.size(); ++i) {
      sink = sink + Xxh3_64(live[i], static_cast<size_t>(params[i].num_bytes()));
    }
    return NowSeconds() - t0;
  };

  double warm = 0, warm_commit = 0;
  WTX_RETURN_IF_ERROR(run_landed(rank, &warm, &warm_commit));
  WTX_RETURN_IF_ERROR(run_landed(threaded, &warm, &warm_commit));
  WTX_RETURN_IF_ERROR(run_landed(rank, &warm, &warm_commit));  // rank is clean for Verify
  run_memcpy();
  run_xxh3();
  const int rounds = o.quick ? 3 : 7;
  std::vector<double> t_landed, t_commit, t_prepare_hash, t_prepare_hash_commit, t_memcpy,
      t_memcpy_params, t_verify, t_xxh3, t_threaded, t_threaded_commit;
  std::vector<double> t_limit, t_limit_one;
  constexpr int kKinds = 9;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < kKinds; ++k) {
      double s = 0, sc = 0;
      switch ((r + k) % kKinds) {
        case 0:
          WTX_RETURN_IF_ERROR(run_landed(rank, &s, &sc));
          t_landed.push_back(s);
          t_commit.push_back(sc);
          break;
        case 1:
          // The bytes memcpy writes are those the last landed update committed: the rank stays
          // clean for the verifier.
          t_memcpy.push_back(run_memcpy());
          break;
        case 2:
          WTX_RETURN_IF_ERROR(run_verify(&s));
          t_verify.push_back(s);
          break;
        case 3:
          t_xxh3.push_back(run_xxh3());
          break;
        case 4:
          hash_at_prepare = true;
          {
            Status st = run_landed(rank, &s, &sc);
            hash_at_prepare = false;
            WTX_RETURN_IF_ERROR(st);
          }
          t_prepare_hash.push_back(s);
          t_prepare_hash_commit.push_back(sc);
          break;
        case 5:
          t_memcpy_params.push_back(run_memcpy_params());
          break;
        case 6:
          // Same bytes as the other rank commits, so `rank` stays clean for its Verify.
          WTX_RETURN_IF_ERROR(run_landed(threaded, &s, &sc));
          t_threaded.push_back(s);
          t_threaded_commit.push_back(sc);
          break;
        case 7:
          t_limit.push_back(run_copy_then_hash(/*one_thread=*/false));
          break;
        case 8:
          t_limit_one.push_back(run_copy_then_hash(/*one_thread=*/true));
          break;
      }
    }
    Progress(o, "landing: round " + std::to_string(r + 1) + "/" + std::to_string(rounds) +
                    ": landed, one thread " + std::to_string(t_landed.back() * 1e3) +
                    " ms (hashing at " + "prepare: " + std::to_string(t_prepare_hash.back() * 1e3) +
                    " ms, hasher " + "thread: " + std::to_string(t_threaded.back() * 1e3) +
                    " ms), memcpy " + std::to_string(t_memcpy.back() * 1e3) + " ms, verify " +
                    std::to_string(t_verify.back() * 1e3) + " ms, xxh3 " +
                    std::to_string(t_xxh3.back() * 1e3) + " ms");
  }
  // The committed version is the live bytes: a from-scratch hash agrees (both ranks).
  for (Participant* p : {participant, threaded.participant.get()}) {
    auto live_digest = p->RecomputeDigest();
    if (!live_digest.ok()) return live_digest.status();
    auto st = p->status();
    if (!st.digest || *st.digest != live_digest.value()) {
      return Status::Corruption("landed version does not match the live bytes: committed digest " +
                                st.digest.value_or("(none)") + ", recomputed " +
                                live_digest.value());
    }
  }
  const double tl = Median(t_landed), tm = Median(t_memcpy), tv = Median(t_verify),
               tx = Median(t_xxh3), tp = Median(t_prepare_hash), tmp = Median(t_memcpy_params);
  const double gb = static_cast<double>(total) / 1e9;
  const double tt = Median(t_threaded);
  return json{{"landed_update_vs_memcpy", tm / tt},
              {"landed_update_vs_memcpy_one_thread", tm / tl},
              {"hash_at_prepare_landed_update_vs_memcpy", tm / tp},
              {"verify_all_vs_xxh3", tv / tx},
              {"details",
               {{"model", o.model},
                {"bytes", total},
                {"params", params.size()},
                {"bucket_bytes", cap},
                {"buckets", buckets.size()},
                {"pieces", pieces},
                {"rounds", rounds},
                {"threads", threads},
                // The limit of copy-then-hash on this machine (see run_copy_then_hash).
                {"copy_then_hash_ms", Median(t_limit) * 1e3},
                {"copy_then_hash_vs_memcpy", tm / Median(t_limit)},
                {"copy_then_hash_one_thread_ms", Median(t_limit_one) * 1e3},
                {"copy_then_hash_one_thread_vs_memcpy", tm / Median(t_limit_one)},
                {"landed_update_vs_copy_then_hash", Median(t_limit) / tt},
                {"one_thread_landed_update_vs_copy_then_hash", Median(t_limit_one) / tl},
                {"landed_update_ms", tt * 1e3},
                {"landed_commit_ms", Median(t_threaded_commit) * 1e3},
                {"memcpy_ms", tm * 1e3},
                {"memcpy_gb_per_s", gb / tm},
                {"memcpy_whole_params_ms", tmp * 1e3},
                {"landed_update_vs_memcpy_whole_params", tmp / tt},
                {"one_thread_landed_update_ms", tl * 1e3},
                {"one_thread_commit_ms", Median(t_commit) * 1e3},
                {"hash_at_prepare_landed_update_ms", tp * 1e3},
                {"hash_at_prepare_commit_ms", Median(t_prepare_hash_commit) * 1e3},
                {"verify_all_ms", tv * 1e3},
                {"verify_all_gb_per_s", gb / tv},
                {"xxh3_ms", tx * 1e3},
                {"xxh3_gb_per_s", gb / tx}}}};
}

}  // namespace wtx::bench
