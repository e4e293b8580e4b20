// Shared fixtures for tests: temporary directories, a small fused-QKV manifest, and a cluster
// of in-process participants with a coordinator.
#pragma once

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/testing/armed_crash_point.h"
#include "src/testing/fault_injection_fs.h"
#include "src/testing/inproc_cluster.h"
#include "src/txn/test_hooks.h"
#include "wtx/coordinator.h"
#include "wtx/device_live_memory.h"
#include "wtx/inproc_transport.h"
#include "wtx/manifest.h"
#include "wtx/participant.h"

namespace wtx::testing {

// A directory removed when the object dies.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = (std::filesystem::temp_directory_path() /
             ("wtx-test-" + std::to_string(rd()) + "-" + std::to_string(rd())))
                .string();
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }
  std::string sub(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

// qkv (bf16 [32, 8]: q rows 0-16, k 16-24, v 24-32), kv_b (bf16 [8, 4]), norm (f32 [8]),
// packed (u8 [4, 4], layout packed); modules attn = {qkv, kv_b}, rest = {norm, packed};
// derived W_UK_T from kv_b (attention), scales from qkv (post_load).
inline nlohmann::json SmallManifestJson() {
  return nlohmann::json::parse(R"({
    "params": [
      {"name": "qkv", "dtype": "bf16", "shape": [32, 8], "shards": [
        {"id": "q", "source": "q_proj", "source_shape": [16, 8], "box": [[0, 16], [0, 8]], "source_box": [[0, 16], [0, 8]]},
        {"id": "k", "source": "k_proj", "source_shape": [8, 8], "box": [[16, 24], [0, 8]], "source_box": [[0, 8], [0, 8]]},
        {"id": "v", "source": "v_proj", "source_shape": [8, 8], "box": [[24, 32], [0, 8]], "source_box": [[0, 8], [0, 8]]}]},
      {"name": "kv_b", "dtype": "bf16", "shape": [8, 4]},
      {"name": "norm", "dtype": "f32", "shape": [8]},
      {"name": "packed", "dtype": "u8", "shape": [4, 4], "shards": [
        {"id": "0", "source": "packed_src", "source_shape": [4, 4], "box": [[0, 4], [0, 4]], "source_box": [[0, 4], [0, 4]], "layout": "packed"}]}
    ],
    "modules": [{"name": "attn", "params": ["qkv", "kv_b"]}, {"name": "rest", "params": ["norm", "packed"]}],
    "derived": [{"name": "W_UK_T", "sources": ["kv_b"], "phase": "attention"},
                {"name": "scales", "sources": ["qkv"], "phase": "post_load"}]
  })");
}

inline ManifestPtr SmallManifest() { return ParseManifest(SmallManifestJson()).value(); }

// Bytes for a box of a parameter: a deterministic pattern from (seed, element index).
inline std::vector<uint8_t> Pattern(const Manifest& m, const std::string& param, const Box& box,
                                    uint32_t seed) {
  const ParamSpec& p = m.params()[*m.FindParam(param)];
  std::vector<uint8_t> out(static_cast<size_t>(NumElements(box)) * DTypeSize(p.dtype));
  std::mt19937 rng(seed * 7919u + static_cast<uint32_t>(box.empty() ? 0 : box[0].begin));
  for (auto& b : out) b = static_cast<uint8_t>(rng());
  return out;
}

// The live memory of each rank a test starts: the participant's default (host) unless the
// environment names another kind, WTX_TEST_MEMORY=reference-device: CTest runs the participant
// and recovery tests a second time that way (prefix "device."), through the participant's
// device path.
inline std::shared_ptr<LiveMemory> TestLiveMemory(const Manifest& manifest) {
  const char* name = std::getenv("WTX_TEST_MEMORY");
  if (name == nullptr || *name == '\0') return nullptr;
  auto kind = ParseLiveMemoryKind(name);
  auto memory = kind.ok() ? NewLiveMemory(kind.value(), manifest)
                          : Result<std::shared_ptr<LiveMemory>>(kind.status());
  if (!memory.ok()) {
    std::fprintf(stderr, "WTX_TEST_MEMORY: %s\n", memory.status().ToString().c_str());
    std::abort();
  }
  return memory.value();
}

// The live bytes of parameter `index`, read through the backend (host or device).
inline std::vector<uint8_t> LiveBytes(LiveMemory& memory, uint32_t index) {
  std::vector<uint8_t> out(memory.Size(index));
  Status s = memory.Load(index, 0, out.data(), out.size());
  if (!s.ok()) {
    std::fprintf(stderr, "reading live bytes: %s\n", s.ToString().c_str());
    std::abort();
  }
  return out;
}

// N ranks with the same manifest, each on its own fault-injecting filesystem, and a
// coordinator (the library's InProcCluster in a temporary directory). Ranks can be killed
// (with or without power loss) and restarted.
class Cluster {
 public:
  Cluster(int ranks, ManifestPtr manifest, std::string kernel = "k1")
      : manifest_(std::move(manifest)), cluster_(Options(ranks, manifest_, std::move(kernel))) {
    for (int r = 0; r < ranks; ++r) {
      Status s = cluster_.OpenRank(r);
      if (!s.ok()) Fail("starting rank " + std::to_string(r), s);
    }
    Status s = RestartCoordinator();
    if (!s.ok()) Fail("starting the coordinator", s);
  }

  Participant& rank(int r) { return cluster_.rank(r); }
  // The live memory of ranks started from now on (null: back to TestLiveMemory).
  void SetMemoryFactory(std::function<std::shared_ptr<LiveMemory>(const Manifest&)> f) {
    if (!f) f = TestLiveMemory;
    cluster_.set_memory_factory(
        [f = std::move(f)](int, const Manifest& m) -> Result<std::shared_ptr<LiveMemory>> {
          return f(m);
        });
  }
  // ParticipantOptions::landing_hash_threads of ranks started from now on (default 0).
  void SetLandingHashThreads(int n) { landing_hash_threads_ = n; }
  // ParticipantOptions::threads of ranks started from now on (default 0: one per core).
  void SetThreads(int n) { threads_ = n; }
  Coordinator& coordinator() { return cluster_.coordinator(); }
  FaultInjectionFileSystem& fs(int r) { return cluster_.rank_fs(r); }
  InProcTransport& transport() { return cluster_.transport(); }
  InProcCluster& cluster() { return cluster_; }
  const Manifest& manifest() const { return *manifest_; }
  std::string rank_dir(int r) const { return cluster_.rank_dir(r); }
  std::string coordinator_dir() const { return cluster_.coordinator_dir(); }

  // A clean shutdown of rank r (if up), then a start that resolves in doubt with the
  // coordinator.
  Status Restart(int r, CrashPoints* cp = nullptr, size_t rollback_budget = size_t{1} << 30) {
    cluster_.CloseRank(r);
    return cluster_.RestartRank(r, {cp, rollback_budget});
  }

  void Kill(int r, bool power_loss) { cluster_.KillRank(r, PowerLoss::Of(power_loss)); }

  // A clean shutdown of the coordinator (if up), a start, Recover, and every rank resolves in
  // doubt; the first failure is returned.
  Status RestartCoordinator(CrashPoints* cp = nullptr) {
    cluster_.CloseCoordinator();
    std::vector<std::pair<int, Status>> resolve_errors;
    WTX_RETURN_IF_ERROR(cluster_.RestartCoordinator(cp, &resolve_errors));
    return resolve_errors.empty() ? Status::OK() : resolve_errors.front().second;
  }

  void KillCoordinator(bool power_loss) { cluster_.KillCoordinator(PowerLoss::Of(power_loss)); }

  // Writes every parameter whole on every rank with pattern `seed`.
  Status WriteAll(uint32_t seed) {
    for (int r = 0; r < cluster_.ranks(); ++r) {
      Participant* p = &cluster_.rank(r);
      for (const auto& ps : manifest_->params()) {
        Box box = WholeBox(ps.shape);
        auto bytes = Pattern(*manifest_, ps.name, box, seed);
        WritePiece w{ps.name, "", box, bytes.data(), bytes.size()};
        WTX_RETURN_IF_ERROR(p->Write({&w, 1}));
      }
    }
    return Status::OK();
  }

  Status RefreshAll() {
    for (int r = 0; r < cluster_.ranks(); ++r) {
      auto refreshed = cluster_.rank(r).Refresh("*");
      if (!refreshed.ok()) return refreshed.status();
    }
    return Status::OK();
  }

  // begin full, write all, refresh, commit.
  CommitOutcome FullCommit(const std::string& tx, uint32_t seed) {
    BeginRequest b;
    b.tx = tx;
    b.kind = TxKind::kFull;
    BeginOutcome bo = coordinator().Begin(b);
    if (!bo.status.ok()) {
      CommitOutcome o;
      o.status = bo.status;
      return o;
    }
    if (Status s = WriteAll(seed); !s.ok()) {
      CommitOutcome o;
      o.status = s;
      return o;
    }
    if (Status s = RefreshAll(); !s.ok()) {
      CommitOutcome o;
      o.status = s;
      return o;
    }
    return coordinator().Commit(tx);
  }

 private:
  [[noreturn]] static void Fail(const std::string& what, const Status& s) {
    std::fprintf(stderr, "test cluster: %s: %s\n", what.c_str(), s.ToString().c_str());
    std::abort();
  }

  InProcClusterOptions Options(int ranks, const ManifestPtr& manifest, std::string kernel) {
    InProcClusterOptions o;
    o.dir = dir_.path();
    o.manifests.assign(ranks, manifest);
    o.kernel_identity = std::move(kernel);
    o.memory = [](int, const Manifest& m) -> Result<std::shared_ptr<LiveMemory>> {
      return TestLiveMemory(m);
    };
    o.customize_rank = [this](int, ParticipantOptions& po) {
      po.landing_hash_threads = landing_hash_threads_;
      po.threads = threads_;
    };
    return o;
  }

  TempDir dir_;
  ManifestPtr manifest_;
  int landing_hash_threads_ = 0;  // read by the cluster's customize_rank
  int threads_ = 0;               // read by the cluster's customize_rank
  InProcCluster cluster_;         // after dir_: closed before the directory is removed
};

// What a shell command did: its exit status (128 + N when killed by signal N, -1 when it could
// not be started) and its standard output (with standard error when merged).
struct CommandResult {
  int code = -1;
  std::string out;
};

inline CommandResult RunCommand(const std::string& cmd, bool merge_stderr = true) {
  CommandResult r;
  FILE* f = popen((cmd + (merge_stderr ? " 2>&1" : " 2>/dev/null")).c_str(), "r");
  if (f == nullptr) return r;
  std::array<char, 4096> buf;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), f)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(f);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : (WIFSIGNALED(st) ? 128 + WTERMSIG(st) : -1);
  return r;
}

// A begin request, for the participant and landing tests.
inline BeginRequest Req(const std::string& tx, TxKind kind, std::string base = "",
                        std::vector<std::string> modules = {},
                        std::vector<std::string> sources = {}, bool rollback = false,
                        VerifyMode verify = VerifyMode::kTouched) {
  BeginRequest b;
  b.tx = tx;
  b.kind = kind;
  b.base = std::move(base);
  b.modules = std::move(modules);
  b.sources = std::move(sources);
  b.rollback = rollback;
  b.verify = verify;
  return b;
}

}  // namespace wtx::testing
