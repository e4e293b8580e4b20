// Measurements of the data path: update_vs_memcpy, hash_vs_xxh3, coverage_check_ms; and the
// helpers every measurement shares.
#include "tools/bench/bench.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <ostream>
#include <thread>

#include <sys/mman.h>
#include <unistd.h>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define WTX_BENCH_AVX2 1
#endif

#include "src/memory/chunk_hash_pool.h"
#include "src/txn/test_hooks.h"
#include "src/util/xxh3.h"
#include "tools/bench/bench_util.h"
#include "wtx/content_hash.h"
#include "wtx/coordinator.h"
#include "wtx/hf_manifest.h"
#include "wtx/inproc_transport.h"
#include "wtx/participant.h"

namespace wtx::bench {

using nlohmann::json;

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

void FillPattern(void* p, size_t n, uint64_t seed) {
  auto* b = static_cast<uint8_t*>(p);
  uint64_t x = seed * 0x9E3779B97F4A7C15ULL + 1;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    x += 0x9E3779B97F4A7C15ULL;  // splitmix64
    uint64_t z = x;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    std::memcpy(b + i, &z, 8);
  }
  for (; i < n; ++i) b[i] = static_cast<uint8_t>(i * 131 + seed);
}

#ifdef WTX_BENCH_AVX2
namespace {
__attribute__((target("avx2"))) void StreamCopyAvx2(uint8_t* d, const uint8_t* s, size_t n) {
  // Align the destination to 32 bytes with a plain head, stream the body, plain tail.
  const size_t head = std::min(n, (32 - reinterpret_cast<uintptr_t>(d) % 32) % 32);
  std::memcpy(d, s, head);
  size_t i = head;
  for (; i + 128 <= n; i += 128) {
    const auto* in = reinterpret_cast<const __m256i*>(s + i);
    auto* out = reinterpret_cast<__m256i*>(d + i);
    const __m256i a = _mm256_loadu_si256(in), b = _mm256_loadu_si256(in + 1);
    const __m256i c = _mm256_loadu_si256(in + 2), e = _mm256_loadu_si256(in + 3);
    _mm256_stream_si256(out, a);
    _mm256_stream_si256(out + 1, b);
    _mm256_stream_si256(out + 2, c);
    _mm256_stream_si256(out + 3, e);
  }
  std::memcpy(d + i, s + i, n - i);
  _mm_sfence();
}
}  // namespace
#endif

void StreamCopy(void* dst, const void* src, size_t n) {
#ifdef WTX_BENCH_AVX2
  if (__builtin_cpu_supports("avx2")) {
    StreamCopyAvx2(static_cast<uint8_t*>(dst), static_cast<const uint8_t*>(src), n);
    return;
  }
#endif
  std::memcpy(dst, src, n);
}

json MachineInfo() {
  json m = {{"cores", std::thread::hardware_concurrency()}};
  std::ifstream cpu("/proc/cpuinfo");
  for (std::string line; std::getline(cpu, line);) {
    if (line.rfind("model name", 0) == 0) {
      auto colon = line.find(':');
      m["cpu"] =
          colon == std::string::npos ? line : line.substr(line.find_first_not_of(" \t", colon + 1));
      break;
    }
  }
  std::ifstream mem("/proc/meminfo");
  for (std::string key; mem >> key;) {
    int64_t kib = 0;
    mem >> kib;
    if (key == "MemTotal:") {
      m["memory_bytes"] = kib * 1024;
      break;
    }
    mem.ignore(1 << 10, '\n');
  }
  std::ifstream load("/proc/loadavg");
  double l1 = 0;
  if (load >> l1) m["loadavg_1min"] = l1;
  return m;
}

// ---- Scratch directories and buffers ----------------------------------------------------------

Result<ScratchDir> ScratchDir::Make(const std::string& parent, const std::string& name) {
  static int counter = 0;
  ScratchDir d;
  d.path_ = (std::filesystem::path(parent) /
             (name + "-" + std::to_string(::getpid()) + "-" + std::to_string(++counter)))
                .string();
  std::error_code ec;
  std::filesystem::remove_all(d.path_, ec);
  if (!std::filesystem::create_directories(d.path_, ec) || ec) {
    return Status::IOError("cannot create scratch directory " + d.path_ + ": " + ec.message());
  }
  return d;
}

ScratchDir::~ScratchDir() {
  if (!path_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
}

Buffer::Buffer(size_t n, bool zeroed) : size_(n) {
  const size_t rounded = (std::max<size_t>(n, 1) + 63) / 64 * 64;
  p_ = static_cast<uint8_t*>(zeroed ? std::calloc(rounded, 1) : std::aligned_alloc(64, rounded));
}

Buffer::~Buffer() { std::free(p_); }

void Buffer::AdviseHugePages() {
  constexpr size_t kHuge = size_t{2} << 20;
  if (p_ == nullptr) return;
  const size_t head = (kHuge - reinterpret_cast<uintptr_t>(p_) % kHuge) % kHuge;
  if (size_ > head + kHuge) madvise(p_ + head, (size_ - head) & ~(kHuge - 1), MADV_HUGEPAGE);
}

int ResolvedThreads(const BenchOptions& o) { return DataPathThreads(o.threads); }

void ParallelFor(int threads, size_t n, const std::function<void(size_t)>& fn) {
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t k = next++; k < n; k = next++) fn(k);
  };
  std::vector<std::thread> helpers;
  for (int t = 1; t < threads; ++t) helpers.emplace_back(work);
  work();
  for (auto& t : helpers) t.join();
}

Result<OneRank> OpenOneRank(const std::string& dir, ManifestPtr manifest,
                            const OneRankOptions& options) {
  OneRank r;
  ParticipantOptions po;
  po.rank = 0;
  po.journal_dir = dir + "/rank0";
  po.kernel_identity = "bench";
  po.memory = options.memory;
  po.threads = options.threads;
  WTX_ASSIGN_OR_RETURN(participant,
                       OpenParticipantWithHooks(po, std::move(manifest), options.hooks));
  r.participant = std::move(participant);
  r.transport = std::make_unique<InProcTransport>(1);
  r.transport->SetParticipant(0, r.participant.get());
  CoordinatorOptions co;
  co.journal_dir = dir + "/coordinator";
  WTX_ASSIGN_OR_RETURN(coordinator, Coordinator::Open(co, r.transport.get()));
  r.coordinator = std::move(coordinator);
  return r;
}

void Progress(const BenchOptions& o, const std::string& line) {
  if (o.progress) *o.progress << "wtx bench: " << line << std::endl;
}

Result<ManifestPtr> Tp1Bf16Manifest(const BenchOptions& o) {
  HfManifestOptions ho;
  ho.tp = 1;
  ho.dtype = DType::kBF16;
  return ManifestFromHfConfigFile(o.model, ho);
}

// ---- update_vs_memcpy ----------------------------------------------------------------------

namespace {

struct Copy {
  uint8_t* dst;
  const uint8_t* src;
  size_t len;
};

struct TxTimes {
  double begin = 0, writes = 0, commit = 0, total = 0;
};

}  // namespace

Result<json> BenchUpdate(const BenchOptions& o) {
  WTX_ASSIGN_OR_RETURN(manifest, Tp1Bf16Manifest(o));
  const auto& params = manifest->params();
  const size_t total = static_cast<size_t>(manifest->TotalBytes());
  Progress(o, "update: " + o.model + ": " + std::to_string(params.size()) + " params, " +
                  std::to_string(manifest->TotalShards()) + " shards, " + std::to_string(total) +
                  " bytes");

  // The new weights, shard after shard, as a trainer would send them.
  Buffer src(total, /*zeroed=*/false);
  if (!src.data()) return Status::IOError("cannot allocate " + std::to_string(total) + " bytes");
  FillPattern(src.data(), total, 7);

  WTX_ASSIGN_OR_RETURN(dir, ScratchDir::Make(o.scratch_dir, "update"));
  const int threads = ResolvedThreads(o);
  OneRankOptions ro;
  ro.threads = threads;
  WTX_ASSIGN_OR_RETURN(rank, OpenOneRank(dir.path(), manifest, ro));
  Participant* participant = rank.participant.get();
  Coordinator* coordinator = rank.coordinator.get();
  // The same rank recording no metrics (its own live memory and journals): the update's cost
  // with metrics against the same update without, in the same rounds.
  WTX_ASSIGN_OR_RETURN(quiet_dir, ScratchDir::Make(o.scratch_dir, "update-no-metrics"));
  OneRankOptions quiet_options = ro;
  quiet_options.hooks.benchmark_no_metrics = true;
  WTX_ASSIGN_OR_RETURN(quiet, OpenOneRank(quiet_dir.path(), manifest, quiet_options));

  std::vector<WritePiece> pieces;
  std::vector<Copy> copies;  // the same shards as flat runs, for the baselines
  size_t off = 0;
  for (uint32_t i = 0; i < params.size(); ++i) {
    const ParamSpec& p = params[i];
    const size_t esz = DTypeSize(p.dtype);
    uint8_t* live = participant->memory().Param(i).data();
    for (const ShardSpec& s : p.shards) {
      const size_t bytes = static_cast<size_t>(NumElements(s.box)) * esz;
      pieces.push_back({p.name, s.id, std::nullopt, src.data() + off, bytes});
      const uint8_t* from = src.data() + off;
      ForEachFlatRun(p.shape, s.box, [&](int64_t b, int64_t len) {
        const size_t n = static_cast<size_t>(len) * esz;
        copies.push_back({live + static_cast<size_t>(b) * esz, from, n});
        from += n;
      });
      off += bytes;
    }
  }

  int tx_counter = 0;
  std::string last_version;
  auto run_tx_on = [&](Participant* participant, Coordinator* coordinator, TxTimes* t) -> Status {
    BeginRequest req;
    req.tx = "bench-" + std::to_string(++tx_counter);
    req.kind = TxKind::kFull;
    const double t0 = NowSeconds();
    BeginOutcome b = coordinator->Begin(req);
    if (!b.status.ok()) return b.status;
    const double t1 = NowSeconds();
    for (const WritePiece& piece : pieces) {
      WTX_RETURN_IF_ERROR(participant->Write(std::span<const WritePiece>(&piece, 1)));
    }
    if (!manifest->derived().empty()) {
      auto r = participant->Refresh("*");
      if (!r.ok()) return r.status();
    }
    const double t2 = NowSeconds();
    CommitOutcome c = coordinator->Commit(req.tx);
    if (!c.status.ok()) return c.status;
    if (c.decision != Decision::kCommit) {
      return Status::Error(ErrorCode::kVoteNo, "bench transaction " + req.tx + " did not commit");
    }
    const double t3 = NowSeconds();
    last_version = c.version;
    *t = {t1 - t0, t2 - t1, t3 - t2, t3 - t0};
    return Status::OK();
  };
  auto run_tx = [&](TxTimes* t) { return run_tx_on(participant, coordinator, t); };
  auto run_quiet_tx = [&](TxTimes* t) {
    return run_tx_on(quiet.participant.get(), quiet.coordinator.get(), t);
  };
  auto run_memcpy = [&]() {
    const double t0 = NowSeconds();
    for (const Copy& c : copies) std::memcpy(c.dst, c.src, c.len);
    return NowSeconds() - t0;
  };
  auto run_stream = [&]() {
    const double t0 = NowSeconds();
    for (const Copy& c : copies) StreamCopy(c.dst, c.src, c.len);
    return NowSeconds() - t0;
  };
  // The limit with the transaction's thread count: the same streaming copies, cut in pieces of
  // at most 1 MiB that `threads` threads take in turn.
  std::vector<Copy> pieces_1m;
  for (const Copy& c : copies) {
    for (size_t at = 0; at < c.len; at += size_t{1} << 20) {
      pieces_1m.push_back({c.dst + at, c.src + at, std::min(size_t{1} << 20, c.len - at)});
    }
  }
  auto run_stream_threads = [&]() {
    const double t0 = NowSeconds();
    ParallelFor(threads, pieces_1m.size(), [&](size_t k) {
      StreamCopy(pieces_1m[k].dst, pieces_1m[k].src, pieces_1m[k].len);
    });
    return NowSeconds() - t0;
  };

  // Warm-up: faults the live pages in, opens the journals' files; not counted.
  TxTimes warm;
  WTX_RETURN_IF_ERROR(run_quiet_tx(&warm));
  WTX_RETURN_IF_ERROR(run_tx(&warm));
  run_memcpy();
  run_stream();
  run_stream_threads();

  const int rounds = o.quick ? 3 : 7;
  std::vector<double> t_memcpy, t_stream, t_stream_threads, t_tx, t_begin, t_writes, t_commit;
  std::vector<double> t_quiet_tx;
  for (int r = 0; r < rounds; ++r) {
    // Rotate the order so that drift on a shared machine hits every side alike.
    for (int k = 0; k < 5; ++k) {
      switch ((r + k) % 5) {
        case 4: {
          TxTimes t;
          WTX_RETURN_IF_ERROR(run_quiet_tx(&t));
          t_quiet_tx.push_back(t.total);
          break;
        }
        case 0:
          t_memcpy.push_back(run_memcpy());
          break;
        case 1:
          t_stream.push_back(run_stream());
          break;
        case 3:
          t_stream_threads.push_back(run_stream_threads());
          break;
        case 2: {
          TxTimes t;
          WTX_RETURN_IF_ERROR(run_tx(&t));
          t_tx.push_back(t.total);
          t_begin.push_back(t.begin);
          t_writes.push_back(t.writes);
          t_commit.push_back(t.commit);
          break;
        }
      }
    }
    Progress(o, "update: round " + std::to_string(r + 1) + "/" + std::to_string(rounds) +
                    ": memcpy " + std::to_string(t_memcpy.back() * 1e3) + " ms, transaction " +
                    std::to_string(t_tx.back() * 1e3) + " ms");
  }

  // The fused copy+hash path must give the version a from-scratch hash of the live bytes gives.
  WTX_ASSIGN_OR_RETURN(rank_digest, participant->RecomputeDigest());
  const std::string recomputed = CombineRankDigests(std::vector<std::string>{rank_digest});
  if (recomputed != last_version) {
    return Status::Corruption("committed version " + last_version +
                              " differs from the recomputed " + recomputed);
  }

  const double mc = Median(t_memcpy), st = Median(t_stream), tx = Median(t_tx);
  const double stn = Median(t_stream_threads);
  auto ms = [](const std::vector<double>& v) {
    json a = json::array();
    for (double x : v) a.push_back(x * 1e3);
    return a;
  };
  const double gb = static_cast<double>(total) / 1e9;
  const double quiet_tx = Median(t_quiet_tx);
  return json{
      {"update_vs_memcpy", mc / tx},
      {"update_vs_stream_copy", stn / tx},
      // The update with metrics against the same update recording none (1.0: metrics free).
      {"update_metrics_on_vs_off", quiet_tx / tx},
      {"details",
       {{"model", o.model},
        {"threads", threads},
        {"update_vs_stream_copy_one_thread", st / tx},
        // The writes alone (no begin, prepare, commit and their fsyncs) against the same limit.
        {"writes_vs_stream_copy", stn / Median(t_writes)},
        {"stream_copy_threads_ms", stn * 1e3},
        {"stream_copy_threads_gb_per_s", gb / stn},
        {"bytes", total},
        {"params", params.size()},
        {"shards", manifest->TotalShards()},
        {"rounds", rounds},
        {"memcpy_ms", mc * 1e3},
        {"memcpy_gb_per_s", gb / mc},
        {"stream_copy_ms", st * 1e3},
        {"stream_copy_gb_per_s", gb / st},
        {"transaction_ms", tx * 1e3},
        {"transaction_no_metrics_ms", quiet_tx * 1e3},
        {"transaction_gb_per_s", gb / tx},
        {"begin_ms", Median(t_begin) * 1e3},
        {"writes_ms", Median(t_writes) * 1e3},
        {"commit_ms", Median(t_commit) * 1e3},
        {"version_verified", true},
        {"samples_ms",
         {{"memcpy", ms(t_memcpy)},
          {"stream_copy", ms(t_stream)},
          {"stream_copy_threads", ms(t_stream_threads)},
          {"transaction", ms(t_tx)},
          {"transaction_no_metrics", ms(t_quiet_tx)}}}}}};
}

// ---- hash_vs_xxh3 --------------------------------------------------------------------------

Result<json> BenchHash(const BenchOptions& o) {
  const size_t n = o.quick ? (size_t{32} << 20) : (size_t{512} << 20);
  Buffer buf(n, /*zeroed=*/false);
  if (!buf.data()) return Status::IOError("cannot allocate " + std::to_string(n) + " bytes");
  FillPattern(buf.data(), n, 11);
  const std::span<const uint8_t> bytes(buf.data(), n);
  volatile uint64_t sink = 0;
  sink = sink + ParamDigest(bytes) + Xxh3_64(buf.data(), n);  // warm-up
  const int rounds = o.quick ? 3 : 15;
  std::vector<double> t_param, t_raw;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      const double t0 = NowSeconds();
      if ((r + k) % 2 == 0) {
        sink = sink + ParamDigest(bytes);
        t_param.push_back(NowSeconds() - t0);
      } else {
        sink = sink + Xxh3_64(buf.data(), n);
        t_raw.push_back(NowSeconds() - t0);
      }
    }
  }
  const double tp = Median(t_param), tr = Median(t_raw);
  Progress(o, "hash: ParamDigest " + std::to_string(tp * 1e3) + " ms, XXH3_64bits " +
                  std::to_string(tr * 1e3) + " ms over " + std::to_string(n) + " bytes");
  const double gb = static_cast<double>(n) / 1e9;
  return json{{"hash_vs_xxh3", tr / tp},
              {"details",
               {{"bytes", n},
                {"rounds", rounds},
                {"param_digest_ms", tp * 1e3},
                {"param_digest_gb_per_s", gb / tp},
                {"xxh3_ms", tr * 1e3},
                {"xxh3_gb_per_s", gb / tr}}}};
}

// ---- coverage_check_ms ---------------------------------------------------------------------

// Live memory of the coverage measurement: the parameters' sizes and nothing else. The
// measurement never moves a byte (benchmark_coverage_only), and a full-size rank (Kimi-K2 tp 8:
// 130 GB) must not be allocated, not even as a lazily backed mapping. Any operation on the
// bytes is refused.
class SizesOnlyLiveMemory : public LiveMemory {
 public:
  explicit SizesOnlyLiveMemory(const Manifest& m) {
    for (const auto& p : m.params()) sizes_.push_back(static_cast<size_t>(p.num_bytes()));
  }
  std::span<uint8_t> Param(uint32_t) override { return {}; }
  void Discard() override {}
  bool HostAddressable() const override { return false; }
  size_t Size(uint32_t i) override { return sizes_[i]; }
  Status Store(uint32_t, size_t, const void*, size_t) override { return Refused(); }
  Status Load(uint32_t, size_t, void*, size_t) override { return Refused(); }
  Status Scatter(uint32_t, std::span<const int64_t>, const void*, size_t, void*) override {
    return Refused();
  }
  Status ChunkDigests(uint32_t, size_t, size_t, uint64_t*) override { return Refused(); }

 private:
  static Status Refused() {
    return Status::InvalidArgument("the coverage benchmark's live memory holds no bytes");
  }
  std::vector<size_t> sizes_;
};

Result<json> BenchCoverage(const BenchOptions& o) {
  HfManifestOptions ho;
  ho.tp = o.coverage_tp;
  ho.rank = 0;
  WTX_ASSIGN_OR_RETURN(manifest, ManifestFromHfConfigFile(o.coverage_model, ho));
  const auto& params = manifest->params();
  size_t max_shard = 0;
  for (const auto& p : params) {
    for (const auto& s : p.shards) {
      max_shard = std::max(max_shard, static_cast<size_t>(NumElements(s.box)) * DTypeSize(p.dtype));
    }
  }
  Progress(o, "coverage: " + o.coverage_model + " tp " + std::to_string(o.coverage_tp) +
                  " rank 0: " + std::to_string(params.size()) + " params, " +
                  std::to_string(manifest->TotalShards()) + " shards, " +
                  std::to_string(manifest->TotalBytes()) + " bytes (not moved)");
  // Write() validates `data` but, in benchmark_coverage_only mode, never reads it: one zeroed,
  // never-touched (virtual) buffer serves every piece.
  Buffer zeros(max_shard, /*zeroed=*/true);
  WTX_ASSIGN_OR_RETURN(dir, ScratchDir::Make(o.scratch_dir, "coverage"));
  ParticipantOptions po;
  po.rank = 0;
  po.journal_dir = dir.path() + "/rank0";
  po.kernel_identity = "bench";
  po.memory = std::make_shared<SizesOnlyLiveMemory>(*manifest);
  ParticipantHooks hooks;
  hooks.benchmark_coverage_only = true;
  WTX_ASSIGN_OR_RETURN(participant, OpenParticipantWithHooks(po, manifest, hooks));

  // Writes every shard (or, with `skip_odd`, every other shard of each parameter), then times
  // CheckPrepare.
  int tx_counter = 0;
  auto measure = [&](bool skip_odd, json* out) -> Status {
    BeginRequest req;
    req.tx = "coverage-" + std::to_string(++tx_counter);
    req.kind = TxKind::kFull;
    WTX_RETURN_IF_ERROR(participant->Begin(req));
    size_t writes = 0;
    const double t0 = NowSeconds();
    for (const auto& p : params) {
      for (size_t k = 0; k < p.shards.size(); ++k) {
        if (skip_odd && k % 2 == 1) continue;
        const ShardSpec& s = p.shards[k];
        WritePiece w{p.name, s.id, std::nullopt, zeros.data(),
                     static_cast<size_t>(NumElements(s.box)) * DTypeSize(p.dtype)};
        WTX_RETURN_IF_ERROR(participant->Write(std::span<const WritePiece>(&w, 1)));
        ++writes;
      }
    }
    const double t_writes = NowSeconds() - t0;
    if (!manifest->derived().empty()) {
      auto r = participant->Refresh("*");
      if (!r.ok()) return r.status();
    }
    const int reps = o.quick ? 5 : 21;
    std::vector<double> t;
    Vote vote;
    for (int k = 0; k < reps; ++k) {
      const double c0 = NowSeconds();
      auto v = participant->CheckPrepare(req.tx);
      t.push_back(NowSeconds() - c0);
      if (!v.ok()) return v.status();
      vote = std::move(v).value();
    }
    if (vote.yes == skip_odd) {
      return Status::Error(ErrorCode::kCoverageIncomplete,
                           "coverage check voted " + std::string(vote.yes ? "yes" : "no") + " (" +
                               vote.message + ")");
    }
    json samples = json::array();
    for (double x : t) samples.push_back(x * 1e3);
    *out = {{"check_ms", Median(t) * 1e3},
            {"writes", writes},
            {"writes_s", t_writes},
            {"coverage_bytes", participant->CoverageMemoryBytes()},
            {"missing_pieces", vote.missing_total},
            {"samples_ms", samples}};
    return participant->Decide(req.tx, Decision::kAbort, "");
  };
  json full, half;
  WTX_RETURN_IF_ERROR(measure(false, &full));
  Progress(o, "coverage: every shard written: check " + full["check_ms"].dump() + " ms, " +
                  full["coverage_bytes"].dump() + " bookkeeping bytes");
  WTX_RETURN_IF_ERROR(measure(true, &half));
  Progress(o, "coverage: every other shard missing: check " + half["check_ms"].dump() + " ms");
  return json{{"coverage_check_ms", full["check_ms"]},
              {"coverage_bytes", full["coverage_bytes"]},
              {"details",
               {{"model", o.coverage_model},
                {"tp", o.coverage_tp},
                {"rank", 0},
                {"params", params.size()},
                {"shards", manifest->TotalShards()},
                {"derived", manifest->derived().size()},
                {"rank_bytes", manifest->TotalBytes()},
                {"method",
                 "every shard written through Participant::Write in benchmark_coverage_only mode "
                 "(coverage, epochs and journal records as usual, bytes neither copied nor "
                 "hashed), derived states refreshed, then Participant::CheckPrepare timed: "
                 "prepare's coverage, staleness and kernel-identity checks without the digest"},
                {"complete", full},
                {"every_other_shard_missing", half}}}};
}

}  // namespace wtx::bench
