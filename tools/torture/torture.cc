// `wtx torture` (torture.h): the run of each script (a fresh cluster, its transactions, each
// planned, faulted, executed and recovered, then a fault-free full commit and the final checks)
// and the report. The Script's parts are in the script_*.cc files (script.h).
//
// Thread-safety: RunTorture is single-threaded.
#include "tools/torture/torture.h"

#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <thread>

#include "tools/torture/script.h"
#include "wtx/decision_log.h"

namespace wtx::torture {

using nlohmann::json;

namespace {

namespace fs = std::filesystem;

std::string DefaultDir() {
  std::error_code ec;
  const std::string base =
      fs::is_directory("/dev/shm", ec) ? "/dev/shm" : fs::temp_directory_path().string();
  return base + "/wtx-torture-" + std::to_string(::getpid());
}

}  // namespace

void Script::RunTransaction(int t, bool clean) {
  const std::string tx = "t" + std::to_string(t);
  ++rep_.transactions;
  current_tx_.clear();
  std::vector<Op> ops = PlanTransaction(tx, clean);
  std::map<size_t, Fault> faults;  // before op i; i == ops.size(): after the last op
  if (!clean) {
    const uint64_t roll = Rand(100);
    const int n = roll < 30 ? 0 : roll < 85 ? 1 : 2;
    for (int i = 0; i < n; ++i) {
      // Faults favour the operations that journal (begin, commit, abort) and the last one.
      size_t at;
      const uint64_t where = Rand(10);
      if (where < 4) {
        at = ops.size() - 1;  // the commit/abort
      } else if (where < 5) {
        at = 0;
      } else if (where < 6) {
        at = ops.size();
      } else {
        at = Rand(ops.size() + 1);
      }
      auto fl = PlanFault(at < ops.size() ? &ops[at] : nullptr);
      if (fl) faults.emplace(at, *fl);
    }
  }
  for (size_t i = 0; i <= ops.size(); ++i) {
    std::optional<Fault> f;
    if (auto it = faults.find(i); it != faults.end()) f = it->second;
    if (f && (f->kind == Fault::Kind::kKillRank || f->kind == Fault::Kind::kKillCoordinator ||
              f->kind == Fault::Kind::kKillAll)) {
      ApplyKill(*f);
      f.reset();
    }
    if (i == ops.size()) break;
    Execute(ops[i], f);
    if (f && f->kind != Fault::Kind::kCrashPoint && f->recover_now) Recover();
  }
  // Kernel identities back to normal, then recovery and the closing checks.
  for (int r = 0; r < o_.ranks; ++r) {
    if (Alive(r) && model_->rank(r).kernel != model_->default_kernel()) {
      RankP(r).SetKernelIdentity(model_->default_kernel());
      model_->SetKernelIdentity(r, model_->default_kernel());
    }
  }
  Recover();
  CloseOpenTransactions();
  CheckAfterRecovery();
}

void Script::Run() {
  std::error_code ec;
  fs::remove_all(dir_, ec);
  fs::create_directories(dir_, ec);
  for (int r = 0; r < o_.ranks; ++r) {
    auto m = ParseManifest(TortureManifestJson(r, o_.ranks));
    if (!m.ok()) Fail("torture manifest invalid: " + m.status().ToString());
    manifests_.push_back(m.value());
  }
  model_ = std::make_unique<Model>(manifests_, "torture-kernel/bf16");
  InProcClusterOptions co;
  co.dir = dir_;
  co.manifests = manifests_;
  co.kernel_identity = model_->default_kernel();
  if (!o_.decision_log.empty()) {
    // Scripts reuse transaction ids: each decides under a sub-prefix of its own.
    DecisionLogOptions lo;
    lo.url = o_.decision_log + "/torture-" + std::to_string(::getpid()) + "-" +
             std::to_string(o_.seed) + "-" + std::to_string(index_);
    auto log = OpenDecisionLog(lo);
    if (!log.ok()) Fail("--decision-log: " + log.status().ToString());
    co.customize_coordinator = [log = log.value()](CoordinatorOptions& c) {
      c.decision_log = log;
      c.leader_wait = std::chrono::milliseconds(10000);
    };
  }
  cluster_ = std::make_unique<InProcCluster>(std::move(co));
  // Injected I/O errors hit the script's own journal calls only (see FailNextWrites).
  for (int r = 0; r < o_.ranks; ++r) FsOf(r).RestrictInjectionToThread(std::this_thread::get_id());
  FsOf(-1).RestrictInjectionToThread(std::this_thread::get_id());
  for (int r = 0; r < o_.ranks; ++r) {
    if (Status s = cluster_->OpenRank(r); !s.ok()) {
      Fail("rank " + std::to_string(r) + ": " + s.ToString());
    }
  }
  if (Status s = cluster_->OpenCoordinator(); !s.ok()) Fail("coordinator: " + s.ToString());
  for (int t = 0; t < o_.transactions; ++t) RunTransaction(t, /*clean=*/false);
  RunTransaction(o_.transactions, /*clean=*/true);
  Expect(model_->last_committed() == "t" + std::to_string(o_.transactions),
         "the fault-free full transaction did not commit");
  FinalCheck();
}

std::string ReproduceCommand(const TortureOptions& o, int64_t script) {
  std::string out = "wtx torture --seed " + std::to_string(o.seed) + " --start " +
                    std::to_string(script) + " --iterations 1 --ranks " + std::to_string(o.ranks) +
                    " --transactions " + std::to_string(o.transactions);
  if (!o.decision_log.empty()) out += " --decision-log '" + o.decision_log + "'";
  return out + " --verbose";
}

json TortureReport::ToJson(const TortureOptions& o) const {
  json v = json::array();
  for (const auto& x : violations) {
    v.push_back({{"script", x.script},
                 {"step", x.step},
                 {"what", x.what},
                 {"reproduce", ReproduceCommand(o, x.script)},
                 {"trace", x.trace},
                 {"journals", x.journals}});
  }
  return {{"seed", o.seed},
          {"start", o.start},
          {"ranks", o.ranks},
          {"scripts", scripts},
          {"steps", steps},
          {"transactions", transactions},
          {"committed", committed},
          {"aborted", aborted},
          {"noop", noop},
          {"begin_refused", begin_refused},
          {"crash_points", crash_points},
          {"crash_kinds", crash_kinds},
          {"recoveries", recoveries},
          {"in_doubt_resolved", in_doubt_resolved},
          {"io_errors_injected", io_errors_injected},
          {"checks", checks},
          {"journals_verified", journals_verified},
          {"violations", violations.size()},
          {"violation_details", v},
          {"seconds", seconds},
          {"crash_points_per_second", seconds > 0 ? crash_points / seconds : 0.0}};
}

Result<TortureReport> RunTorture(const TortureOptions& options) {
  if (options.ranks < 1 || options.ranks > 8) {
    return Status::InvalidArgument("--ranks must be between 1 and 8");
  }
  TortureReport rep;
  const std::string base = options.dir.empty() ? DefaultDir() : options.dir;
  std::error_code ec;
  fs::create_directories(base, ec);
  if (ec) return Status::IOError("cannot create " + base + ": " + ec.message());
  const auto t0 = std::chrono::steady_clock::now();
  auto last_report = t0;
  for (uint64_t i = options.start; i < options.start + options.iterations; ++i) {
    const std::string dir = base + "/s" + std::to_string(i);
    bool failed = false;
    {
      Script s(options, &rep, i, dir);
      try {
        s.Run();
      } catch (const ScriptFailed&) {
        failed = true;
      }
    }
    ++rep.scripts;
    if (!failed || !options.keep_failed) fs::remove_all(dir, ec);
    const auto now = std::chrono::steady_clock::now();
    if (options.log && now - last_report > std::chrono::seconds(10)) {
      last_report = now;
      options.log("torture: " + std::to_string(rep.scripts) + " scripts, " +
                  std::to_string(rep.crash_points) + " crash points, " +
                  std::to_string(rep.violations.size()) + " violations");
    }
  }
  if (options.dir.empty()) fs::remove_all(base, ec);
  rep.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return rep;
}

}  // namespace wtx::torture
