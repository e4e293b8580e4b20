// load_vs_read: `wtx load` of a safetensors checkpoint against reading the same files.
#include <fcntl.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <set>

#include "src/conformance/checkpoint_load.h"
#include "src/conformance/simulator.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_util.h"
#include "wtx/hf_manifest.h"
#include "wtx/safetensors.h"

namespace wtx::bench {

using nlohmann::json;

namespace {

// Writes every source tensor of the model (tp 1 manifest) into `shards` safetensors files with
// an index, with pattern bytes. Returns the file paths.
Result<std::vector<std::string>> WriteModelCheckpoint(const Manifest& m, const std::string& dir,
                                                      int shards) {
  struct T {
    std::string name;
    Shape shape;
    DType dtype;
  };
  std::vector<T> ts;
  std::set<std::string> seen;
  for (const ParamSpec& p : m.params()) {
    for (const ShardSpec& s : p.shards) {
      if (!s.padding && seen.insert(s.source).second) {
        ts.push_back({s.source, s.source_shape, p.dtype});
      }
    }
  }
  std::vector<std::string> files;
  json weight_map = json::object();
  const size_t per = (ts.size() + shards - 1) / shards;
  std::vector<uint8_t> chunk;
  for (int k = 0; k < shards; ++k) {
    const std::string name = "model-" + std::to_string(k + 1) + ".safetensors";
    json header = json::object();
    uint64_t off = 0;
    const size_t first = k * per, last = std::min(ts.size(), (k + 1) * per);
    for (size_t i = first; i < last; ++i) {
      const uint64_t n = static_cast<uint64_t>(NumElements(ts[i].shape)) * DTypeSize(ts[i].dtype);
      header[ts[i].name] = {{"dtype", SafetensorsDTypeName(ts[i].dtype)},
                            {"shape", ts[i].shape},
                            {"data_offsets", {off, off + n}}};
      weight_map[ts[i].name] = name;
      off += n;
    }
    std::string h = header.dump();
    const std::string path = (dir + "/").append(name);
    std::ofstream out(path, std::ios::binary);
    uint64_t hn = h.size();
    for (int b = 0; b < 8; ++b) out.put(static_cast<char>((hn >> (8 * b)) & 0xff));
    out << h;
    for (size_t i = first; i < last; ++i) {
      chunk.resize(static_cast<size_t>(NumElements(ts[i].shape)) * DTypeSize(ts[i].dtype));
      FillPattern(chunk.data(), chunk.size(), i + 1);
      out.write(reinterpret_cast<const char*>(chunk.data()),
                static_cast<std::streamsize>(chunk.size()));
    }
    if (!out) return Status::IOError(path + ": cannot write");
    files.push_back(path);
  }
  std::ofstream(dir + "/model.safetensors.index.json") << json{{"weight_map", weight_map}}.dump();
  return files;
}

// The fixed cost of any load: a model of a few KiB (qwen2, hidden 64, 2 layers) in the same
// family as the measured one, written as an HF config.json under `dir`.
constexpr const char* kFixedCostConfig = R"({"architectures": ["Qwen2ForCausalLM"],
  "model_type": "qwen2", "hidden_size": 64, "intermediate_size": 96, "num_attention_heads": 4,
  "num_hidden_layers": 2, "num_key_value_heads": 2, "tie_word_embeddings": true,
  "torch_dtype": "bfloat16", "vocab_size": 256})";

// Reads file `f` whole with read() into `dst` (at most `cap` bytes). Returns the bytes read.
Result<size_t> ReadFile(const std::string& f, uint8_t* dst, size_t cap) {
  size_t total = 0;
  int fd = ::open(f.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Status::IOError(f + ": cannot open");
  while (true) {
    const size_t want = std::min<size_t>(cap - total, size_t{16} << 20);
    if (want == 0) break;
    const ssize_t n = ::read(fd, dst + total, want);
    if (n < 0) {
      ::close(fd);
      return Status::IOError(f + ": read failed");
    }
    if (n == 0) break;
    total += static_cast<size_t>(n);
  }
  ::close(fd);
  return total;
}

}  // namespace

Result<json> BenchLoad(const BenchOptions& o) {
  WTX_ASSIGN_OR_RETURN(dir, ScratchDir::Make(o.scratch_dir, "load"));
  HfManifestOptions ho;
  WTX_ASSIGN_OR_RETURN(manifest, ManifestFromHfConfigFile(o.model, ho));
  const std::string ckpt = dir.path() + "/checkpoint";
  std::filesystem::create_directories(ckpt);
  WTX_ASSIGN_OR_RETURN(files, WriteModelCheckpoint(*manifest, ckpt, o.quick ? 2 : 4));
  std::vector<size_t> sizes;
  size_t file_bytes = 0;
  for (const auto& f : files) {
    sizes.push_back(std::filesystem::file_size(f));
    file_bytes += sizes.back();
  }
  Progress(o, "load: checkpoint of " + o.model + " written: " + std::to_string(files.size()) +
                  " files, " + std::to_string(file_bytes) + " bytes");
  const int threads = ResolvedThreads(o);
  CheckpointLoadRequest req;
  req.checkpoint = ckpt;
  req.hf_config = o.model;
  req.tp = 1;
  int run_id = 0;
  // One `wtx load`: plan (open, validate) + begin + every rank reads its slices + commit, with
  // fresh participants and journals, as the command does.
  // Where a load's time goes (per round): planning (manifests, opening and validating the
  // checkpoint), the run (journals, live memory, the copies, the 2PC, closing), the removal of
  // the journals.
  std::vector<double> t_plan, t_run, t_cleanup;
  auto load_of = [&](const CheckpointLoadRequest& r, bool record) -> Result<std::string> {
    const double t0 = NowSeconds();
    WTX_ASSIGN_OR_RETURN(plan, PlanCheckpointLoad(r));
    sim::SimOptions so;
    so.journal_dir = dir.path() + "/journals-" + std::to_string(run_id++);
    so.threads = threads;
    const double t1 = NowSeconds();
    WTX_ASSIGN_OR_RETURN(run, sim::RunScenario(plan.scenario, so));
    json out = CheckpointLoadOutput(plan, run);
    const double t2 = NowSeconds();
    std::error_code ec;
    std::filesystem::remove_all(so.journal_dir, ec);
    if (record) {
      t_plan.push_back(t1 - t0);
      t_run.push_back(t2 - t1);
      t_cleanup.push_back(NowSeconds() - t2);
    }
    if (out["outcome"] != "committed") {
      return Status::IOError("load did not commit: " + out.dump());
    }
    return out["version"].get<std::string>();
  };
  // Reading the files into fresh memory (the loader's destination is fresh too: the live
  // buffers of new participants, advised to huge pages), `threads` files in flight.
  auto read = [&]() -> Result<size_t> {
    std::vector<std::unique_ptr<Buffer>> bufs;
    for (size_t n : sizes) {
      bufs.push_back(std::make_unique<Buffer>(n, /*zeroed=*/true));
      if (!bufs.back()->data()) return Status::IOError("cannot allocate " + std::to_string(n));
      bufs.back()->AdviseHugePages();
    }
    std::vector<Result<size_t>> got(files.size(), size_t{0});
    ParallelFor(threads, files.size(),
                [&](size_t k) { got[k] = ReadFile(files[k], bufs[k]->data(), sizes[k]); });
    size_t total = 0;
    for (auto& g : got) {
      if (!g.ok()) return g.status();
      total += g.value();
    }
    return total;
  };
  // The fixed cost of any load (journals created and synced, the 2PC, a few KiB of bytes):
  // the same load of a tiny model of the same family, timed between the rounds.
  const std::string tiny_dir = dir.path() + "/fixed-cost";
  std::filesystem::create_directories(tiny_dir + "/checkpoint");
  std::ofstream(tiny_dir + "/config.json") << kFixedCostConfig;
  WTX_ASSIGN_OR_RETURN(tiny_manifest, ManifestFromHfConfigFile(tiny_dir + "/config.json", ho));
  WTX_RETURN_IF_ERROR(WriteModelCheckpoint(*tiny_manifest, tiny_dir + "/checkpoint", 1).status());
  CheckpointLoadRequest tiny_req = req;
  tiny_req.checkpoint = tiny_dir + "/checkpoint";
  tiny_req.hf_config = tiny_dir + "/config.json";
  auto load = [&]() { return load_of(req, /*record=*/true); };
  // Warm-up: page cache and allocator.
  WTX_ASSIGN_OR_RETURN(version, load());
  WTX_ASSIGN_OR_RETURN(n0, read());
  if (n0 != file_bytes) return Status::IOError("short read of the checkpoint");
  WTX_RETURN_IF_ERROR(load_of(tiny_req, /*record=*/false).status());
  const int rounds = o.quick ? 3 : 7;
  std::vector<double> t_load, t_read, t_fixed;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      const double t0 = NowSeconds();
      if ((r + k) % 2 == 0) {
        WTX_ASSIGN_OR_RETURN(v, load());
        t_load.push_back(NowSeconds() - t0);
        if (v != version) return Status::IOError("load version changed between rounds");
      } else {
        WTX_ASSIGN_OR_RETURN(n, read());
        t_read.push_back(NowSeconds() - t0);
        if (n != file_bytes) return Status::IOError("short read of the checkpoint");
      }
    }
    const double t0 = NowSeconds();
    WTX_RETURN_IF_ERROR(load_of(tiny_req, /*record=*/false).status());
    t_fixed.push_back(NowSeconds() - t0);
  }
  const double tl = Median(t_load), tr = Median(t_read), tf = Median(t_fixed);
  Progress(o, "load: wtx load " + std::to_string(tl * 1e3) + " ms, read " +
                  std::to_string(tr * 1e3) + " ms over " + std::to_string(file_bytes) + " bytes");
  const double gb = static_cast<double>(file_bytes) / 1e9;
  return json{{"load_vs_read", tr / tl},
              {"details",
               {{"bytes", file_bytes},
                {"threads", threads},
                {"plan_ms", Median(t_plan) * 1e3},
                {"run_ms", Median(t_run) * 1e3},
                {"journal_removal_ms", Median(t_cleanup) * 1e3},
                {"files", files.size()},
                {"rounds", rounds},
                {"version", version},
                {"load_ms", tl * 1e3},
                {"load_gb_per_s", gb / tl},
                {"read_ms", tr * 1e3},
                {"read_gb_per_s", gb / tr},
                // The load of a model of a few KiB: what any load costs whatever its size.
                {"fixed_cost_ms", tf * 1e3},
                // read / (load - fixed cost): the data path alone against read().
                {"load_without_fixed_cost_vs_read", tl > tf ? tr / (tl - tf) : 0.0}}}};
}

}  // namespace wtx::bench
