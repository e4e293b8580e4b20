#include "src/conformance/simulator.h"

#include <cstring>
#include <filesystem>
#include <map>
#include <new>

#include "journal/journal.h"
#include "src/checkpoint/checkpoint_slices.h"
#include "src/manifest/box_json.h"
#include "src/testing/armed_crash_point.h"
#include "src/testing/fault_injection_fs.h"
#include "src/testing/inproc_cluster.h"
#include "src/txn/coordinator_records.h"
#include "src/txn/test_hooks.h"
#include "wtx/coordinator.h"
#include "wtx/inproc_transport.h"
#include "wtx/participant.h"
#include "wtx/safetensors.h"

namespace wtx::sim {

using nlohmann::json;

namespace {

// The parameters `param: "*"` means on a rank: those in the current transaction's scope.
std::vector<uint32_t> StarParams(const Manifest& m, const std::optional<BeginRequest>& scope) {
  std::vector<uint32_t> out;
  std::set<uint32_t> in;
  if (scope && scope->kind == TxKind::kPartial) {
    for (const auto& mod : scope->modules) {
      if (auto mi = m.FindModule(mod)) {
        for (const auto& pn : m.modules()[*mi].params) in.insert(*m.FindParam(pn));
      }
    }
    return {in.begin(), in.end()};
  }
  if (scope && scope->kind == TxKind::kDelta) {
    for (const auto& s : scope->sources) {
      for (const auto& ref : m.ShardsOfSource(s)) in.insert(ref.param);
    }
    return {in.begin(), in.end()};
  }
  for (uint32_t i = 0; i < m.params().size(); ++i) out.push_back(i);
  return out;
}

// How FillBox fills padding rows (elements no source feeds).
enum class PaddingFill {
  kZeros,  // a declared write or landing: zeros, as vLLM's loader leaves them
  kFill,   // an undeclared write (poke): the fill, keyed on the parameter and the live index,
           // so that the bytes really change there
};

// Bytes of `box` (live coordinates) of parameter `pi`, filled through the shards' mapping.
std::vector<uint8_t> FillBox(const Manifest& m, uint32_t pi, const Box& box, const FillSpec& fill,
                             PaddingFill padding = PaddingFill::kZeros) {
  const ParamSpec& p = m.params()[pi];
  const size_t esz = DTypeSize(p.dtype);
  std::vector<uint8_t> data(static_cast<size_t>(NumElements(box)) * esz);
  uint8_t* out = data.data();
  std::vector<uint64_t> src_hash(p.shards.size());
  std::vector<std::vector<int64_t>> src_strides(p.shards.size());
  for (size_t k = 0; k < p.shards.size(); ++k) {
    src_hash[k] = SourceNameHash(p.shards[k].source);
    src_strides[k] = Strides(p.shards[k].source_shape);
  }
  std::vector<int64_t> idx(box.size());
  for (size_t d = 0; d < box.size(); ++d) idx[d] = box[d].begin;
  const int64_t n = NumElements(box);
  for (int64_t e = 0; e < n; ++e) {
    // Which shard holds this live element?
    size_t k = 0;
    for (; k < p.shards.size(); ++k) {
      const Box& sb = p.shards[k].box;
      bool in = true;
      for (size_t d = 0; d < idx.size() && in; ++d) {
        in = idx[d] >= sb[d].begin && idx[d] < sb[d].end;
      }
      if (in) break;
    }
    int64_t src_flat = 0;
    uint64_t h = 0;
    if (k < p.shards.size() && p.shards[k].padding) {
      if (padding == PaddingFill::kZeros) {
        std::memset(out, 0, esz);
      } else {
        int64_t flat = 0;
        for (size_t d = 0; d < idx.size(); ++d) flat = flat * p.shape[d] + idx[d];
        FillElement(fill, SourceNameHash(p.name), flat, p.dtype, out);
      }
    } else {
      if (k < p.shards.size()) {
        const ShardSpec& s = p.shards[k];
        const size_t extra = s.box.size() - s.source_box.size();
        if (s.box.size() >= s.source_box.size()) {
          for (size_t d = 0; d < s.source_box.size(); ++d) {
            src_flat += (s.source_box[d].begin + idx[extra + d] - s.box[extra + d].begin) *
                        src_strides[k][d];
          }
        }
        h = src_hash[k];
      }
      FillElement(fill, h, src_flat, p.dtype, out);
    }
    out += esz;
    for (size_t d = box.size(); d-- > 0;) {
      if (++idx[d] < box[d].end) break;
      idx[d] = box[d].begin;
    }
  }
  return data;
}

// The rank holds `source` and every parameter it feeds has one dtype.
bool SingleDType(const Manifest& m, const std::string& source) {
  const auto& refs = m.ShardsOfSource(source);
  if (refs.empty()) return false;
  for (const ShardRef& r : refs) {
    if (m.params()[r.param].dtype != m.params()[refs[0].param].dtype) return false;
  }
  return true;
}

// `write` by `source` (every shard the rank holds of it): the whole source tensor is filled,
// and the participant slices it (Participant::WriteSource), as a checkpoint loader does.
Status WriteWholeSource(const Step& st, Participant& p) {
  const Manifest& m = p.manifest();
  const ShardRef& first = m.ShardsOfSource(st.source).front();
  const DType dtype = m.params()[first.param].dtype;
  const size_t esz = DTypeSize(dtype);
  const int64_t n = NumElements(*m.SourceShape(st.source));
  std::vector<uint8_t> full(static_cast<size_t>(n) * esz);
  const uint64_t h = SourceNameHash(st.source);
  for (int64_t i = 0; i < n; ++i)
    FillElement(st.fill, h, i, dtype, &full[static_cast<size_t>(i) * esz]);
  return p.WriteSource(st.source, full.data(), full.size()).status();
}

Status DoWrite(const Step& st, const std::optional<BeginRequest>& scope, Participant& p) {
  const Manifest& m = p.manifest();
  std::vector<WritePiece> pieces;
  std::vector<std::vector<uint8_t>> buffers;
  auto add = [&](uint32_t pi, const std::string& shard, const Box& box) {
    buffers.push_back(FillBox(m, pi, box, st.fill));
    WritePiece w;
    w.param = m.params()[pi].name;
    w.shard = shard;
    w.box = box;
    w.data = buffers.back().data();
    w.bytes = buffers.back().size();
    pieces.push_back(std::move(w));
  };
  if (!st.source.empty() && st.param == "*" && !st.box && SingleDType(m, st.source)) {
    return WriteWholeSource(st, p);
  }
  if (!st.source.empty()) {
    // The participant resolves the source (and checks the box against what it feeds); the
    // bytes are generated here for the region it will resolve to.
    WritePiece w;
    w.source = st.source;
    if (st.param != "*") w.param = st.param;
    if (st.box) {
      w.box = st.box;
      auto pi = m.FindParam(st.param);
      if (pi && BoxInsideShape(*st.box, m.params()[*pi].shape) && !BoxIsEmpty(*st.box)) {
        buffers.push_back(FillBox(m, *pi, *st.box, st.fill));
      }
    } else {
      std::vector<uint8_t> all;
      for (const auto& ref : m.ShardsOfSource(st.source)) {
        const ParamSpec& ps = m.params()[ref.param];
        if (st.param != "*" && ps.name != st.param) continue;
        std::vector<uint8_t> b = FillBox(m, ref.param, ps.shards[ref.shard].box, st.fill);
        all.insert(all.end(), b.begin(), b.end());
      }
      buffers.push_back(std::move(all));
    }
    if (!buffers.empty()) {
      w.data = buffers.back().data();
      w.bytes = buffers.back().size();
    }
    pieces.push_back(std::move(w));
  } else if (st.param == "*") {
    for (uint32_t pi : StarParams(m, scope)) add(pi, "", WholeBox(m.params()[pi].shape));
  } else {
    auto pi = m.FindParam(st.param);
    if (!pi) return Status(ErrorCode::kUnknownParam, "unknown parameter '" + st.param + "'");
    const ParamSpec& ps = m.params()[*pi];
    std::optional<uint32_t> si;
    if (!st.shard.empty()) {
      si = m.FindShard(*pi, st.shard);
      if (!si) {
        return Status(ErrorCode::kUnknownParam,
                      "parameter '" + st.param + "' has no shard '" + st.shard + "'");
      }
    }
    Box box = st.box ? *st.box : (si ? ps.shards[*si].box : WholeBox(ps.shape));
    // Boxes that do not fit are the participant's to refuse; generate no bytes for them.
    if (!BoxInsideShape(box, ps.shape) || BoxIsEmpty(box)) {
      WritePiece w;
      w.param = st.param;
      w.shard = st.shard;
      w.box = box;
      pieces.push_back(std::move(w));
    } else {
      add(*pi, st.shard, box);
    }
  }
  return p.Write(pieces);
}

// The regions a reserve/land/poke step names, as Reserve would take them: one per source,
// per parameter of "*", or the single param/shard/box.
std::vector<LandingRegion> StepRegions(const Step& st, const std::optional<BeginRequest>& scope,
                                       const Manifest& m) {
  std::vector<LandingRegion> out;
  if (!st.source.empty()) {
    LandingRegion r;
    r.source = st.source;
    if (st.param != "*") r.param = st.param;
    r.box = st.box;
    out.push_back(std::move(r));
  } else if (st.param == "*") {
    for (uint32_t pi : StarParams(m, scope)) out.push_back({m.params()[pi].name, "", "", {}});
  } else {
    out.push_back({st.param, st.shard, "", st.box});
  }
  return out;
}

// The engine's own copy into live memory, bypassing the participant: into the host bytes
// when the memory is host-addressable, else through the backend's raw Store (the engine's
// host-to-device copy).
Status EngineCopy(Participant& p, uint32_t pi, const Box& box, const FillSpec& fill,
                  PaddingFill padding = PaddingFill::kZeros) {
  const Manifest& m = p.manifest();
  const ParamSpec& ps = m.params()[pi];
  const std::vector<uint8_t> bytes = FillBox(m, pi, box, fill, padding);
  const size_t esz = DTypeSize(ps.dtype);
  LiveMemory& mem = p.memory();
  const uint8_t* src = bytes.data();
  Status st;
  ForEachFlatRun(ps.shape, box, [&](int64_t b, int64_t len) {
    const size_t off = static_cast<size_t>(b) * esz, n = static_cast<size_t>(len) * esz;
    if (st.ok()) st = mem.Store(pi, off, src, n);
    src += n;
  });
  return st;
}

// land: Reserve, the engine writes `fill` into the live tensor itself, Landed.
Status DoLand(const Step& st, const std::optional<BeginRequest>& scope, Participant& p, bool land) {
  const Manifest& m = p.manifest();
  for (const LandingRegion& region : StepRegions(st, scope, m)) {
    auto res = p.Reserve(region);
    if (!res.ok()) return res.status();
    if (!land) continue;
    for (const Reservation& r : res.value()) {
      const ParamSpec& ps = m.params()[r.param_index];
      if (r.host != nullptr) {  // write through the returned address, as an engine would
        const std::vector<uint8_t> bytes = FillBox(m, r.param_index, r.box, st.fill);
        const size_t esz = DTypeSize(ps.dtype);
        const uint8_t* src = bytes.data();
        ForEachFlatRun(ps.shape, r.box, [&](int64_t b, int64_t len) {
          std::memcpy(static_cast<uint8_t*>(r.host) + b * esz, src, len * esz);
          src += len * esz;
        });
      } else {
        WTX_RETURN_IF_ERROR(EngineCopy(p, r.param_index, r.box, st.fill));
      }
    }
    WTX_RETURN_IF_ERROR(p.Landed(region));
  }
  return Status::OK();
}

// poke: the bytes of a region change and wtx is not told (an undeclared write).
Status DoPoke(const Step& st, Participant& p) {
  const Manifest& m = p.manifest();
  for (const LandingRegion& region : StepRegions(st, std::nullopt, m)) {
    std::vector<std::pair<uint32_t, Box>> boxes;
    if (!region.source.empty()) {
      for (const auto& ref : m.ShardsOfSource(region.source)) {
        const ParamSpec& ps = m.params()[ref.param];
        if (!region.param.empty() && ps.name != region.param) continue;
        boxes.emplace_back(ref.param, region.box ? *region.box : ps.shards[ref.shard].box);
      }
      if (boxes.empty()) {
        return Status(ErrorCode::kUnknownParam,
                      "poke: no shard fed by source '" + region.source + "'");
      }
    } else {
      auto pi = m.FindParam(region.param);
      if (!pi)
        return Status(ErrorCode::kUnknownParam, "poke: unknown parameter '" + region.param + "'");
      const ParamSpec& ps = m.params()[*pi];
      std::optional<uint32_t> si;
      if (!region.shard.empty() && !(si = m.FindShard(*pi, region.shard))) {
        return Status(ErrorCode::kUnknownParam,
                      "poke: parameter '" + region.param + "' has no shard '" + region.shard + "'");
      }
      boxes.emplace_back(*pi, region.box ? *region.box
                              : si       ? ps.shards[*si].box
                                         : WholeBox(ps.shape));
    }
    for (const auto& [pi, box] : boxes) {
      const ParamSpec& ps = m.params()[pi];
      if (!BoxInsideShape(box, ps.shape) || BoxIsEmpty(box)) {
        return Status(ErrorCode::kOutOfRange,
                      "poke: box " + BoxToString(box) + " lies outside '" + ps.name + "'");
      }
      WTX_RETURN_IF_ERROR(EngineCopy(p, pi, box, st.fill, PaddingFill::kFill));
    }
  }
  return Status::OK();
}

Status DoPatch(const Step& st, Participant& p) {
  const Manifest& m = p.manifest();
  const auto& refs = m.ShardsOfSource(st.source);
  std::vector<uint8_t> values;
  if (!refs.empty()) {
    const DType dt = m.params()[refs[0].param].dtype;
    const size_t esz = DTypeSize(dt);
    values.resize(st.indices.size() * esz);
    const uint64_t h = SourceNameHash(st.source);
    for (size_t i = 0; i < st.indices.size(); ++i) {
      FillElement(st.fill, h, st.indices[i], dt, values.data() + i * esz);
    }
  }
  PatchRequest req;
  req.source = st.source;
  req.indices = st.indices;
  req.values = values.data();
  req.value_bytes = values.size();
  req.part = st.part;
  req.parts = st.parts;
  return p.Patch(req);
}

// Every rank and the coordinator as objects of this process, over the in-process transport
// (the library's InProcCluster: one fault-injecting filesystem and crash point per process).
class InProcProcesses : public SimProcesses {
 public:
  InProcProcesses(const Scenario& sc, std::string dir, LiveMemoryKind memory)
      : cluster_(Options(sc, std::move(dir), memory)) {}

  Status Start() override { return cluster_.Start(); }

  bool RankAlive(int r) override { return cluster_.RankAlive(r); }
  bool CoordinatorAlive() override { return cluster_.CoordinatorAlive(); }

  Status RankStep(int r, const Step& st, const std::optional<BeginRequest>& scope) override {
    return ApplyRankStep(st, scope, cluster_.rank(r));
  }
  RankStatus RankState(int r) override { return cluster_.rank(r).status(); }

  BeginOutcome Begin(const BeginRequest& req) override { return cluster_.coordinator().Begin(req); }

  CommitOutcome Commit(const Step& st, bool* coordinator_died) override {
    ArmedCrashPoint* armed_rank = nullptr;
    int armed_index = -1;
    if (st.crash) {
      if (st.crash->who == "coordinator") {
        cluster_.coordinator_crash_point().Arm(st.crash->at);
      } else {
        armed_index = st.crash->rank;
        armed_rank = &cluster_.rank_crash_point(armed_index);
        armed_rank->Arm(st.crash->at);
      }
    }
    cluster_.transport().SetSilent(st.silent);
    CommitOutcome o = cluster_.coordinator().Commit(st.tx, st.commit_options);
    cluster_.transport().SetSilent({});
    // Processes that died at their crash point.
    if (armed_rank && armed_rank->Disarm()) KillRank(armed_index, st.crash->power_loss);
    *coordinator_died = cluster_.coordinator_crash_point().Disarm();
    if (*coordinator_died) KillCoordinator(st.crash->power_loss);
    return o;
  }

  BeginOutcome Abort(const std::string& tx) override { return cluster_.coordinator().Abort(tx); }
  std::optional<std::string> CommittedVersion(const std::string& tx) override {
    return cluster_.coordinator().CommittedVersion(tx);
  }
  std::vector<DecisionEntry> Decisions() override { return cluster_.coordinator().decisions(); }

  void KillRank(int r, bool power_loss) override {
    cluster_.KillRank(r, PowerLoss::Of(power_loss));
  }
  void KillCoordinator(bool power_loss) override {
    cluster_.KillCoordinator(PowerLoss::Of(power_loss));
  }
  Status RestartRank(int r) override { return cluster_.RestartRank(r); }
  // A rank that cannot resolve stays in doubt; the restart itself succeeded.
  Status RestartCoordinator() override { return cluster_.RestartCoordinator(); }

 private:
  static InProcClusterOptions Options(const Scenario& sc, std::string dir, LiveMemoryKind kind) {
    InProcClusterOptions o;
    o.dir = std::move(dir);
    o.manifests = sc.manifests;
    o.kernel_identity = sc.kernel_identity;
    o.rollback_budget_bytes = sc.rollback_budget_bytes;
    // A new process: new live memory (zeros), of the kind the run asked for.
    o.memory = [kind](int, const Manifest& m) { return NewLiveMemory(kind, m); };
    return o;
  }

  InProcCluster cluster_;
};

// The steps of a scenario and the output document, on any SimProcesses.
class Runner {
 public:
  Runner(const Scenario& sc, SimProcesses& procs, std::string dir)
      : sc_(sc), procs_(procs), dir_(std::move(dir)) {}

  json Run() {
    json steps = json::array();
    for (const Step& st : sc_.steps) {
      json out = {{"i", st.index}, {"op", st.op}};
      RunStep(st, out);
      steps.push_back(std::move(out));
    }
    return {
        {"steps", std::move(steps)}, {"ranks", RanksJson()}, {"coordinator", CoordinatorJson()}};
  }

 private:
  std::vector<int> Targets(const RankTarget& t) const {
    if (!t.all) return {t.rank};
    std::vector<int> v;
    v.reserve(sc_.ranks);
    for (int r = 0; r < sc_.ranks; ++r) v.push_back(r);
    return v;
  }

  static void Fail(json& out, const std::vector<std::pair<int, Status>>& errs) {
    out["ok"] = false;
    out["error"] = ErrorCodeName(errs.front().second.code());
    out["message"] = errs.front().second.message();
    json ranks = json::array(), detail = json::array();
    for (const auto& [r, s] : errs) {
      if (r >= 0) ranks.push_back(r);
      detail.push_back({{"rank", r >= 0 ? json(r) : json()},
                        {"error", ErrorCodeName(s.code())},
                        {"message", s.message()}});
    }
    out["ranks"] = ranks;
    out["errors"] = detail;
  }

  // Runs a data-plane step on every targeted rank; a dead rank fails with E_CRASHED.
  void ForRanks(const Step& st, json& out) {
    std::vector<std::pair<int, Status>> errs;
    for (int r : Targets(st.target)) {
      Status s = procs_.RankAlive(r)
                     ? procs_.RankStep(r, st, scope_)
                     : Status(ErrorCode::kCrashed, "rank " + std::to_string(r) + " is down");
      if (!s.ok()) errs.emplace_back(r, s);
    }
    if (errs.empty()) {
      out["ok"] = true;
    } else {
      Fail(out, errs);
    }
  }

  std::string ResolveBase(const std::string& ref) {
    if (ref.empty() || ref[0] != '$') return ref;
    const std::string tx = ref.substr(1);
    if (procs_.CoordinatorAlive()) {
      if (auto v = procs_.CommittedVersion(tx)) return *v;
    }
    auto it = committed_.find(tx);
    if (it != committed_.end()) return it->second;
    return "(" + ref + ": transaction did not commit)";
  }

  void RunStep(const Step& st, json& out) {
    if (st.op == "begin") return DoBegin(st, out);
    if (st.op == "write" || st.op == "patch" || st.op == "refresh" ||
        st.op == "set_kernel_identity" || st.op == "reserve" || st.op == "land" ||
        st.op == "poke" || st.op == "load_checkpoint") {
      return ForRanks(st, out);
    }
    if (st.op == "commit") return DoCommit(st, out);
    if (st.op == "abort") return DoAbort(st, out);
    if (st.op == "crash") return DoCrash(st, out);
    if (st.op == "restart") return DoRestart(st, out);
  }

  void DoBegin(const Step& st, json& out) {
    if (!procs_.CoordinatorAlive()) {
      return Fail(out, {{-1, Status(ErrorCode::kCrashed, "the coordinator is down")}});
    }
    BeginRequest req = st.begin;
    req.base = ResolveBase(st.base_ref);
    BeginOutcome o = procs_.Begin(req);
    if (o.status.ok()) {
      out["ok"] = true;
      scope_ = req;
      return;
    }
    std::vector<std::pair<int, Status>> errs;
    for (const auto& e : o.errors) errs.emplace_back(e.rank, e.status);
    if (errs.empty()) errs.emplace_back(-1, o.status);
    Fail(out, errs);
  }

  static json VoteJson(const VoteReport& v) {
    json j = {{"rank", v.rank}, {"vote", VoteKindName(v.kind)}};
    switch (v.kind) {
      case VoteReport::Kind::kYes:
        j["wrote"] = v.vote.wrote;
        return j;
      case VoteReport::Kind::kTimeout:
        j["error"] = "E_TIMEOUT";
        j["message"] = v.status.message();
        return j;
      case VoteReport::Kind::kCrashed:
        j["error"] = "E_CRASHED";
        j["message"] = v.status.message();
        return j;
      case VoteReport::Kind::kNo:
        break;
    }
    j["wrote"] = v.vote.wrote;
    j["error"] = ErrorCodeName(v.vote.error);
    json errors = json::array();
    for (auto e : v.vote.errors) errors.push_back(ErrorCodeName(e));
    j["errors"] = errors;
    j["message"] = v.vote.message;
    if (!v.vote.missing.empty()) {
      json missing = json::array();
      for (const auto& m : v.vote.missing) {
        json jm = {{"param", m.param},
                   {"shard", m.shard},
                   {"box", BoxToJson(m.box)},
                   {"source", m.source}};
        if (m.boxes != 1) jm["boxes"] = m.boxes;  // box bounds that many merged gaps
        jm["elements"] = m.elements;
        if (!m.missing_parts.empty()) {
          jm["missing_parts"] = m.missing_parts;
          jm["parts"] = m.parts;
        }
        missing.push_back(std::move(jm));
      }
      j["missing"] = std::move(missing);
      j["missing_total"] = v.vote.missing_total;
    }
    if (!v.vote.stale.empty()) {
      json stale = json::array();
      for (const auto& s : v.vote.stale) {
        stale.push_back(
            {{"derived", s.name}, {"phase", PhaseName(s.phase)}, {"sources", s.written_sources}});
      }
      j["stale"] = std::move(stale);
    }
    return j;
  }

  void DoCommit(const Step& st, json& out) {
    if (!procs_.CoordinatorAlive()) {
      return Fail(out, {{-1, Status(ErrorCode::kCrashed, "the coordinator is down")}});
    }
    bool coordinator_died = false;
    Step resolved = st;
    if (!st.expect_version_ref.empty()) {
      resolved.commit_options.expect_version = ResolveBase(st.expect_version_ref);
      // "$tx": each rank's digest in that transaction too, so a mismatch names the ranks.
      if (st.expect_version_ref[0] == '$') {
        auto it = committed_digests_.find(st.expect_version_ref.substr(1));
        if (it != committed_digests_.end())
          resolved.commit_options.expect_rank_digests = it->second;
      }
    }
    CommitOutcome o = procs_.Commit(resolved, &coordinator_died);
    json votes = json::array();
    std::vector<int> failing;
    for (const auto& v : o.votes) {
      votes.push_back(VoteJson(v));
      if (v.kind != VoteReport::Kind::kYes) failing.push_back(v.rank);
    }
    if (!o.votes.empty()) out["votes"] = std::move(votes);
    if (o.decision) out["decision"] = DecisionName(*o.decision);
    if (o.decision == Decision::kCommit) {
      committed_[st.tx] = o.version;
      std::vector<std::string> digests;
      for (const auto& v : o.votes) digests.push_back(v.vote.digest);
      committed_digests_[st.tx] = std::move(digests);
      out["version"] = o.version;
    }
    if (coordinator_died) {
      out["ok"] = false;
      out["outcome"] = "in_doubt";
      out["error"] = "E_CRASHED";
      out["message"] = o.status.message();
      out["ranks"] = json::array();
      return;
    }
    if (o.status.ok() && o.decision) {
      out["ok"] = true;
      out["outcome"] = *o.decision == Decision::kNoop ? "noop" : "committed";
      if (!o.unacknowledged.empty()) out["unacknowledged"] = o.unacknowledged;
      scope_.reset();
      return;
    }
    out["ok"] = false;
    if (o.decision) {
      out["outcome"] = "aborted";
      scope_.reset();
    }
    out["error"] = ErrorCodeName(o.status.code());
    out["message"] = o.status.message();
    if (o.status.code() == ErrorCode::kVersionMismatch) {
      // Every rank voted yes: the failing ranks are those whose digest is not the expected one.
      const auto& want = resolved.commit_options.expect_rank_digests;
      for (const auto& v : o.votes) {
        if (want.size() != o.votes.size() || v.vote.digest != want[static_cast<size_t>(v.rank)]) {
          failing.push_back(v.rank);
        }
      }
    }
    out["ranks"] = failing;
  }

  void DoAbort(const Step& st, json& out) {
    if (!procs_.CoordinatorAlive()) {
      return Fail(out, {{-1, Status(ErrorCode::kCrashed, "the coordinator is down")}});
    }
    BeginOutcome o = procs_.Abort(st.tx);
    if (o.status.ok()) {
      out["ok"] = true;
      out["outcome"] = "aborted";
      scope_.reset();
    } else {
      Fail(out, {{-1, o.status}});
    }
  }

  void DoCrash(const Step& st, json& out) {
    const CrashSpec& c = *st.crash;
    const bool alive =
        c.who == "coordinator" ? procs_.CoordinatorAlive() : procs_.RankAlive(c.rank);
    if (!alive) {
      return Fail(out, {{c.rank, Status(ErrorCode::kCrashed, c.who + " is already down")}});
    }
    if (c.who == "coordinator") {
      procs_.KillCoordinator(c.power_loss);
    } else {
      procs_.KillRank(c.rank, c.power_loss);
    }
    out["ok"] = true;
  }

  void DoRestart(const Step& st, json& out) {
    const CrashSpec& c = *st.crash;
    Status s = c.who == "coordinator" ? procs_.RestartCoordinator() : procs_.RestartRank(c.rank);
    if (s.ok()) {
      out["ok"] = true;
    } else {
      Fail(out, {{c.rank, s}});
    }
  }

  json RankJson(int r) {
    json j = {{"rank", r}};
    if (procs_.RankAlive(r)) {
      RankStatus s = procs_.RankState(r);
      j["version"] = s.version ? json(*s.version) : json();
      j["digest"] = s.digest ? json(*s.digest) : json();
      j["dirty"] = s.dirty;
      j["loaded"] = s.loaded;
      j["serving"] = s.serving;
      j["in_doubt"] = s.in_doubt ? json(*s.in_doubt) : json();
      j["active_tx"] = s.active_tx ? json(*s.active_tx) : json();
      j["stale_derived"] = s.stale_derived;
      j["crashed"] = false;
      return j;
    }
    // A dead process: report what its journal says.
    JournalOptions o;
    o.read_only = true;
    json st;
    if (auto jr = Journal::Open(dir_ + "/rank-" + std::to_string(r), o); jr.ok()) {
      st = jr.value()->state();
    }
    const json act = st.is_object() ? st.value("active", json()) : json();
    j["version"] = st.is_object() ? st.value("version", json()) : json();
    j["digest"] = st.is_object() ? st.value("digest", json()) : json();
    j["dirty"] = true;
    j["loaded"] = false;
    j["serving"] = false;
    j["in_doubt"] = (act.is_object() && act.value("vote", json()) == "yes") ? act["tx"] : json();
    j["crashed"] = true;
    return j;
  }

  json RanksJson() {
    json a = json::array();
    for (int r = 0; r < sc_.ranks; ++r) a.push_back(RankJson(r));
    return a;
  }

  json CoordinatorJson() {
    std::vector<DecisionEntry> ds;
    const bool alive = procs_.CoordinatorAlive();
    if (alive) {
      ds = procs_.Decisions();
    } else {
      JournalOptions o;
      o.read_only = true;
      if (auto jr = Journal::Open(dir_ + "/coordinator", o); jr.ok()) {
        jr.value()
            ->ForEachRecord([&](const json& r) {
              auto rec = DecodeCoordinatorRecord(r);
              if (!rec.ok()) return rec.status();
              if (const auto* d = std::get_if<DecisionRecord>(&rec.value())) {
                ds.push_back({d->tx, d->decision, d->version.value_or(""), d->reason, d->ts});
              }
              return Status::OK();
            })
            .ok();
      }
    }
    json a = json::array();
    for (const auto& d : ds) {
      json e = {{"tx", d.tx}, {"decision", DecisionName(d.decision)}};
      e["version"] = d.version.empty() ? json() : json(d.version);
      if (!d.reason.empty()) e["reason"] = d.reason;
      a.push_back(std::move(e));
    }
    return {{"alive", alive}, {"decisions", std::move(a)}};
  }

  const Scenario& sc_;
  SimProcesses& procs_;
  std::string dir_;
  std::optional<BeginRequest> scope_;
  std::map<std::string, std::string> committed_;
  std::map<std::string, std::vector<std::string>> committed_digests_;  // tx -> rank digests
};

}  // namespace

Status ApplyRankStep(const Step& st, const std::optional<BeginRequest>& scope, Participant& p) {
  if (st.op == "write") {
    // The bytes of a write are generated here: a box of a valid but huge parameter may not fit
    // in this machine's memory, which is the step's error, not a crash.
    try {
      return DoWrite(st, scope, p);
    } catch (const std::bad_alloc&) {
      return Status::InvalidArgument("steps[" + std::to_string(st.index) +
                                     "]: out of memory generating the bytes of the write");
    }
  }
  if (st.op == "patch") return DoPatch(st, p);
  if (st.op == "reserve") return DoLand(st, scope, p, false);
  if (st.op == "land") return DoLand(st, scope, p, true);
  if (st.op == "poke") return DoPoke(st, p);
  if (st.op == "refresh") return p.Refresh(st.derived).status();
  if (st.op == "load_checkpoint") {  // `wtx load`: value is the checkpoint's path
    auto c = SafetensorsCheckpoint::Open(st.value);
    if (!c.ok()) return c.status();
    return WriteCheckpointSlices(*c.value(), p).status();
  }
  if (st.op == "set_kernel_identity") {
    p.SetKernelIdentity(st.value);
    return Status::OK();
  }
  return Status::InvalidArgument("'" + st.op + "' is not a rank step");
}

json RunSteps(const Scenario& scenario, SimProcesses& processes, const std::string& journal_dir) {
  Runner runner(scenario, processes, journal_dir);
  return runner.Run();
}

Status PrepareJournalDir(const std::string& dir) {
  namespace fs = std::filesystem;
  std::error_code ec;
  if (fs::exists(dir, ec) && !fs::is_empty(dir, ec)) {
    return Status::InvalidArgument("--journal-dir " + dir +
                                   " is not empty; give a new or empty directory");
  }
  fs::create_directories(dir, ec);
  if (ec) return Status::IOError("cannot create " + dir + ": " + ec.message());
  return Status::OK();
}

Result<json> RunScenario(const Scenario& scenario, const SimOptions& options) {
  WTX_RETURN_IF_ERROR(PrepareJournalDir(options.journal_dir));
  InProcProcesses procs(scenario, options.journal_dir, options.memory);
  WTX_RETURN_IF_ERROR(procs.Start());
  return RunSteps(scenario, procs, options.journal_dir);
}

}  // namespace wtx::sim
