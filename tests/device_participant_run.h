// One rank's full write, delta with before-images and abort, on a given LiveMemory: run on host
// memory and on a device backend (the real GPU in gpu_test, the kernels' CPU references in
// gpu_ref_test), the digests must be equal.
#pragma once

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "wtx/content_hash.h"
#include "wtx/live_memory.h"
#include "wtx/participant.h"

namespace wtx::testing {

// `n` pseudo-random bytes from `seed`.
inline std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t r = rng();
    std::memcpy(v.data() + i, &r, std::min<size_t>(8, n - i));
  }
  return v;
}

// One rank through a full write (1 MiB bf16, unaligned to the hash chunks) and a delta with
// before-images that is aborted, on `memory`; returns the committed digest, the digest after
// the delta's prepare, and the recomputed digest after the abort.
inline ManifestPtr DeltaRollbackManifest() {
  return ParseManifest(nlohmann::json::parse(R"({"params": [
      {"name": "w", "dtype": "bf16", "shape": [1021, 517]},
      {"name": "b", "dtype": "f32", "shape": [7]}]})"))
      .value();
}

inline std::vector<std::string> RunDeltaRollback(std::shared_ptr<LiveMemory> memory,
                                                 const std::string& dir) {
  auto manifest = DeltaRollbackManifest();
  ParticipantOptions o;
  o.journal_dir = dir;
  o.kernel_identity = "gpu-test";
  o.memory = std::move(memory);
  auto p = Participant::Open(std::move(o), manifest).value();
  std::vector<std::string> out;
  BeginRequest full;
  full.tx = "t1";
  REQUIRE(p->Begin(full).ok());
  for (uint32_t i = 0; i < manifest->params().size(); ++i) {
    const auto& ps = manifest->params()[i];
    auto bytes = RandomBytes(static_cast<size_t>(ps.num_bytes()), 11 + i);
    WritePiece w{ps.name, "", std::nullopt, bytes.data(), bytes.size()};
    REQUIRE(p->Write({&w, 1}).ok());
  }
  auto vote = p->Prepare("t1").value();
  REQUIRE(vote.yes);
  out.push_back(vote.digest);
  REQUIRE(p->Decide("t1", Decision::kCommit, CombineRankDigests(std::vector{vote.digest})).ok());
  BeginRequest delta;
  delta.tx = "t2";
  delta.kind = TxKind::kDelta;
  delta.base = CombineRankDigests(std::vector{vote.digest});
  delta.sources = {"w"};
  delta.rollback = true;
  REQUIRE(p->Begin(delta).ok());
  std::vector<int64_t> idx;
  for (int64_t k = 0; k < 100000; ++k) idx.push_back((k * 7919) % (1021 * 517));
  std::sort(idx.begin(), idx.end());
  idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
  auto values = RandomBytes(idx.size() * 2, 99);
  PatchRequest pr;
  pr.source = "w";
  pr.indices = idx;
  pr.values = values.data();
  pr.value_bytes = values.size();
  REQUIRE(p->Patch(pr).ok());
  auto v2 = p->Prepare("t2").value();
  REQUIRE(v2.yes);
  out.push_back(v2.digest);
  REQUIRE(p->Decide("t2", Decision::kAbort, "").ok());
  out.push_back(p->RecomputeDigest().value());
  return out;
}

}  // namespace wtx::testing
