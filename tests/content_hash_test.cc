// Content hashing: the fused copy+hash path (CopyAndChunkDigest, ParamHashCache::CopyIn and the
// participant's Write) gives exactly the digests of the reference definition (ParamDigest over
// the same bytes), whatever the write order, chunking or alignment.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <map>
#include <new>
#include <random>
#include <vector>

#include <xxhash.h>

#include "src/memory/checkpoint_image_digest.h"
#include "src/memory/chunk_hash_pool.h"
#include "src/util/xxh3.h"
#include "tests/test_util.h"
#include "wtx/content_hash.h"

using namespace wtx;
using namespace wtx::testing;

namespace {

// n bytes of 0xAB, exactly sized (AddressSanitizer sees a store past the end), 64-byte aligned.
class AlignedBytes {
 public:
  explicit AlignedBytes(size_t n)
      : n_(n), p_(static_cast<uint8_t*>(::operator new (n ? n : 1, std::align_val_t{64}))) {
    std::memset(p_, 0xAB, n_);
  }
  ~AlignedBytes() { ::operator delete (p_, std::align_val_t{64}); }
  AlignedBytes(const AlignedBytes&) = delete;
  AlignedBytes& operator=(const AlignedBytes&) = delete;
  uint8_t* data() { return p_; }
  uint8_t* begin() { return p_; }
  uint8_t* end() { return p_ + n_; }

 private:
  size_t n_;
  uint8_t* p_;
};

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Splits [0, n) into consecutive intervals of random lengths (some tiny, some spanning
// several chunks, some chunk-aligned), returned in random order.
std::vector<std::pair<size_t, size_t>> RandomIntervals(size_t n, std::mt19937_64& rng) {
  std::vector<std::pair<size_t, size_t>> out;
  for (size_t pos = 0; pos < n;) {
    size_t len = 0;
    switch (rng() % 4) {
      case 0:
        len = 1 + rng() % 100;
        break;
      case 1:
        len = 1 + rng() % (3 * kHashChunkBytes);
        break;
      case 2:
        len = kHashChunkBytes - pos % kHashChunkBytes;
        break;  // up to a chunk boundary
      default:
        len = (1 + rng() % 3) * kHashChunkBytes;
        break;
    }
    len = std::min(len, n - pos);
    out.emplace_back(pos, len);
    pos += len;
  }
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

// Three multi-chunk parameters whose sizes are not multiples of the chunk, one of them fused
// from two shards, one three-dimensional, in two modules; a derived state on the fused one.
ManifestPtr ChunkyManifest() {
  return ParseManifest(nlohmann::json::parse(R"({
    "params": [
      {"name": "fused", "dtype": "bf16", "shape": [700, 100], "shards": [
        {"id": "a", "source": "a_proj", "source_shape": [333, 100], "box": [[0, 333], [0, 100]], "source_box": [[0, 333], [0, 100]]},
        {"id": "b", "source": "b_proj", "source_shape": [367, 100], "box": [[333, 700], [0, 100]], "source_box": [[0, 367], [0, 100]]}]},
      {"name": "wide", "dtype": "f32", "shape": [513, 129]},
      {"name": "cube", "dtype": "bf16", "shape": [4, 97, 211]},
      {"name": "tiny", "dtype": "f32", "shape": [3]}
    ],
    "modules": [{"name": "m1", "params": ["fused", "wide"]}, {"name": "m2", "params": ["cube", "tiny"]}],
    "derived": [{"name": "d", "sources": ["fused"], "phase": "post_load"}]
  })"))
      .value();
}

// A random partition of `shape` into boxes: bands of rows, each cut along the last dimension
// (and the middle one for 3-D) or left whole; returned in random order.
std::vector<Box> RandomBoxes(const Shape& shape, std::mt19937_64& rng) {
  auto cuts = [&](int64_t extent, bool whole) {
    std::vector<Range> r;
    for (int64_t b = 0; b < extent;) {
      int64_t len =
          whole ? extent : 1 + static_cast<int64_t>(rng() % static_cast<uint64_t>(extent));
      len = std::min(len, extent - b);
      r.push_back({b, b + len});
      b += len;
    }
    return r;
  };
  std::vector<Box> out;
  if (shape.size() == 1) {
    for (const Range& r : cuts(shape[0], rng() % 2)) out.push_back({r});
  } else {
    for (const Range& rows : cuts(shape[0], false)) {
      const bool whole = rng() % 2;
      std::vector<std::vector<Range>> rest;
      for (size_t d = 1; d < shape.size(); ++d) rest.push_back(cuts(shape[d], whole));
      if (shape.size() == 2) {
        for (const Range& c : rest[0]) out.push_back({rows, c});
      } else {
        for (const Range& m : rest[0]) {
          for (const Range& c : rest[1]) out.push_back({rows, m, c});
        }
      }
    }
  }
  std::shuffle(out.begin(), out.end(), rng);
  return out;
}

// The bytes of `box` from a whole-parameter buffer, row-major over the box.
std::vector<uint8_t> Gather(const ParamSpec& p, const std::vector<uint8_t>& whole, const Box& box) {
  const size_t esz = DTypeSize(p.dtype);
  std::vector<uint8_t> out;
  ForEachFlatRun(p.shape, box, [&](int64_t b, int64_t len) {
    out.insert(out.end(), whole.begin() + b * esz, whole.begin() + (b + len) * esz);
  });
  return out;
}

// One participant writing whole-parameter contents `weights` in random boxes and orders.
Status WriteRandomly(Participant& p, const std::vector<std::vector<uint8_t>>& weights,
                     std::mt19937_64& rng, const std::vector<uint32_t>& only = {}) {
  const Manifest& m = p.manifest();
  std::vector<std::pair<uint32_t, Box>> all;
  for (uint32_t i = 0; i < m.params().size(); ++i) {
    if (!only.empty() && std::find(only.begin(), only.end(), i) == only.end()) continue;
    for (Box& b : RandomBoxes(m.params()[i].shape, rng)) all.emplace_back(i, std::move(b));
  }
  std::shuffle(all.begin(), all.end(), rng);
  for (const auto& [i, box] : all) {
    const ParamSpec& ps = m.params()[i];
    auto bytes = Gather(ps, weights[i], box);
    WritePiece w{ps.name, "", box, bytes.data(), bytes.size()};
    WTX_RETURN_IF_ERROR(p.Write({&w, 1}));
  }
  return Status::OK();
}

std::vector<std::vector<uint8_t>> RandomWeights(const Manifest& m, uint64_t seed) {
  std::vector<std::vector<uint8_t>> w;
  for (const auto& p : m.params())
    w.push_back(RandomBytes(static_cast<size_t>(p.num_bytes()), seed++));
  return w;
}

// Begin `kind`, write, refresh, prepare, commit; returns the rank digest the vote carried.
std::string Commit(Participant& p, const BeginRequest& req,
                   const std::vector<std::vector<uint8_t>>& weights, std::mt19937_64& rng,
                   const std::vector<uint32_t>& only = {}) {
  REQUIRE(p.Begin(req).ok());
  REQUIRE(WriteRandomly(p, weights, rng, only).ok());
  REQUIRE(p.Refresh("*").ok());
  auto vote = p.Prepare(req.tx);
  REQUIRE(vote.ok());
  REQUIRE(vote->yes);
  REQUIRE(p.Decide(req.tx, Decision::kCommit,
                   CombineRankDigests(std::vector<std::string>{vote->digest}))
              .ok());
  return vote->digest;
}

}  // namespace

TEST_CASE("Xxh3StreamOverPiecesEqualsTheOneShotDigest") {
  std::mt19937_64 rng(3);
  std::vector<uint8_t> bytes(200000);
  for (auto& b : bytes) b = static_cast<uint8_t>(rng());
  Xxh3Stream stream;
  for (size_t total : {size_t{0}, size_t{1}, size_t{17}, size_t{240}, size_t{241}, size_t{4864},
                       size_t{65536}, bytes.size()}) {
    stream.Reset();
    for (size_t off = 0; off < total;) {
      const size_t piece = std::min<size_t>(total - off, 1 + rng() % 5000);
      stream.Update(bytes.data() + off, piece);
      off += piece;
    }
    CHECK(stream.Digest() == Xxh3_64(bytes.data(), total));
  }
}

TEST_CASE("CheckpointImageOfRunsInAnyOrderAndBatchesEqualsTheWholeImagesDigest") {
  // An image of 5 chunks and a bit, filled as a sender's sources fill it: batches of rows in
  // order (chunks filled whole by several runs are hashed from the runs), runs that cut chunks,
  // single runs out of order, and a gap left for DigestZeroFilled.
  std::mt19937_64 rng(5);
  const size_t n = 5 * kHashChunkBytes + 1234;
  std::vector<uint8_t> image(n);
  for (auto& b : image) b = static_cast<uint8_t>(rng());
  for (int trial = 0; trial < 20; ++trial) {
    INFO("trial " << trial);
    // Cut the image into runs of random sizes (some far larger than a chunk).
    std::vector<CheckpointImageDigest::Run> runs;
    for (size_t off = 0; off < n;) {
      const size_t len = std::min(n - off, trial % 2 ? 1 + rng() % 9000 : 1 + rng() % 150000);
      runs.push_back({off, image.data() + off, len});
      off += len;
    }
    // Group consecutive runs into batches; the batches come in a shuffled order, one batch's
    // runs may come one by one through Add, and with gap = true one run never comes.
    std::vector<std::vector<CheckpointImageDigest::Run>> batches;
    for (size_t i = 0; i < runs.size();) {
      const size_t m = std::min(runs.size() - i, 1 + rng() % 6);
      batches.emplace_back(runs.begin() + static_cast<ptrdiff_t>(i),
                           runs.begin() + static_cast<ptrdiff_t>(i + m));
      i += m;
    }
    std::shuffle(batches.begin(), batches.end(), rng);
    const bool gap = trial % 4 == 3 && batches.size() > 1;
    std::vector<uint8_t> expected = image;
    CheckpointImageDigest d(n);
    for (size_t b = 0; b < batches.size(); ++b) {
      if (gap && b == 0) {
        for (const auto& r : batches[b]) std::memset(expected.data() + r.offset, 0, r.len);
        continue;
      }
      if (b % 3 == 2) {
        for (const auto& r : batches[b]) d.Add(r.offset, r.data, r.len);
      } else {
        d.AddRuns(batches[b]);
      }
    }
    if (gap) {
      CHECK_FALSE(d.complete());
      CHECK(d.DigestZeroFilled() == ParamDigest(expected));
    } else {
      REQUIRE(d.complete());
      CHECK(d.pending_bytes() == 0);
      CHECK(d.Digest() == ParamDigest(image));
      CHECK(d.DigestZeroFilled() == ParamDigest(image));
    }
  }
}

TEST_CASE("CopyAndChunkDigestEqualsXxh3ForEveryLengthAndAlignment") {
  const size_t max = 3 * kHashChunkBytes + 200;
  constexpr size_t kGuard = 128;  // bytes after the destination range that must stay untouched
  auto src = RandomBytes(max + 64, 1);
  std::vector<size_t> lengths;
  for (size_t n = 0; n <= 2100; ++n) lengths.push_back(n);
  for (size_t n : {kHashChunkBytes - 1, kHashChunkBytes, kHashChunkBytes + 1,
                   2 * kHashChunkBytes + 63, 3 * kHashChunkBytes, max}) {
    lengths.push_back(n);
  }
  for (size_t n : lengths) {
    for (size_t src_off : {0, 1, 7}) {
      for (size_t dst_off : {0, 16, 32, 3, 64}) {
        // Exactly sized, so that AddressSanitizer also catches a store past the guard, and
        // 64-byte aligned: offset 0 and 64 take the 512-bit streaming kernel where the CPU has
        // AVX-512, 32 the 256-bit one, 16 the 128-bit one, 3 plain stores.
        AlignedBytes dst(dst_off + n + kGuard);
        const uint64_t d = CopyAndChunkDigest(dst.data() + dst_off, src.data() + src_off, n);
        INFO("length " << n << ", source offset " << src_off << ", destination offset " << dst_off);
        REQUIRE(d == XXH3_64bits(src.data() + src_off, n));
        REQUIRE(d == ChunkDigest(src.data() + src_off, n));
        REQUIRE(std::memcmp(dst.data() + dst_off, src.data() + src_off, n) == 0);
        // Nothing outside the destination range was written.
        REQUIRE(
            std::all_of(dst.begin(), dst.begin() + dst_off, [](uint8_t b) { return b == 0xAB; }));
        REQUIRE(
            std::all_of(dst.begin() + dst_off + n, dst.end(), [](uint8_t b) { return b == 0xAB; }));
      }
    }
  }
}

TEST_CASE("FusedChunkDigestsEqualReferenceDigest") {
  std::mt19937_64 rng(42);
  for (size_t n : {size_t{0}, size_t{1}, size_t{241}, kHashChunkBytes - 5, kHashChunkBytes,
                   kHashChunkBytes + 1, 3 * kHashChunkBytes, 5 * kHashChunkBytes + 12345}) {
    for (int round = 0; round < 8; ++round) {
      auto weights = RandomBytes(n, rng());
      std::vector<uint8_t> live(n, 0);
      ParamHashCache cache(n);
      for (auto [off, len] : RandomIntervals(n, rng)) {
        cache.CopyIn(live, off, weights.data() + off, len);
      }
      INFO("parameter of " << n << " bytes, round " << round);
      REQUIRE(live == weights);
      REQUIRE(cache.Digest(live) == ParamDigest(weights));
    }
  }
}

TEST_CASE("WholeChunksWrittenThroughCopyInNeedNoRehash") {
  const size_t n = 4 * kHashChunkBytes + 100;
  auto weights = RandomBytes(n, 3);
  std::vector<uint8_t> live(n, 0);
  ParamHashCache cache(n);
  REQUIRE(cache.touched_chunks() == cache.num_chunks());
  // Starts mid-chunk 0, ends mid-chunk 3: chunks 1 and 2 are whole, 0 and 3 partial.
  cache.CopyIn(live, 1000, weights.data() + 1000, 3 * kHashChunkBytes);
  CHECK(cache.touched_chunks() == 3);  // 0, 3 and the never-written 4
  cache.CopyIn(live, 0, weights.data(), 1000);
  cache.CopyIn(live, 3 * kHashChunkBytes + 1000, weights.data() + 3 * kHashChunkBytes + 1000,
               n - 3 * kHashChunkBytes - 1000);
  CHECK(cache.touched_chunks() == 2);  // 0 and 3 still partial writes; the short last chunk whole
  CHECK(cache.Digest(live) == ParamDigest(weights));
  CHECK(cache.touched_chunks() == 0);
}

TEST_CASE("CopyInKeepsTheCacheExactAcrossRewritesAndTouches") {
  std::mt19937_64 rng(7);
  const size_t n = 6 * kHashChunkBytes + 999;
  std::vector<uint8_t> live(n, 0);
  ParamHashCache cache(n);
  auto weights = RandomBytes(n, 1);
  for (auto [off, len] : RandomIntervals(n, rng))
    cache.CopyIn(live, off, weights.data() + off, len);
  REQUIRE(cache.Digest(live) == ParamDigest(live));
  for (int round = 0; round < 20; ++round) {
    // A later update rewrites some ranges fused, and others the way a rollback restores bytes
    // (memcpy + Touch).
    auto next = RandomBytes(n, 100 + round);
    for (auto [off, len] : RandomIntervals(n, rng)) {
      if (rng() % 3 == 0) continue;
      if (rng() % 2) {
        cache.CopyIn(live, off, next.data() + off, len);
      } else {
        std::memcpy(live.data() + off, next.data() + off, len);
        cache.Touch(off, len);
      }
    }
    INFO("round " << round);
    REQUIRE(cache.Digest(live) == ParamDigest(live));
  }
}

TEST_CASE("PoolCopyInLeavesTheBytesAndCacheOfCopyIn") {
  // ChunkHashPool::CopyIn splits the whole chunks of a large copy across its threads and the
  // caller: the bytes, the chunk digests and the touched marks are those of the one-thread
  // ParamHashCache::CopyIn, for ranges large and small, aligned or not, up to the end.
  const size_t n = 90 * kHashChunkBytes + 777;
  AlignedBytes serial_live(n), pooled_live(n);
  ParamHashCache serial(n), pooled(n);
  ChunkHashPool pool(3);
  std::mt19937_64 rng(11);
  for (int round = 0; round < 6; ++round) {
    auto weights = RandomBytes(n, 200 + round);
    std::vector<std::pair<size_t, size_t>> ranges = {
        {0, n},
        {kHashChunkBytes * 3 + 5, 40 * kHashChunkBytes},
        {n - 33 * kHashChunkBytes - 9, 33 * kHashChunkBytes + 9},
        {17, 100}};
    for (auto r : RandomIntervals(n, rng)) ranges.push_back(r);
    for (auto [off, len] : ranges) {
      if (round > 0 && rng() % 2) continue;
      serial.CopyIn({serial_live.data(), n}, off, weights.data() + off, len);
      pool.CopyIn(pooled, {pooled_live.data(), n}, off, weights.data() + off, len);
      INFO("round " << round << ", range at " << off << " of " << len << " bytes");
      REQUIRE(std::memcmp(serial_live.data(), pooled_live.data(), n) == 0);
      REQUIRE(serial.touched_chunks() == pooled.touched_chunks());
      for (size_t c = 0; c < serial.num_chunks(); ++c) {
        REQUIRE(serial.touched(c) == pooled.touched(c));
        if (!serial.touched(c)) REQUIRE(serial.chunk_digests()[c] == pooled.chunk_digests()[c]);
      }
    }
    REQUIRE(pooled.Digest({pooled_live.data(), n}) == ParamDigest({pooled_live.data(), n}));
    REQUIRE(serial.Digest({serial_live.data(), n}) == ParamDigest({serial_live.data(), n}));
  }
}

TEST_CASE("SetChunkDigestReplacesTheDigestOfOneChunk") {
  const size_t n = 2 * kHashChunkBytes + 10;
  auto bytes = RandomBytes(n, 9);
  ParamHashCache cache(n);
  const uint64_t reference = cache.Digest(bytes);
  bytes[kHashChunkBytes + 5] ^= 1;  // changed without a Touch ...
  CHECK(cache.Digest(bytes) == reference);
  cache.SetChunkDigest(1, ChunkDigest(bytes.data() + kHashChunkBytes, kHashChunkBytes));
  CHECK(cache.Digest(bytes) == ParamDigest(bytes));  // ... and told
  CHECK(cache.Digest(bytes) != reference);
}

TEST_CASE("FusedWritesGiveTheSameVersionWhateverTheWriteOrderAndChunking") {
  ManifestPtr m = ChunkyManifest();
  const auto weights = RandomWeights(*m, 1000);
  std::string first;
  for (int run = 0; run < 4; ++run) {
    TempDir dir;
    ParticipantOptions o;
    o.journal_dir = dir.sub("rank0");
    o.kernel_identity = "k";
    auto p = Participant::Open(o, m);
    REQUIRE(p.ok());
    std::mt19937_64 rng(run);
    BeginRequest req;
    req.tx = "t1";
    const std::string digest = Commit(**p, req, weights, rng);
    INFO("run " << run);
    // The fused path agrees with hashing the live bytes from scratch ...
    CHECK(digest == (*p)->RecomputeDigest().value());
    // ... and with the reference definition over the intended bytes.
    std::vector<uint64_t> reference;
    for (const auto& w : weights) reference.push_back(ParamDigest(w));
    CHECK(digest == RankDigest(*m, reference));
    if (run == 0) first = digest;
    CHECK(digest == first);
  }
}

Result<std::unique_ptr<Participant>> OpenWithThreads(TempDir& dir, ManifestPtr m, int threads) {
  ParticipantOptions o;
  o.journal_dir = dir.sub("rank0");
  o.threads = threads;
  return Participant::Open(o, std::move(m));
}

TEST_CASE("LargeWritesGiveTheSameVersionOnAnyNumberOfThreads") {
  // ParticipantOptions::threads splits a large Write's whole chunks across threads: the version
  // is the same for 1, 2 and 5 threads and for the default (one per core), written whole or in
  // random boxes, and is the live bytes' (a from-scratch hash agrees).
  ManifestPtr m = ParseManifest(nlohmann::json::parse(R"({
    "params": [
      {"name": "big", "dtype": "f32", "shape": [1531, 1024]},
      {"name": "wide", "dtype": "bf16", "shape": [513, 4099]},
      {"name": "tiny", "dtype": "f32", "shape": [3]}
    ]})"))
                      .value();
  const auto weights = RandomWeights(*m, 77);
  std::string first;
  for (int threads : {1, 2, 5, 0}) {
    for (bool whole : {true, false}) {
      TempDir dir;
      auto p = OpenWithThreads(dir, m, threads);
      REQUIRE(p.ok());
      BeginRequest req;
      req.tx = "t1";
      REQUIRE((*p)->Begin(req).ok());
      if (whole) {
        for (uint32_t i = 0; i < m->params().size(); ++i) {
          WritePiece w{m->params()[i].name, "", std::nullopt, weights[i].data(), weights[i].size()};
          REQUIRE((*p)->Write({&w, 1}).ok());
        }
      } else {
        std::mt19937_64 rng(threads);
        REQUIRE(WriteRandomly(**p, weights, rng).ok());
      }
      auto vote = (*p)->Prepare(req.tx);
      REQUIRE(vote.ok());
      REQUIRE(vote->yes);
      INFO("threads " << threads << (whole ? ", whole writes" : ", random boxes"));
      CHECK(vote->digest == (*p)->RecomputeDigest().value());
      if (first.empty()) first = vote->digest;
      CHECK(vote->digest == first);
    }
  }
  // Out of range: Open refuses it, naming the option.
  for (int threads : {-1, kMaxDataThreads + 1}) {
    TempDir dir;
    auto p = OpenWithThreads(dir, m, threads);
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().code() == ErrorCode::kInvalidArgument);
    CHECK(p.status().message().find("threads") != std::string::npos);
  }
}

TEST_CASE("ColumnSlicesAreWrittenInPlaceWithTheLiveBytesVersion") {
  // WriteSource of a shard fed by a column slice reads the slice in place (row by row, no
  // gathered copy) and hashes the chunks its rows fill as it goes: the bytes and the version
  // equal those of writing the gathered slice with Write, for a live box that is whole or
  // itself strided, over rows that do not align with the 64 KiB chunks.
  ManifestPtr m = ParseManifest(nlohmann::json::parse(R"({
    "params": [{"name": "w", "dtype": "f32", "shape": [600, 900], "shards": [
      {"id": "a", "source": "A", "source_shape": [600, 900], "box": [[0, 600], [0, 450]],
       "source_box": [[0, 600], [450, 900]]},
      {"id": "b", "source": "B", "source_shape": [600, 1400], "box": [[0, 600], [450, 900]],
       "source_box": [[0, 600], [700, 1150]]}]},
      {"name": "v", "dtype": "bf16", "shape": [1000, 333], "shards": [
      {"id": "c", "source": "C", "source_shape": [1000, 1000], "box": [[0, 1000], [0, 333]],
       "source_box": [[0, 1000], [333, 666]]}]}]})"))
                      .value();
  const std::map<std::string, std::vector<uint8_t>> sources = {
      {"A", RandomBytes(600 * 900 * 4, 1)},
      {"B", RandomBytes(600 * 1400 * 4, 2)},
      {"C", RandomBytes(1000 * 1000 * 2, 3)}};
  std::string versions[2];
  for (int gathered = 0; gathered < 2; ++gathered) {
    TempDir dir;
    auto p = OpenWithThreads(dir, m, 2);
    REQUIRE(p.ok());
    BeginRequest req;
    req.tx = "t1";
    REQUIRE((*p)->Begin(req).ok());
    for (const auto& [name, bytes] : sources) {
      if (!gathered) {
        auto n = (*p)->WriteSource(name, bytes.data(), bytes.size());
        REQUIRE(n.ok());
        CHECK(n.value() == 1);
        continue;
      }
      const ShardRef& ref = m->ShardsOfSource(name).front();
      const ParamSpec& ps = m->params()[ref.param];
      const ShardSpec& sh = ps.shards[ref.shard];
      const size_t esz = DTypeSize(ps.dtype);
      std::vector<uint8_t> slice(static_cast<size_t>(NumElements(sh.source_box)) * esz);
      CopyBoxOut(sh.source_shape, sh.source_box, esz, bytes.data(), slice.data());
      WritePiece w{ps.name, sh.id, std::nullopt, slice.data(), slice.size()};
      REQUIRE((*p)->Write({&w, 1}).ok());
    }
    auto vote = (*p)->Prepare(req.tx);
    REQUIRE(vote.ok());
    REQUIRE(vote->yes);
    INFO((gathered ? "gathered" : "in place"));
    CHECK(vote->digest == (*p)->RecomputeDigest().value());
    versions[gathered] = vote->digest;
  }
  CHECK(versions[0] == versions[1]);
}

TEST_CASE("FusedDigestsStayExactOverSuccessiveTransactions") {
  ManifestPtr m = ChunkyManifest();
  TempDir dir;
  ParticipantOptions o;
  o.journal_dir = dir.sub("rank0");
  o.kernel_identity = "k";
  auto p = Participant::Open(o, m);
  REQUIRE(p.ok());
  Participant& rank = **p;
  std::mt19937_64 rng(5);
  auto weights = RandomWeights(*m, 1);
  BeginRequest full;
  full.tx = "full-1";
  std::string digest = Commit(rank, full, weights, rng);
  REQUIRE(digest == rank.RecomputeDigest().value());

  // A partial update of module m1 with new bytes; m2's cached digests are reused.
  auto next = RandomWeights(*m, 2);
  for (uint32_t i : {2u, 3u}) next[i] = weights[i];
  BeginRequest partial;
  partial.tx = "partial-2";
  partial.kind = TxKind::kPartial;
  partial.base = *rank.status().version;
  partial.modules = {"m1"};
  digest = Commit(rank, partial, next, rng, {0, 1});
  CHECK(digest == rank.RecomputeDigest().value());

  // A rollback partial that aborts: the restored bytes are rehashed, so a later partial that
  // rewrites one element with its current value yields the committed digest again.
  const std::string committed_digest = digest;
  const std::string committed_version = *rank.status().version;
  BeginRequest rb;
  rb.tx = "rollback-3";
  rb.kind = TxKind::kPartial;
  rb.base = committed_version;
  rb.modules = {"m1"};
  rb.rollback = true;
  REQUIRE(rank.Begin(rb).ok());
  REQUIRE(WriteRandomly(rank, RandomWeights(*m, 3), rng, {0, 1}).ok());
  REQUIRE(rank.Decide(rb.tx, Decision::kAbort, "").ok());
  REQUIRE(rank.status().version == committed_version);
  REQUIRE_FALSE(rank.status().dirty);

  BeginRequest again;
  again.tx = "partial-4";
  again.kind = TxKind::kPartial;
  again.base = committed_version;
  again.modules = {"m1"};
  REQUIRE(rank.Begin(again).ok());
  for (const char* name : {"fused", "wide"}) {
    const uint32_t i = *m->FindParam(name);
    const ParamSpec& ps = m->params()[i];
    const auto live = rank.memory().Param(i);
    const std::vector<uint8_t> current(live.begin(), live.end());
    // Everything but one band, fused in big pieces, then that band.
    const Box head = {{0, ps.shape[0] - 1}, {0, ps.shape[1]}};
    const Box tail = {{ps.shape[0] - 1, ps.shape[0]}, {0, ps.shape[1]}};
    for (const Box& b : {head, tail}) {
      auto bytes = Gather(ps, current, b);
      WritePiece w{ps.name, "", b, bytes.data(), bytes.size()};
      REQUIRE(rank.Write({&w, 1}).ok());
    }
  }
  REQUIRE(rank.Refresh("*").ok());
  auto vote = rank.Prepare(again.tx);
  REQUIRE(vote.ok());
  REQUIRE(vote->yes);
  CHECK(vote->digest == committed_digest);
  CHECK(vote->digest == rank.RecomputeDigest().value());
}

TEST_CASE("CheckPrepareReportsPrepareChecksWithoutPreparing") {
  ManifestPtr m = ChunkyManifest();
  TempDir dir;
  ParticipantOptions o;
  o.journal_dir = dir.sub("rank0");
  o.kernel_identity = "k";
  auto p = Participant::Open(o, m);
  REQUIRE(p.ok());
  Participant& rank = **p;
  CHECK(rank.CheckPrepare("t").status().code() == ErrorCode::kNoTx);
  BeginRequest req;
  req.tx = "t";
  REQUIRE(rank.Begin(req).ok());
  auto v = rank.CheckPrepare("t");
  REQUIRE(v.ok());
  CHECK_FALSE(v->yes);
  CHECK(v->missing_total == 5);  // every shard: fused a, fused b, wide, cube, tiny
  std::mt19937_64 rng(1);
  REQUIRE(WriteRandomly(rank, RandomWeights(*m, 1), rng).ok());
  v = rank.CheckPrepare("t");
  REQUIRE(v.ok());
  CHECK_FALSE(v->yes);
  CHECK(v->error == ErrorCode::kStaleDerived);
  REQUIRE(rank.Refresh("*").ok());
  v = rank.CheckPrepare("t");
  REQUIRE(v.ok());
  CHECK(v->yes);
  CHECK(v->digest.empty());
  CHECK_FALSE(rank.status().in_doubt.has_value());  // nothing was prepared
  auto vote = rank.Prepare("t");
  REQUIRE(vote.ok());
  CHECK(vote->yes);
}

TEST_CASE("CoverageOnlyBenchmarkModeRecordsCoverageWithoutMovingBytes") {
  ManifestPtr m = ChunkyManifest();
  TempDir dir;
  ParticipantOptions o;
  o.journal_dir = dir.sub("rank0");
  ParticipantHooks hooks;
  hooks.benchmark_coverage_only = true;
  auto p = OpenParticipantWithHooks(o, m, hooks);
  REQUIRE(p.ok());
  Participant& rank = **p;
  BeginRequest req;
  req.tx = "t";
  REQUIRE(rank.Begin(req).ok());
  std::mt19937_64 rng(2);
  REQUIRE(WriteRandomly(rank, RandomWeights(*m, 1), rng).ok());
  REQUIRE(rank.Refresh("*").ok());
  auto v = rank.CheckPrepare("t");
  REQUIRE(v.ok());
  CHECK(v->yes);
  const auto live = rank.memory().Param(0);
  CHECK(std::all_of(live.begin(), live.end(), [](uint8_t b) { return b == 0; }));
}

TEST_CASE("ChunkDigestEqualsPlainXxh3OnEverySizeAndOffset") {
  // ChunkDigest goes through libxxhash's run-time dispatch (AVX2/AVX-512) where the library
  // has it (src/util/xxh3.h); the digest must be the plain XXH3_64bits on every path: short,
  // mid-size and long inputs, stripe and block edges, unaligned starts.
  const std::vector<uint8_t> v = RandomBytes(3 * kHashChunkBytes + 77, 99);
  for (size_t len :
       {size_t{0}, size_t{1}, size_t{3}, size_t{16}, size_t{17}, size_t{128}, size_t{129},
        size_t{240}, size_t{241}, size_t{1023}, size_t{1024}, size_t{1025}, size_t{4096},
        kHashChunkBytes - 1, kHashChunkBytes, 2 * kHashChunkBytes + 5}) {
    for (size_t off : {size_t{0}, size_t{1}, size_t{31}, size_t{64}}) {
      INFO("len " << len << ", offset " << off);
      REQUIRE(ChunkDigest(v.data() + off, len) == XXH3_64bits(v.data() + off, len));
    }
  }
  const std::vector<uint64_t> chunks = {1, 2, 3, 0xffffffffffffffffULL};
  CHECK(ParamDigestFromChunks(chunks) == XXH3_64bits(chunks.data(), chunks.size() * 8));
}
