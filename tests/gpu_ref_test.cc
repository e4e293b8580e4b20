// CPU side of the GPU path (docs/gpu.md): the __host__ __device__ XXH3 port and its lane
// decomposition against libxxhash, the kernels' CPU references against the participant's
// digests, scatter/restore and scan semantics, and live verification (API and `wtx verify`).
#include <sys/wait.h>
#include <xxhash.h>

#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <random>
#include <vector>

#include "kernels/xxh3_hd.h"
#include "src/testing/fault_injection_fs.h"
#include "tests/device_participant_run.h"
#include "tests/test_util.h"
#include "wtx/content_hash.h"
#include "wtx/device_live_memory.h"
#include "wtx/gpu.h"
#include "wtx/live_verify.h"

namespace wtx {
namespace {

using testing::RandomBytes;

const std::vector<size_t> kSizes = {0,    1,     15,        16,     17,        128,
                                    129,  240,   241,       1024,   64 * 1024, 64 * 1024 + 1,
                                    1000, 65535, 3 * 65536, 200000, 10u << 20};

TEST_CASE("xxh3 host port equals XXH3_64bits for every short and mid length and offset") {
  const auto buf = RandomBytes(4096 + 16, 1);
  for (size_t len = 0; len <= 4096; ++len) {
    const size_t off = len % 8;  // unaligned starts too
    const uint8_t* p = buf.data() + off;
    const uint64_t want = XXH3_64bits(p, len);
    INFO("len " << len << " offset " << off);
    REQUIRE(xxh3::Hash64(p, len) == want);
    if (len > xxh3::kMidSizeMax) {
      REQUIRE(xxh3::HashLongDecomposed(p, len, xxh3::Secret()) == want);
    }
  }
}

TEST_CASE("xxh3 host port equals XXH3_64bits for thousands of random lengths and contents") {
  std::mt19937_64 rng(42);
  const auto buf = RandomBytes(300000, 2);
  for (int i = 0; i < 3000; ++i) {
    const size_t len = (i % 3 == 0) ? rng() % 300 : rng() % (buf.size() - 8);
    const size_t off = rng() % 8;
    const uint8_t* p = buf.data() + off;
    const uint64_t want = XXH3_64bits(p, len);
    INFO("len " << len << " offset " << off);
    REQUIRE(xxh3::Hash64(p, len) == want);
    if (len > xxh3::kMidSizeMax) REQUIRE(xxh3::HashLongDecomposed(p, len, xxh3::Secret()) == want);
  }
  // Low-entropy contents (all zeros, all ones) too.
  for (uint8_t fill : {uint8_t{0}, uint8_t{0xff}}) {
    std::vector<uint8_t> v(70000, fill);
    for (size_t len : {0, 3, 9, 100, 200, 241, 1025, 65536, 70000}) {
      REQUIRE(xxh3::Hash64(v.data(), len) == XXH3_64bits(v.data(), len));
    }
  }
}

TEST_CASE("the kernel's tiled loop structure equals XXH3_64bits") {
  const auto buf = RandomBytes(200000, 3);
  std::mt19937_64 rng(7);
  for (int i = 0; i < 300; ++i) {
    const size_t len = 241 + rng() % (buf.size() - 241);
    const uint64_t want = XXH3_64bits(buf.data(), len);
    INFO("len " << len);
    for (size_t tile : {1, 3, 64}) {
      REQUIRE(xxh3::HashLongTiled(buf.data(), len, xxh3::Secret(), tile) == want);
    }
  }
  for (size_t len : {241, 1023, 1024, 1025, 1088, 2048, 65536, 65537, 65536 + 1024}) {
    REQUIRE(xxh3::HashLongTiled(buf.data(), len, xxh3::Secret(), 64) ==
            XXH3_64bits(buf.data(), len));
  }
}

TEST_CASE("kernel reference digests equal the participant's content hash") {
  for (size_t n : kSizes) {
    const auto b = RandomBytes(n, n + 7);
    INFO("size " << n);
    REQUIRE(ParamDigestRef(b.data(), n) == ParamDigest(b));
    std::vector<uint64_t> chunks((n + kHashChunkBytes - 1) / kHashChunkBytes);
    ChunkDigestsRef(b.data(), n, chunks.data());
    for (size_t c = 0; c < chunks.size(); ++c) {
      const size_t off = c * kHashChunkBytes;
      REQUIRE(chunks[c] == ChunkDigest(b.data() + off, std::min(kHashChunkBytes, n - off)));
    }
    REQUIRE(ParamDigestFromChunks(chunks) == ParamDigest(b));
    // And the ParamHashCache path the participant uses.
    ParamHashCache cache(n);
    std::vector<uint8_t> live(n);
    cache.CopyIn(live, 0, b.data(), n);
    REQUIRE(cache.Digest(live) == ParamDigestRef(b.data(), n));
  }
}

TEST_CASE("scatter with before-images restores the original bytes") {
  for (size_t esize : {1, 2, 4, 8}) {
    const size_t elems = 5000;
    auto param = RandomBytes(elems * esize, esize);
    const auto original = param;
    std::vector<int64_t> idx;
    for (int64_t i = 0; i < static_cast<int64_t>(elems); i += 7) idx.push_back((i * 31) % elems);
    std::sort(idx.begin(), idx.end());
    idx.erase(std::unique(idx.begin(), idx.end()), idx.end());
    const auto values = RandomBytes(idx.size() * esize, 99);
    std::vector<uint8_t> before(idx.size() * esize);
    INFO("element size " << esize);
    REQUIRE(ScatterRef(param.data(), param.size(), idx, values.data(), esize, before.data(),
                       before.size())
                .ok());
    for (size_t i = 0; i < idx.size(); ++i) {
      REQUIRE(std::memcmp(param.data() + idx[i] * esize, values.data() + i * esize, esize) == 0);
      REQUIRE(std::memcmp(before.data() + i * esize, original.data() + idx[i] * esize, esize) == 0);
    }
    REQUIRE(ParamDigestRef(param.data(), param.size()) != ParamDigest(original));
    REQUIRE(RestoreRef(param.data(), param.size(), idx, before.data(), esize).ok());
    REQUIRE(param == original);
  }
}

TEST_CASE("scatter refuses bad indices and small before buffers and changes nothing") {
  auto param = RandomBytes(64, 5);
  const auto original = param;
  const std::vector<uint8_t> values(3 * 4, 0xab);
  std::vector<uint8_t> before(12);
  std::vector<int64_t> bad = {0, 16, 3};  // 16 elements of 4 bytes: 16 is outside
  Status s = ScatterRef(param.data(), param.size(), bad, values.data(), 4, before.data(), 12);
  REQUIRE(s.code() == ErrorCode::kOutOfRange);
  std::vector<int64_t> neg = {-1};
  REQUIRE(ScatterRef(param.data(), param.size(), neg, values.data(), 4, nullptr, 0).code() ==
          ErrorCode::kOutOfRange);
  std::vector<int64_t> ok = {0, 1, 2};
  s = ScatterRef(param.data(), param.size(), ok, values.data(), 4, before.data(), 11);
  REQUIRE(s.code() == ErrorCode::kBudgetExceeded);
  REQUIRE(s.code_name() == "E_ROLLBACK_BUDGET");
  REQUIRE(ScatterRef(param.data(), param.size(), ok, values.data(), 3, nullptr, 0).code() ==
          ErrorCode::kInvalidArgument);
  REQUIRE(param == original);
  // Without a before buffer there is no budget to exceed.
  REQUIRE(ScatterRef(param.data(), param.size(), ok, values.data(), 4, nullptr, 0).ok());
}

// The GPU's order (kernels/kernel_args.h): the O(1) checks before the index scan.
TEST_CASE("ScatterChecksElementSizeAndBudgetBeforeIndices") {
  auto param = RandomBytes(64, 6);
  const auto original = param;
  const std::vector<uint8_t> values(3 * 4, 0xab);
  std::vector<uint8_t> before(12);
  const std::vector<int64_t> bad = {0, 16, 99};  // two of 16 elements out of range
  Status s = ScatterRef(param.data(), param.size(), bad, values.data(), 4, before.data(), 11);
  CHECK(s.code() == ErrorCode::kBudgetExceeded);
  s = ScatterRef(param.data(), param.size(), bad, values.data(), 3, before.data(), 12);
  CHECK(s.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(s.message(), Catch::Contains("element size 3"));
  s = ScatterRef(param.data(), param.size(), bad, values.data(), 4, before.data(), 12);
  REQUIRE(s.code() == ErrorCode::kOutOfRange);
  CHECK_THAT(s.message(), Catch::Contains("2 indices outside [0, 16), first: 16 (entry 1)"));
  s = RestoreRef(param.data(), param.size(), bad, before.data(), 4);
  CHECK(s.code() == ErrorCode::kOutOfRange);
  CHECK(param == original);
}

TEST_CASE("ReferenceDeviceMemoryRefusalsNameTheParameter") {
  const auto m = testing::SmallManifest();  // kv_b: parameter 1, bf16 [8, 4] = 64 bytes
  auto mem = NewReferenceDeviceLiveMemory(*m);
  const std::vector<uint8_t> bytes(64, 1);
  Status s = mem->Store(1, 60, bytes.data(), 8);
  REQUIRE(s.code() == ErrorCode::kOutOfRange);
  CHECK_THAT(s.message(), Catch::Contains("store of 8 bytes at 60 outside 'kv_b' (64 bytes)"));
  std::vector<uint8_t> out(8);
  s = mem->Load(1, 65, out.data(), 0);
  CHECK_THAT(s.message(), Catch::Contains("load of 0 bytes at 65 outside 'kv_b'"));
  uint64_t digest = 0;
  s = mem->ChunkDigests(1, 1, 1, &digest);
  REQUIRE(s.code() == ErrorCode::kOutOfRange);
  CHECK_THAT(s.message(), Catch::Contains("chunk 1 outside 'kv_b' (64 bytes)"));
  const std::vector<int64_t> idx = {0, -1};
  s = mem->Scatter(1, idx, bytes.data(), 2, nullptr);
  REQUIRE(s.code() == ErrorCode::kOutOfRange);
  CHECK_THAT(s.message(), Catch::Contains("1 index outside [0, 32), first: -1 (entry 1)"));

  // Borrowed buffers: one per parameter, each of its size.
  std::vector<std::vector<uint8_t>> owned;
  for (const auto& p : m->params()) owned.emplace_back(static_cast<size_t>(p.num_bytes()));
  owned[1].pop_back();
  std::vector<std::span<uint8_t>> spans(owned.begin(), owned.end());
  auto r = NewBorrowedReferenceDeviceLiveMemory(*m, spans);
  REQUIRE(r.status().code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains("buffer of 'kv_b' has 63 bytes, expected 64"));
  spans.pop_back();
  r = NewBorrowedReferenceDeviceLiveMemory(*m, spans);
  REQUIRE(r.status().code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(r.status().message(), Catch::Contains("3 buffers for 4 parameters"));
}

TEST_CASE("scan counts NaN, Inf and all-zero rows") {
  // f32 [4, 4]: row 1 all zero, row 3 -0.0 only (not all-zero bytes), NaN/Inf in rows 0 and 2.
  std::vector<float> f(16, 1.0f);
  for (int k = 4; k < 8; ++k) f[k] = 0.0f;
  for (int k = 12; k < 16; ++k) f[k] = -0.0f;
  f[0] = std::numeric_limits<float>::quiet_NaN();
  f[1] = std::numeric_limits<float>::infinity();
  f[9] = -std::numeric_limits<float>::infinity();
  f[10] = -std::numeric_limits<float>::signaling_NaN();
  auto r = VerifyScanRef(f.data(), f.size() * 4, DType::kF32, 4);
  REQUIRE(r.ok());
  CHECK(r->nan == 2);
  CHECK(r->inf == 2);
  CHECK(r->rows == 4);
  CHECK(r->zero_rows == 1);
  CHECK(r->digest == XXH3_64bits(std::vector<uint64_t>{XXH3_64bits(f.data(), 64)}.data(), 8));

  // bf16 and f16 bit patterns.
  const std::vector<uint16_t> bf = {0x7F80, 0xFF80, 0x7FC0, 0x7F81, 0x3F80, 0, 0, 0};
  r = VerifyScanRef(bf.data(), bf.size() * 2, DType::kBF16, 2);
  REQUIRE(r.ok());
  CHECK((r->nan == 2 && r->inf == 2 && r->rows == 4 && r->zero_rows == 1));
  const std::vector<uint16_t> h = {0x7C00, 0xFC00, 0x7E00, 0x3C00, 0, 0};
  r = VerifyScanRef(h.data(), h.size() * 2, DType::kF16, 3);
  REQUIRE(r.ok());
  CHECK((r->nan == 1 && r->inf == 2 && r->rows == 2 && r->zero_rows == 0));
  // Integer dtypes have no NaN/Inf; row_elems 0 skips the row check.
  const std::vector<uint8_t> u(8, 0xff);
  r = VerifyScanRef(u.data(), u.size(), DType::kU8, 0);
  REQUIRE(r.ok());
  CHECK((r->nan == 0 && r->inf == 0 && r->rows == 0));
  REQUIRE(VerifyScanRef(u.data(), u.size(), DType::kU8, 3).status().code() ==
          ErrorCode::kInvalidArgument);
}

// ---- live verification ----

struct Rank {
  testing::TempDir dir;
  ManifestPtr manifest = testing::SmallManifest();
  std::unique_ptr<Participant> p;
  std::string journal() const { return dir.sub("rank-0"); }
  Rank() {
    ParticipantOptions o;
    o.journal_dir = journal();
    o.kernel_identity = "k1";
    p = Participant::Open(std::move(o), manifest).value();
  }
  // A full transaction writing every parameter with pattern `seed`, then `decision`.
  void Full(const std::string& tx, uint32_t seed, Decision decision) {
    BeginRequest req;
    req.tx = tx;
    REQUIRE(p->Begin(req).ok());
    std::vector<std::vector<uint8_t>> bufs;
    std::vector<WritePiece> pieces;
    for (const auto& ps : manifest->params()) {
      bufs.push_back(testing::Pattern(*manifest, ps.name, WholeBox(ps.shape), seed));
    }
    for (size_t i = 0; i < bufs.size(); ++i) {
      WritePiece w;
      w.param = manifest->params()[i].name;
      w.data = bufs[i].data();
      w.bytes = bufs[i].size();
      pieces.push_back(w);
    }
    REQUIRE(p->Write(pieces).ok());
    REQUIRE(p->Refresh("*").ok());  // the manifest's derived states
    auto vote = p->Prepare(tx);
    REQUIRE(vote.ok());
    INFO(vote->message);
    REQUIRE(vote->yes);
    const std::vector<std::string> digests = {vote->digest};
    REQUIRE(p->Decide(tx, decision, CombineRankDigests(digests)).ok());
  }
};

TEST_CASE("VerifyLive catches bytes changed outside a transaction") {
  Rank r;
  auto rep = VerifyLive(*r.p, r.journal());
  REQUIRE(rep.ok());
  CHECK_FALSE(rep->comparable);  // never committed

  r.Full("t1", 1, Decision::kCommit);
  rep = VerifyLive(*r.p, r.journal());
  REQUIRE(rep.ok());
  CHECK(rep->comparable);
  CHECK(rep->match);
  CHECK(rep->committed.committed_tx == "t1");
  CHECK(rep->live_digest == r.p->RecomputeDigest().value());

  // A stray write: flip one bit of the last parameter.
  const uint32_t last = static_cast<uint32_t>(r.manifest->params().size() - 1);
  r.p->memory().Param(last)[3] ^= 0x10;
  rep = VerifyLive(*r.p, r.journal());
  REQUIRE(rep.ok());
  CHECK(rep->comparable);
  CHECK_FALSE(rep->match);
  CHECK(rep->message.find("MISMATCH") != std::string::npos);
  r.p->memory().Param(last)[3] ^= 0x10;
  rep = VerifyLive(*r.p, r.journal());
  REQUIRE(rep.ok());
  CHECK(rep->match);

  // An aborted full transaction leaves the rank dirty: nothing to compare with.
  r.Full("t2", 2, Decision::kAbort);
  rep = VerifyLive(*r.p, r.journal());
  REQUIRE(rep.ok());
  CHECK_FALSE(rep->comparable);
  CHECK_FALSE(rep->match);

  // A later full commit makes it comparable again.
  r.Full("t3", 3, Decision::kCommit);
  rep = VerifyLive(*r.p, r.journal());
  REQUIRE(rep.ok());
  CHECK(rep->match);
  CHECK(rep->committed.committed_tx == "t3");
}

TEST_CASE("DumpLiveImageGoesThroughTheEnvsFilesystemAndNamesTheFileItCannotWrite") {
  testing::TempDir files;
  const std::string image = files.sub("live.bin");
  Rank r;
  r.Full("t1", 1, Decision::kCommit);
  auto fs = std::make_shared<FaultInjectionFileSystem>(rocksdb::FileSystem::Default());
  Env env;
  env.fs = fs;
  // A failed write and a failed sync each surface as an error naming the file.
  fs->FailNextWrites(1);
  Status s = DumpLiveImage(*r.p, image, env);
  CHECK(s.code() == ErrorCode::kIOError);
  CHECK(s.message().find(image) != std::string::npos);
  CHECK(fs->injected_errors() == 1);
  fs->FailNextSyncs(1);
  s = DumpLiveImage(*r.p, image, env);
  CHECK(s.code() == ErrorCode::kIOError);
  CHECK(s.message().find("cannot sync") != std::string::npos);
  // Through the same filesystem, a good dump is synced and verifies against the journal.
  const uint64_t syncs = fs->syncs();
  REQUIRE(DumpLiveImage(*r.p, image, env).ok());
  CHECK(fs->syncs() == syncs + 1);
  std::ifstream in(image, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  r.p.reset();
  auto rep = VerifyImage(
      *r.manifest, {reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()}, r.journal());
  REQUIRE(rep.ok());
  CHECK(rep->match);
}

#ifdef WTX_BINARY
int RunWtx(const std::string& args) {
  const std::string cmd = std::string(WTX_BINARY) + " " + args + " >/dev/null 2>&1";
  const int status = std::system(cmd.c_str());
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

TEST_CASE("wtx verify checks a dumped live image against the journal") {
  testing::TempDir files;
  const std::string manifest = files.sub("manifest.json");
  std::ofstream(manifest) << testing::SmallManifestJson().dump();
  const std::string image = files.sub("live.bin");
  std::string journal;
  {
    Rank r;
    r.Full("t1", 1, Decision::kCommit);
    REQUIRE(DumpLiveImage(*r.p, image).ok());
    // While the participant has its journal open.
    CHECK(RunWtx("verify " + r.journal() + " --image " + image + " --manifest " + manifest) == 0);
    r.p.reset();
    CHECK(RunWtx("verify " + r.journal() + " --image " + image + " --manifest " + manifest +
                 " --json") == 0);
    // Tampered image: mismatch.
    {
      std::fstream f(image, std::ios::in | std::ios::out | std::ios::binary);
      f.seekp(10);
      f.put('\x5a');
    }
    CHECK(RunWtx("verify " + r.journal() + " --image " + image + " --manifest " + manifest) == 1);
    // Truncated image, missing journal: invalid input (docs/cli.md, "Exit codes").
    std::ofstream(image, std::ios::trunc) << "short";
    CHECK(RunWtx("verify " + r.journal() + " --image " + image + " --manifest " + manifest) == 2);
    CHECK(RunWtx("verify " + files.sub("nope") + " --image " + image + " --manifest " + manifest) ==
          2);
  }
}
#endif  // WTX_BINARY

TEST_CASE("ParticipantOnReferenceDeviceMemoryMatchesHostMemory") {
  testing::TempDir dir;
  const auto on_device = testing::RunDeltaRollback(
      NewReferenceDeviceLiveMemory(*testing::DeltaRollbackManifest()), dir.sub("device"));
  const auto on_host = testing::RunDeltaRollback(nullptr, dir.sub("host"));
  CHECK(on_device == on_host);
  CHECK(on_device[2] == on_device[0]);  // the abort restored the committed bytes
  CHECK(on_device[1] != on_device[0]);
}

}  // namespace
}  // namespace wtx
