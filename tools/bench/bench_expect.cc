// expected_version_vs_xxh3 (`wtx bench --only expect`): the trainer's expected version of a
// full update of the model at tp 2, computed source by source as a sender would
// (ExpectedVersionBuilder: each source read once, hashed where it lands in both ranks), against
// one XXH3 pass over the same source bytes: 1.0 means the expected version costs one read of
// what is sent, no second pass. The details also time the reference the builder replaced
// (each rank's live parameters assembled from the sources, then hashed: a zero fill, two copies
// and the hash), as `assembled_vs_xxh3`.
#include <algorithm>
#include <map>
#include <string>
#include <vector>

#include "src/util/xxh3.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_util.h"
#include "wtx/box.h"
#include "wtx/content_hash.h"
#include "wtx/expected_version.h"
#include "wtx/hf_manifest.h"

namespace wtx::bench {

namespace {

using nlohmann::json;

constexpr int kTp = 2;

// The reference: every live parameter of every rank assembled, then hashed.
uint64_t AssembledVersionDigest(const std::vector<const Manifest*>& ms,
                                const std::map<std::string, SourceTensor>& sources) {
  std::vector<std::string> ranks;
  std::vector<uint8_t> live, slice;
  for (const Manifest* m : ms) {
    std::vector<uint64_t> digests;
    for (const ParamSpec& p : m->params()) {
      const size_t esz = DTypeSize(p.dtype);
      live.assign(static_cast<size_t>(p.num_bytes()), 0);
      for (const ShardSpec& s : p.shards) {
        if (s.padding) continue;
        const SourceTensor& t = sources.at(s.source);
        slice.resize(static_cast<size_t>(NumElements(s.source_box)) * esz);
        CopyBoxOut(s.source_shape, s.source_box, esz, t.data, slice.data());
        CopyBoxIn(p.shape, s.box, esz, slice.data(), live.data());
      }
      digests.push_back(ParamDigest(live));
    }
    ranks.push_back(RankDigest(*m, digests));
  }
  const std::string version = CombineRankDigests(ranks);
  return Xxh3_64(version.data(), version.size());
}

// Every rank's manifest of options.model at `tp` (bf16).
Result<std::vector<ManifestPtr>> RankManifests(const BenchOptions& o, int tp) {
  std::vector<ManifestPtr> out;
  for (int r = 0; r < tp; ++r) {
    HfManifestOptions ho;
    ho.tp = tp;
    ho.rank = r;
    ho.dtype = DType::kBF16;
    WTX_ASSIGN_OR_RETURN(m, ManifestFromHfConfigFile(o.model, ho));
    out.push_back(std::move(m));
  }
  return out;
}

}  // namespace

Result<json> BenchExpect(const BenchOptions& o) {
  // At tp 2 (column slices: the general case); a model that cannot be split so (checked at tp 1
  // before any measurement) at tp 1.
  int tp = kTp;
  auto group = RankManifests(o, tp);
  if (!group.ok()) {
    tp = 1;
    group = RankManifests(o, tp);
    if (!group.ok()) return group.status();
  }
  const std::vector<ManifestPtr> owned = std::move(group).value();
  std::vector<const Manifest*> ms;
  for (const ManifestPtr& m : owned) ms.push_back(m.get());
  // Every source once, as the trainer holds it.
  std::map<std::string, SourceTensor> sources;
  size_t total = 0;
  for (const Manifest* m : ms) {
    for (const ParamSpec& p : m->params()) {
      for (const ShardSpec& s : p.shards) {
        if (s.padding || sources.count(s.source)) continue;
        const size_t bytes = static_cast<size_t>(NumElements(s.source_shape)) * DTypeSize(p.dtype);
        sources[s.source] = SourceTensor{s.source, s.source_shape, p.dtype, nullptr, bytes};
        total += bytes;
      }
    }
  }
  Buffer buf(total, /*zeroed=*/false);
  if (!buf.data()) return Status::IOError("cannot allocate " + std::to_string(total) + " bytes");
  FillPattern(buf.data(), total, 13);
  size_t off = 0;
  for (auto& [_, t] : sources) {
    t.data = buf.data() + off;
    off += t.bytes;
  }
  Progress(o, "expect: " + o.model + " tp " + std::to_string(tp) + ": " +
                  std::to_string(sources.size()) + " sources, " + std::to_string(total) + " bytes");

  std::string built_version;
  auto build = [&]() -> Status {
    WTX_ASSIGN_OR_RETURN(b, ExpectedVersionBuilder::Create(ms));
    for (const auto& [_, t] : sources) {
      auto fed = b->Add(t);
      if (!fed.ok()) return fed.status();
    }
    WTX_ASSIGN_OR_RETURN(e, b->Finish());
    built_version = e.version;
    return Status::OK();
  };
  volatile uint64_t sink = 0;
  const int rounds = o.quick ? 3 : 9;
  std::vector<double> t_built, t_raw, t_assembled;
  for (int r = 0; r <= rounds; ++r) {  // round 0 warms up; the order alternates
    for (int k = 0; k < 2; ++k) {
      const double t0 = NowSeconds();
      if ((r + k) % 2 == 0) {
        if (Status s = build(); !s.ok()) return s;
      } else {
        for (const auto& [_, t] : sources) sink = sink + Xxh3_64(t.data, t.bytes);
      }
      const double dt = NowSeconds() - t0;
      if (r > 0) ((r + k) % 2 == 0 ? t_built : t_raw).push_back(dt);
    }
  }
  // The reference, after the figure's rounds (its gigabyte of fresh buffers and page faults
  // would disturb the rounds beside it): a few runs for the details.
  for (int r = 0; r < (o.quick ? 1 : 3); ++r) {
    const double t0 = NowSeconds();
    sink = sink + AssembledVersionDigest(ms, sources);
    t_assembled.push_back(NowSeconds() - t0);
  }
  // The builder and the whole computation agree (they are one implementation); the reference
  // is checked too, so that the ratio compares equal work.
  WTX_ASSIGN_OR_RETURN(
      whole, ComputeExpectedVersion(ms, [&](std::string_view n) -> std::optional<SourceTensor> {
        auto it = sources.find(std::string(n));
        if (it == sources.end()) return std::nullopt;
        return it->second;
      }));
  if (whole.version != built_version) {
    return Status::Error(ErrorCode::kVersionMismatch,
                         "expect: the builder's version differs from the whole computation's");
  }
  const double tb = Median(t_built), tr = Median(t_raw), ta = Median(t_assembled);
  Progress(o, "expect: builder " + std::to_string(tb * 1e3) + " ms, XXH3 " +
                  std::to_string(tr * 1e3) + " ms, assembled " + std::to_string(ta * 1e3) + " ms");
  return json{{"expected_version_vs_xxh3", tr / tb},
              {"details",
               {{"bytes", total},
                {"sources", sources.size()},
                {"tp", tp},
                {"rounds", rounds},
                {"builder_ms", tb * 1e3},
                {"xxh3_ms", tr * 1e3},
                {"assembled_ms", ta * 1e3},
                {"assembled_vs_xxh3", tr / ta},
                {"builder_samples_ms", [&] {
                   json a = json::array();
                   for (double v : t_built) a.push_back(v * 1e3);
                   return a;
                 }()}}}};
}

}  // namespace wtx::bench
