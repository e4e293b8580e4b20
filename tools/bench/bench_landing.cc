// landed_update_vs_memcpy and verify_all_vs_xxh3 (tools/bench/bench.h).
#include <cstring>
#include <string>
#include <vector>

#include <xxhash.h>

#include "tools/bench/bench.h"
#include "tools/bench/bench_util.h"
#include "wtx/coordinator.h"
#include "wtx/hf_manifest.h"
#include "wtx/inproc_transport.h"
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
  WTX_ASSIGN_OR_RETURN(rank, OpenOneRank(dir.path(), manifest));
  Participant* participant = rank.participant.get();
  Coordinator* coordinator = rank.coordinator.get();

  // Where each parameter's new bytes come from (the engine's receive buffer).
  std::vector<const uint8_t*> from(params.size());
  std::vector<uint8_t*> live(params.size());
  for (size_t i = 0, off = 0; i < params.size(); ++i) {
    from[i] = src.data() + off;
    live[i] = participant->memory().Param(static_cast<uint32_t>(i)).data();
    off += static_cast<size_t>(params[i].num_bytes());
  }

  // An in-place landed full update: per parameter Reserve, the engine's own copy, Landed;
  // prepare rehashes every reserved chunk from live memory.
  int tx_counter = 0;
  auto run_landed = [&](BeginRequest req, double* seconds) -> Status {
    req.tx = "landed-" + std::to_string(++tx_counter);
    req.kind = TxKind::kFull;
    const double t0 = NowSeconds();
    BeginOutcome b = coordinator->Begin(req);
    if (!b.status.ok()) return b.status;
    for (size_t i = 0; i < params.size(); ++i) {
      LandingRegion region{params[i].name, "", "", std::nullopt};
      auto res = participant->Reserve(region);
      if (!res.ok()) return res.status();
      std::memcpy(res->front().host, from[i], res->front().param_bytes);
      WTX_RETURN_IF_ERROR(participant->Landed(region));
    }
    if (!manifest->derived().empty()) {
      auto r = participant->Refresh("*");
      if (!r.ok()) return r.status();
    }
    CommitOutcome c = coordinator->Commit(req.tx);
    if (!c.status.ok()) return c.status;
    if (c.decision != Decision::kCommit) {
      return Status::Error(ErrorCode::kVoteNo, "landed transaction did not commit");
    }
    *seconds = NowSeconds() - t0;
    return Status::OK();
  };
  auto run_memcpy = [&]() {
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
      sink = sink + XXH3_64bits(live[i], static_cast<size_t>(params[i].num_bytes()));
    }
    return NowSeconds() - t0;
  };

  double warm = 0;
  WTX_RETURN_IF_ERROR(run_landed({}, &warm));
  run_memcpy();
  run_xxh3();
  const int rounds = o.quick ? 3 : 7;
  std::vector<double> t_landed, t_memcpy, t_verify, t_xxh3;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 4; ++k) {
      double s = 0;
      switch ((r + k) % 4) {
        case 0:
          WTX_RETURN_IF_ERROR(run_landed({}, &s));
          t_landed.push_back(s);
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
      }
    }
    Progress(o, "landing: round " + std::to_string(r + 1) + "/" + std::to_string(rounds) +
                    ": landed " + std::to_string(t_landed.back() * 1e3) + " ms, memcpy " +
                    std::to_string(t_memcpy.back() * 1e3) + " ms, verify " +
                    std::to_string(t_verify.back() * 1e3) + " ms, xxh3 " +
                    std::to_string(t_xxh3.back() * 1e3) + " ms");
  }
  const double tl = Median(t_landed), tm = Median(t_memcpy), tv = Median(t_verify),
               tx = Median(t_xxh3);
  const double gb = static_cast<double>(total) / 1e9;
  return json{{"landed_update_vs_memcpy", tm / tl},
              {"verify_all_vs_xxh3", tv / tx},
              {"details",
               {{"model", o.model},
                {"bytes", total},
                {"params", params.size()},
                {"rounds", rounds},
                {"landed_update_ms", tl * 1e3},
                {"memcpy_ms", tm * 1e3},
                {"memcpy_gb_per_s", gb / tm},
                {"verify_all_ms", tv * 1e3},
                {"verify_all_gb_per_s", gb / tv},
                {"xxh3_ms", tx * 1e3},
                {"xxh3_gb_per_s", gb / tx}}}};
}

}  // namespace wtx::bench
