// `wtx bench [--model PATH/config.json] [--json] [--quick]`: what a transaction costs against
// the physical limit. Every figure is measured against a baseline in the same run (see
// tools/bench/bench.h and docs/performance.md); progress goes to stderr, the figures to stdout.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "tools/bench/bench.h"
#include "tools/wtx/commands.h"
#include "wtx/dtype.h"
#include "wtx/hf_manifest.h"

namespace wtx::cli {
namespace {

using nlohmann::json;
namespace fs = std::filesystem;

struct BenchArgs {
  std::string model;
  std::string coverage_model;
  int coverage_tp = 8;
  int64_t landing_bucket_mib = 32;
  int threads = 0;
  std::string shared_dir;
  std::string scratch_dir;
  std::vector<std::string> only;
  bool json = false;
  bool quick = false;
  bool coverage_tp_given = false;
  bool model_given = false;           // --model was on the command line
  bool coverage_model_given = false;  // --coverage-model was on the command line
  std::string compare;                // --compare OLD.json: an earlier `wtx bench --json`
};

// Where the model configs (models/<name>/config.json) come from, and which lookup found them.
struct ModelsDir {
  std::string dir;     // the folder that holds models/
  std::string source;  // "--shared-dir", "WTX_CONFORMANCE_DIR", "installed", "build tree",
                       // "working directory"
};

bool HasModels(const fs::path& dir, const std::vector<std::string>& names) {
  std::error_code ec;
  for (const std::string& n : names) {
    if (!fs::is_regular_file(dir / "models" / n / "config.json", ec)) return false;
  }
  return true;
}

// The folder with models/ holding `names`: $WTX_CONFORMANCE_DIR; else the installed copy
// (`cmake --install`: <prefix>/<datadir>/wtx beside <prefix>/bin/wtx, or the configured
// prefix's); else the first ancestor of the executable that has tests/conformance/models or
// shared/models (the build tree inside its checkout), else the source tree the binary was built
// from; else the same upward from the working directory. dir is empty when none has them.
ModelsDir FindModelsDir(const std::vector<std::string>& names) {
  if (const char* env = std::getenv("WTX_CONFORMANCE_DIR"); env && *env) {
    return {env, "WTX_CONFORMANCE_DIR"};
  }
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec).parent_path();
  const fs::path datadir = WTX_INSTALL_DATADIR;
  for (const fs::path& d : {datadir.is_absolute() ? datadir : exe.parent_path() / datadir,
                            fs::path(WTX_INSTALL_FULL_DATADIR)}) {
    if (HasModels(d / "wtx", names)) return {(d / "wtx").string(), "installed"};
  }
  auto upward = [&](fs::path p) -> std::string {
    for (; !p.empty(); p = p.parent_path()) {
      if (HasModels(p / "tests" / "conformance", names)) {
        return (p / "tests" / "conformance").string();
      }
      if (HasModels(p / "shared", names)) return (p / "shared").string();
      if (p == p.parent_path()) break;
    }
    return "";
  };
  if (std::string d = upward(exe); !d.empty()) return {d, "build tree"};
  const fs::path source = fs::path(WTX_SOURCE_DIR) / "tests" / "conformance";
  if (HasModels(source, names)) return {source.string(), "build tree"};
  if (std::string d = upward(fs::current_path(ec)); !d.empty()) return {d, "working directory"};
  return {};
}

struct Figure {
  const char* key;
  const char* goal;  // human-readable
  bool (*met)(double);
};

const Figure kFigures[] = {
    {"update_vs_memcpy", ">= 0.90", [](double v) { return v >= 0.90; }},
    // Against the streaming copy of the same bytes on as many threads: one pass over the bytes.
    {"update_vs_stream_copy", ">= 0.90", [](double v) { return v >= 0.90; }},
    // The same update with metrics against without (issue 52: within 2 %).
    {"update_metrics_on_vs_off", ">= 0.98", [](double v) { return v >= 0.98; }},
    {"hash_vs_xxh3", ">= 0.95", [](double v) { return v >= 0.95; }},
    {"coverage_check_ms", "< 10", [](double v) { return v < 10; }},
    {"coverage_bytes", "< 1 MiB", [](double v) { return v < 1024.0 * 1024; }},
    {"synced_writes_per_tx", "<= 2", [](double v) { return v <= 2; }},
    {"synced_writes_per_tx_coordinator", "<= 1", [](double v) { return v <= 1; }},
    {"replay_records_per_s", ">= 1e6", [](double v) { return v >= 1e6; }},
    {"journal_vs_rocksdb", ">= 0.80", [](double v) { return v >= 0.80; }},
    // The default data path: the engine's thread copies, the data-path threads hash.
    {"landed_update_vs_memcpy", ">= 0.95", [](double v) { return v >= 0.95; }},
    // --threads 1: the copy and the hash in the engine's thread.
    {"landed_update_vs_memcpy_one_thread", ">= 0.80", [](double v) { return v >= 0.80; }},
    // Not a goal: all hashing left to prepare, the second pass the data path avoids.
    {"hash_at_prepare_landed_update_vs_memcpy", "(extra)", nullptr},
    {"verify_all_vs_xxh3", "<= 1.10", [](double v) { return v <= 1.10; }},
    {"load_vs_read", ">= 0.85", [](double v) { return v >= 0.85; }},
    // The trainer's expected version against one read of what it sends: no second pass.
    {"expected_version_vs_xxh3", ">= 0.90", [](double v) { return v >= 0.90; }},
};

// The figures of kFigures measurement `name` gives (--only's names).
std::vector<const char*> FiguresOf(const std::string& name) {
  static const std::map<std::string, std::vector<const char*>> kOf = {
      {"update", {"update_vs_memcpy", "update_vs_stream_copy", "update_metrics_on_vs_off"}},
      {"hash", {"hash_vs_xxh3"}},
      {"coverage", {"coverage_check_ms", "coverage_bytes"}},
      {"syncs", {"synced_writes_per_tx", "synced_writes_per_tx_coordinator"}},
      {"replay", {"replay_records_per_s"}},
      {"journal", {"journal_vs_rocksdb"}},
      {"landing",
       {"landed_update_vs_memcpy", "landed_update_vs_memcpy_one_thread", "verify_all_vs_xxh3"}},
      {"load", {"load_vs_read"}},
      {"expect", {"expected_version_vs_xxh3"}},
  };
  auto it = kOf.find(name);
  return it == kOf.end() ? std::vector<const char*>{} : it->second;
}

// --compare: each figure of kFigures both runs have, old and new, and whether it moved the
// wrong way: "worse" when it changed by more than 5 % against its goal's direction (a ">="
// figure fell, a "<"/"<=" figure rose; the extra figures count higher as better), "better"
// when by more than 5 % the other way, "same" otherwise.
json CompareFigures(const json& old_out, const json& new_out) {
  json figures = json::object();
  for (const Figure& f : kFigures) {
    if (!old_out.contains(f.key) || !new_out.contains(f.key)) continue;
    if (!old_out[f.key].is_number() || !new_out[f.key].is_number()) continue;
    const double o = old_out[f.key].get<double>(), n = new_out[f.key].get<double>();
    const bool lower_better = f.goal[0] == '<';
    std::string verdict = "same";
    if (o != 0) {
      const double change = n / o - 1;
      const double good = lower_better ? -change : change;
      if (good < -0.05) verdict = "worse";
      if (good > 0.05) verdict = "better";
    }
    figures[f.key] = {{"old", o},
                      {"new", n},
                      {"new_vs_old", o != 0 ? json(n / o) : json()},
                      {"verdict", verdict}};
  }
  return figures;
}

std::string Num(double v) {
  char buf[64];
  if (v != 0 && (v >= 1e6 || v < 1e-2)) {
    std::snprintf(buf, sizeof buf, "%.3g", v);
  } else {
    std::snprintf(buf, sizeof buf, "%.3f", v);
  }
  return buf;
}

// One line of context per measurement for the human-readable report.
std::string Baseline(const std::string& name, const json& d) {
  auto g = [&](const char* k) { return d.contains(k) ? Num(d[k].get<double>()) : "?"; };
  if (name == "update") {
    const std::string threads = d.value("threads", json(1)).dump();
    return "memcpy " + g("memcpy_ms") + " ms (" + g("memcpy_gb_per_s") + " GB/s), stream copy " +
           g("stream_copy_ms") + " ms (on " + threads + " threads: " + g("stream_copy_threads_ms") +
           " ms), transaction on " + threads + " threads " + g("transaction_ms") + " ms for " +
           d.value("bytes", json(0)).dump() + " bytes";
  }
  if (name == "hash") {
    return "XXH3_64bits " + g("xxh3_gb_per_s") + " GB/s, ParamDigest " +
           g("param_digest_gb_per_s") + " GB/s";
  }
  if (name == "coverage") {
    return d.value("shards", json(0)).dump() + " shards, " + d.value("params", json(0)).dump() +
           " params; every other shard missing: " +
           Num(d["every_other_shard_missing"].value("check_ms", 0.0)) + " ms";
  }
  if (name == "syncs") {
    return "all-file syncs per tx: rank " + g("participant_all_file_syncs_per_tx") +
           ", coordinator " + g("coordinator_all_file_syncs_per_tx");
  }
  if (name == "replay") {
    return "raw RocksDB scan " + g("rocksdb_scan_records_per_s") + " records/s over " +
           d.value("records", json(0)).dump() + " records";
  }
  if (name == "landing") {
    return "memcpy " + g("memcpy_ms") + " ms, landed update " + g("landed_update_ms") + " ms on " +
           d.value("threads", json(1)).dump() +
           " threads (one thread: " + g("one_thread_landed_update_ms") +
           " ms, hashing at prepare only: " + g("hash_at_prepare_landed_update_ms") +
           " ms; copy-then-hash without wtx: " + g("copy_then_hash_ms") + " ms, in one thread " +
           g("copy_then_hash_one_thread_ms") + " ms) in " + d.value("buckets", json(0)).dump() +
           " buckets of " + Num(d.value("bucket_bytes", 0.0) / (1024.0 * 1024)) + " MiB; xxh3 " +
           g("xxh3_ms") + " ms, verify all " + g("verify_all_ms") + " ms for " +
           d.value("bytes", json(0)).dump() + " bytes";
  }
  if (name == "load") {
    return "read() of the files " + g("read_ms") + " ms (" + g("read_gb_per_s") + " GB/s, " +
           d.value("threads", json(1)).dump() + " in flight), wtx load " + g("load_ms") +
           " ms for " + d.value("bytes", json(0)).dump() + " bytes";
  }
  if (name == "expect") {
    return "XXH3 of the sources " + g("xxh3_ms") + " ms, expected version (tp " +
           d.value("tp", json(0)).dump() + ", source by source) " + g("builder_ms") +
           " ms; assembled then hashed (the reference) " + g("assembled_ms") + " ms for " +
           d.value("bytes", json(0)).dump() + " bytes";
  }
  if (name == "journal") {
    return "raw RocksDB " + g("rocksdb_records_per_s") + " records/s, journal " +
           g("journal_records_per_s") + " records/s";
  }
  return "";
}

int RunBench(BenchArgs a) {
  // The earlier run to compare with is read first: a bad file is refused before measuring.
  json old_out;
  if (!a.compare.empty()) {
    auto old = ReadJsonFileArg("--compare", a.compare);
    if (!old.ok()) {
      std::cerr << "wtx bench: " << old.status().message() << "\n";
      return 2;
    }
    bool any = false;
    for (const Figure& f : kFigures) any = any || (old->is_object() && old->contains(f.key));
    if (!any) {
      std::cerr << "wtx bench: --compare '" << a.compare
                << "': not the output of `wtx bench --json` (no figure such as " << kFigures[0].key
                << ")\n";
      return 2;
    }
    old_out = std::move(old).value();
  }
  for (const auto& [given, value, flag] :
       {std::tuple{a.model_given, &a.model, "--model"},
        std::tuple{a.coverage_model_given, &a.coverage_model, "--coverage-model"}}) {
    if (given && value->empty()) {
      std::cerr << "wtx bench: " << flag << ": empty (a config.json path, or leave the flag out "
                << "for the default model)\n";
      return 2;
    }
  }
  // The default models (a --model or --coverage-model given needs none).
  std::vector<std::string> names;
  if (a.model.empty()) names.push_back(a.quick ? "tiny-qwen2" : "qwen2.5-0.5b");
  if (a.coverage_model.empty()) names.push_back(a.quick ? "tiny-deepseek" : "kimi-k2");
  ModelsDir models;
  if (!a.shared_dir.empty()) {
    std::error_code ec;
    if (!fs::is_directory(a.shared_dir, ec)) {
      std::cerr << "wtx bench: --shared-dir " << a.shared_dir << ": not a directory\n";
      return 2;
    }
    for (const std::string& n : names) {
      if (!HasModels(a.shared_dir, {n})) {
        std::cerr << "wtx bench: --shared-dir " << a.shared_dir << ": no models/" << n
                  << "/config.json there (the folder that holds models/)\n";
        return 2;
      }
    }
    models = {a.shared_dir, "--shared-dir"};
  } else if (!names.empty()) {
    models = FindModelsDir(names);
    if (models.dir.empty()) {
      std::cerr << "wtx bench: cannot find models/";
      for (size_t i = 0; i < names.size(); ++i) std::cerr << (i ? ", " : "") << names[i];
      std::cerr << " (not installed beside the executable, no build tree above it, none above "
                   "the working directory); pass --shared-dir or --model and --coverage-model\n";
      return 2;
    }
  }
  auto model_path = [&](const std::string& name) {
    return models.dir + "/models/" + name + "/config.json";
  };
  if (a.model.empty()) a.model = model_path(a.quick ? "tiny-qwen2" : "qwen2.5-0.5b");
  if (a.coverage_model.empty()) {
    a.coverage_model = model_path(a.quick ? "tiny-deepseek" : "kimi-k2");
    if (a.quick && !a.coverage_tp_given) a.coverage_tp = 1;
  }
  if (!models.dir.empty()) {
    std::cerr << "wtx bench: models from " << models.dir << " (" << models.source << ")\n";
  }
  // Every model is checked before any work, whichever measurements --only runs: read as the
  // measurement reads it and laid out as it lays it out (the update model at tp 1 in bf16, the
  // coverage model's rank 0 at --coverage-tp), so a bad path or degree exits 2 at once.
  {
    HfManifestOptions update_layout;
    update_layout.dtype = DType::kBF16;
    HfManifestOptions coverage_layout;
    coverage_layout.tp = a.coverage_tp;
    const std::tuple<const char*, const std::string*, const HfManifestOptions*> checks[] = {
        {"--model", &a.model, &update_layout},
        {"--coverage-model", &a.coverage_model, &coverage_layout}};
    for (const auto& [flag, path, layout] : checks) {
      auto config = ReadJsonFileArg(flag, *path);
      Status bad = config.status();
      if (bad.ok()) {
        auto m = ManifestFromHfConfig(config.value(), *layout);
        if (!m.ok()) {
          bad = Status::InvalidArgument(
              std::string(flag) + " '" + *path + "'" +
              (layout->tp > 1 ? " at --coverage-tp " + std::to_string(layout->tp) : std::string()) +
              ": " + m.status().message());
        }
      }
      if (!bad.ok()) {
        std::cerr << "wtx bench: " << bad.message() << "\n";
        return 2;
      }
    }
  }
  std::error_code ec;
  std::string parent = a.scratch_dir.empty() ? fs::temp_directory_path(ec).string() : a.scratch_dir;
  if (!fs::is_directory(parent, ec)) {
    std::cerr << "wtx bench: scratch directory " << parent << " does not exist\n";
    return 2;
  }

  bench::BenchOptions o;
  o.quick = a.quick;
  o.model = a.model;
  o.coverage_model = a.coverage_model;
  o.coverage_tp = a.coverage_tp;
  o.landing_bucket_bytes = static_cast<size_t>(a.landing_bucket_mib) << 20;
  o.threads = a.threads;
  o.scratch_dir = parent;
  o.progress = &std::cerr;

  using Fn = Result<json> (*)(const bench::BenchOptions&);
  const std::vector<std::pair<std::string, Fn>> all = {
      {"update", bench::BenchUpdate},     {"hash", bench::BenchHash},
      {"coverage", bench::BenchCoverage}, {"syncs", bench::BenchSyncs},
      {"replay", bench::BenchReplay},     {"journal", bench::BenchJournal},
      {"landing", bench::BenchLanding},   {"load", bench::BenchLoad},
      {"expect", bench::BenchExpect},
  };
  for (const auto& name : a.only) {
    bool known = false;
    for (const auto& [n, fn] : all) known = known || n == name;
    if (!known) {
      std::cerr << "wtx bench: --only: unknown measurement '" << name
                << "' (update, hash, coverage, syncs, replay, journal, landing, load, expect)\n";
      return 2;
    }
  }

  json out = json::object();
  json details = json::object();
  json errors = json::object();
  const double t0 = bench::NowSeconds();
  for (const auto& [name, fn] : all) {
    if (!a.only.empty() && std::find(a.only.begin(), a.only.end(), name) == a.only.end()) {
      continue;
    }
    Result<json> r = Status::Error(ErrorCode::kIOError, "not run");
    try {
      r = fn(o);
    } catch (const std::exception& e) {  // bad_alloc and the like: report, go on
      r = Status::Error(ErrorCode::kIOError, std::string("exception: ") + e.what());
    }
    if (!r.ok()) {
      std::cerr << "wtx bench: " << name << ": " << r.status().ToString() << "\n";
      errors[name] = r.status().ToString();
      continue;
    }
    for (auto& [k, v] : r->items()) {
      if (k == "details") {
        details[name] = v;
      } else {
        out[k] = v;
      }
    }
  }
  // The baselines' absolute numbers, gathered from the details.
  json baselines = json::object();
  auto pick = [&](const char* m, const char* k, const char* as) {
    if (details.contains(m) && details[m].contains(k)) baselines[as] = details[m][k];
  };
  pick("update", "memcpy_gb_per_s", "memcpy_gb_per_s");
  pick("update", "stream_copy_gb_per_s", "stream_copy_gb_per_s");
  pick("update", "bytes", "update_bytes");
  pick("hash", "xxh3_gb_per_s", "xxh3_gb_per_s");
  pick("replay", "rocksdb_scan_records_per_s", "rocksdb_scan_records_per_s");
  pick("journal", "rocksdb_records_per_s", "rocksdb_put_records_per_s");
  pick("load", "read_gb_per_s", "checkpoint_read_gb_per_s");
  out["baselines"] = baselines;
  out["details"] = details;
  out["machine"] = bench::MachineInfo();
  out["quick"] = a.quick;
  out["models"] = {{"dir", models.dir.empty() ? json() : json(models.dir)},
                   {"source", models.source.empty() ? json() : json(models.source)},
                   {"model", a.model},
                   {"coverage_model", a.coverage_model}};
  out["seconds"] = bench::NowSeconds() - t0;
  if (!errors.empty()) {
    out["errors"] = errors;
    // Each figure a failed measurement would have given, with why it was not measured.
    json not_measured = json::object();
    for (const auto& [name, why] : errors.items()) {
      for (const char* key : FiguresOf(name)) not_measured[key] = why;
    }
    out["not_measured"] = not_measured;
  }
  if (!a.compare.empty()) {
    out["compare"] = {{"old", a.compare}, {"figures", CompareFigures(old_out, out)}};
  }

  if (a.json) {
    std::cout << out.dump(2) << "\n";
  } else {
    const json& m = out["machine"];
    std::cout << "wtx bench" << (a.quick ? " --quick" : "") << ": " << m.value("cpu", "?") << ", "
              << m.value("cores", 0) << " cores, "
              << Num(m.value("memory_bytes", 0.0) / (1024.0 * 1024 * 1024)) << " GiB, load "
              << Num(m.value("loadavg_1min", 0.0)) << "\n\n";
    std::ostringstream t;
    t << "  figure                              value        goal       met\n";
    for (const Figure& f : kFigures) {
      if (!out.contains(f.key)) continue;
      const double v = out[f.key].get<double>();
      std::string key = f.key, val = Num(v), goal = f.goal;
      key.resize(std::max<size_t>(36, key.size() + 1), ' ');
      val.resize(13, ' ');
      goal.resize(11, ' ');
      t << "  " << key << val << goal << (!f.met ? "-" : f.met(v) ? "yes" : "NO") << "\n";
    }
    if (out.contains("not_measured")) {
      for (const auto& [key, why] : out["not_measured"].items()) {
        std::string k = key;
        k.resize(std::max<size_t>(36, k.size() + 1), ' ');
        t << "  " << k << "NOT MEASURED: " << why.get<std::string>() << "\n";
      }
    }
    std::cout << t.str() << "\n";
    if (out.contains("compare")) {
      std::ostringstream c;
      c << "  against " << a.compare << ":\n"
        << "  figure                              old          new          new/old  verdict\n";
      for (const auto& [key, f] : out["compare"]["figures"].items()) {
        std::string k = key, o = Num(f["old"].get<double>()), n = Num(f["new"].get<double>());
        std::string r = f["new_vs_old"].is_number() ? Num(f["new_vs_old"].get<double>()) : "-";
        k.resize(std::max<size_t>(36, k.size() + 1), ' ');
        o.resize(13, ' ');
        n.resize(13, ' ');
        r.resize(9, ' ');
        c << "  " << k << o << n << r << f["verdict"].get<std::string>() << "\n";
      }
      std::cout << c.str() << "\n";
    }
    for (const auto& [name, d] : details.items()) {
      std::cout << "  " << name << ": " << Baseline(name, d) << "\n";
    }
    std::cout << "\n  " << Num(out["seconds"].get<double>()) << " s; `wtx bench --json` prints "
              << "every detail\n";
  }
  return errors.empty() ? 0 : 1;
}

}  // namespace

void RegisterBenchCommand(CLI::App& app, int* exit_code) {
  auto a = std::make_shared<BenchArgs>();
  CLI::App* cmd = app.add_subcommand(
      "bench",
      "Measure what a transaction costs against the physical limit (memcpy, XXH3, RocksDB), "
      "as ratios to baselines measured in the same run");
  cmd->add_option("--model", a->model,
                  "config.json of the update_vs_memcpy model (default: shared/models/"
                  "qwen2.5-0.5b, with --quick tiny-qwen2)");
  cmd->add_option("--coverage-model", a->coverage_model,
                  "config.json of the coverage_check_ms model (default: shared/models/kimi-k2 "
                  "at --coverage-tp 8, with --quick tiny-deepseek at tp 1)");
  AddIntOption(cmd, "--coverage-tp", &a->coverage_tp, kRankCountBounds,
               "TP degree of the coverage model (rank 0)");
  AddIntOption(cmd, "--landing-bucket-mib", &a->landing_bucket_mib, 0, 65536,
               "the landing figure's engine lands in buckets of this many MiB (larger "
               "parameters in row slices, smaller ones packed); 0: one parameter at a time");
  AddDataThreadsOption(cmd, &a->threads);
  cmd->add_option("--shared-dir", a->shared_dir,
                  "the folder that holds models/<name>/config.json (default: "
                  "$WTX_CONFORMANCE_DIR, else the installed copy, else the build tree, else "
                  "found upward from the working directory)");
  cmd->add_option("--scratch-dir", a->scratch_dir,
                  "existing directory for the journals (default: the system temp directory); "
                  "fsync costs are those of its filesystem");
  cmd->add_option("--only", a->only,
                  "run only these measurements: update, hash, coverage, syncs, replay, journal, "
                  "landing, load, expect")
      ->delimiter(',');
  cmd->add_flag("--json", a->json, "print one JSON object with every figure and detail");
  cmd->add_flag("--quick", a->quick, "small sizes: a smoke test of a few seconds");
  cmd->add_option("--compare", a->compare,
                  "an earlier `wtx bench --json` output: print each figure's old and new value "
                  "and whether it got worse (more than 5 % against its goal)");
  CLI::Option* tp = cmd->get_option("--coverage-tp");
  CLI::Option* model = cmd->get_option("--model");
  CLI::Option* coverage_model = cmd->get_option("--coverage-model");
  cmd->callback([a, tp, model, coverage_model, exit_code] {
    a->coverage_tp_given = tp->count() > 0;
    a->model_given = model->count() > 0;
    a->coverage_model_given = coverage_model->count() > 0;
    *exit_code = RunBench(*a);
  });
}

}  // namespace wtx::cli
