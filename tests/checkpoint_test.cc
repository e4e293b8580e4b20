// Issue 14 items 3, 6, 7: Participant::WriteSource, expected versions (ComputeExpectedVersion,
// CommitOptions::expect_version, scenario expect_version and ranks[].digest), the safetensors
// reader, and `wtx load` / `wtx expect` (library and CLI, both transports).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <set>

#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "src/checkpoint/checkpoint_slices.h"
#include "src/conformance/checkpoint_load.h"
#include "src/conformance/simulator.h"
#include "src/conformance/tcp_simulator.h"
#include "tests/test_util.h"
#include "wtx/content_hash.h"
#include "wtx/coordinator.h"
#include "wtx/device_live_memory.h"
#include "wtx/expected_version.h"
#include "wtx/hf_manifest.h"
#include "wtx/inproc_transport.h"
#include "wtx/piece_digest.h"
#include "wtx/safetensors.h"
#include "wtx/transfer_plan.h"

using nlohmann::json;
using namespace wtx;
using wtx::testing::TempDir;

namespace {

std::string Model(const std::string& name) {
  return std::string(WTX_CONFORMANCE_DIR) + "/models/" + name + "/config.json";
}

// The ranks of a group of `model` laid out with tensor-parallel degree `tp` and
// expert-parallel degree `ep` (ep ranks with expert parallelism, else tp), in `dtype`.
std::vector<ManifestPtr> GroupManifests(const std::string& model, int tp, int ep,
                                        std::optional<DType> dtype = std::nullopt) {
  HfManifestOptions o;
  o.tp = tp;
  o.ep = ep;
  o.dtype = dtype;
  std::vector<ManifestPtr> out;
  for (int r = 0; r < o.GroupSize(); ++r) {
    o.rank = r;
    auto m = ManifestFromHfConfigFile(Model(model), o);
    REQUIRE(m.ok());
    out.push_back(m.value());
  }
  return out;
}

std::vector<ManifestPtr> TpManifests(const std::string& model, int tp,
                                     std::optional<DType> dtype = std::nullopt) {
  return GroupManifests(model, tp, 1, dtype);
}

// A full source tensor with deterministic bytes (depending on name and seed).
struct Source {
  std::string name;
  Shape shape;
  DType dtype;
  std::vector<uint8_t> bytes;
};

std::vector<uint8_t> Bytes(const std::string& name, size_t n, uint64_t seed) {
  std::vector<uint8_t> b(n);
  uint64_t x = XXH3_64bits_withSeed(name.data(), name.size(), seed) | 1;
  for (size_t i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    b[i] = static_cast<uint8_t>(x >> 24);
  }
  return b;
}

// Every source the ranks' manifests read, in the live dtype (or `dtype`).
std::map<std::string, Source> SourcesOf(const std::vector<ManifestPtr>& ms, uint64_t seed,
                                        std::optional<DType> dtype = std::nullopt) {
  std::map<std::string, Source> out;
  for (const auto& m : ms) {
    for (const ParamSpec& p : m->params()) {
      for (const ShardSpec& s : p.shards) {
        if (s.padding || out.count(s.source)) continue;  // padding rows read no tensor
        const DType dt = dtype.value_or(p.dtype);
        out[s.source] = {
            s.source, s.source_shape, dt,
            Bytes(s.source, static_cast<size_t>(NumElements(s.source_shape)) * DTypeSize(dt),
                  seed)};
      }
    }
  }
  return out;
}

std::string FileBytes(const json& header, const std::string& data) {
  std::string h = header.dump();
  std::string out(8, '\0');
  uint64_t n = h.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + h + data;
}

void WriteFile(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

// Writes `sources` as `shards` safetensors files plus an index (or one model.safetensors).
void WriteCheckpoint(const std::string& dir, const std::map<std::string, Source>& sources,
                     int shards = 2) {
  std::vector<const Source*> all;
  for (const auto& [_, s] : sources) all.push_back(&s);
  const size_t per = (all.size() + shards - 1) / shards;
  json weight_map = json::object();
  for (int k = 0; k < shards; ++k) {
    json header = json::object();
    std::string data;
    const std::string file =
        shards == 1 ? "model.safetensors" : "model-" + std::to_string(k + 1) + ".safetensors";
    for (size_t i = k * per; i < std::min(all.size(), (k + 1) * per); ++i) {
      const Source& s = *all[i];
      header[s.name] = {{"dtype", SafetensorsDTypeName(s.dtype)},
                        {"shape", s.shape},
                        {"data_offsets", {data.size(), data.size() + s.bytes.size()}}};
      data.append(reinterpret_cast<const char*>(s.bytes.data()), s.bytes.size());
      weight_map[s.name] = file;
    }
    WriteFile(dir + "/" + file, FileBytes(header, data));
  }
  if (shards > 1) {
    std::ofstream(dir + "/model.safetensors.index.json") << json{{"weight_map", weight_map}}.dump();
  }
}

SourceLookup Lookup(const std::map<std::string, Source>& sources) {
  return [&sources](std::string_view name) -> std::optional<SourceTensor> {
    auto it = sources.find(std::string(name));
    if (it == sources.end()) return std::nullopt;
    const Source& s = it->second;
    return SourceTensor{s.name, s.shape, s.dtype, s.bytes.data(), s.bytes.size()};
  };
}

std::vector<const Manifest*> Raw(const std::vector<ManifestPtr>& ms) {
  std::vector<const Manifest*> out;
  for (const auto& m : ms) out.push_back(m.get());
  return out;
}

// N ranks with their own manifests, an in-process transport and a coordinator.
struct TpGroup {
  // reference_device: live memory on the reference device backend (device_live_memory.h).
  explicit TpGroup(std::vector<ManifestPtr> ms, bool reference_device = false)
      : manifests(std::move(ms)), transport(manifests.size()) {
    for (size_t r = 0; r < manifests.size(); ++r) {
      ParticipantOptions o;
      if (reference_device) o.memory = NewReferenceDeviceLiveMemory(*manifests[r]);
      o.rank = static_cast<int>(r);
      o.journal_dir = dir.sub("rank-" + std::to_string(r));
      o.kernel_identity = "k";
      auto p = Participant::Open(std::move(o), manifests[r]);
      REQUIRE(p.ok());
      ranks.push_back(std::move(p).value());
      transport.SetParticipant(static_cast<int>(r), ranks.back().get());
    }
    CoordinatorOptions co;
    co.journal_dir = dir.sub("coordinator");
    auto c = Coordinator::Open(co, &transport);
    REQUIRE(c.ok());
    coord = std::move(c).value();
  }
  void BeginFull(const std::string& tx) {
    BeginRequest b;
    b.tx = tx;
    REQUIRE(coord->Begin(b).status.ok());
  }
  // Commits `tx` expecting `version` (what a full write of the same bytes commits): the commit
  // must happen, with exactly that version.
  CommitOutcome CommitExpecting(const std::string& tx, const std::string& version) {
    CommitOptions opts;
    opts.expect_version = version;
    CommitOutcome o = coord->Commit(tx, opts);
    INFO(o.status.ToString());
    REQUIRE(o.decision == Decision::kCommit);
    CHECK(o.version == version);
    return o;
  }
  // Every rank writes every source it holds; then refreshes derived state.
  void WriteAll(const std::map<std::string, Source>& sources) {
    for (auto& p : ranks) {
      for (const auto& [name, s] : sources) {
        auto n = p->WriteSource(name, s.bytes.data(), s.bytes.size());
        REQUIRE(n.ok());
      }
      REQUIRE(p->Refresh("*").ok());
    }
  }
  TempDir dir;
  std::vector<ManifestPtr> manifests;
  InProcTransport transport;
  std::vector<std::unique_ptr<Participant>> ranks;
  std::unique_ptr<Coordinator> coord;
};

std::vector<uint8_t> Live(Participant& p, const std::string& param) {
  const uint32_t i = *p.manifest().FindParam(param);
  std::vector<uint8_t> out(p.memory().Size(i));
  REQUIRE(p.memory().Load(i, 0, out.data(), out.size()).ok());
  return out;
}

}  // namespace

// ---------------------------------------------------------------- safetensors header

TEST_CASE("SafetensorsHeaderWithEveryDtypeParses") {
  json h = {{"a", {{"dtype", "BF16"}, {"shape", {2, 3}}, {"data_offsets", {0, 12}}}},
            {"b", {{"dtype", "F8_E4M3"}, {"shape", {4}}, {"data_offsets", {12, 16}}}},
            {"c", {{"dtype", "I32"}, {"shape", json::array()}, {"data_offsets", {16, 20}}}},
            {"d", {{"dtype", "F16"}, {"shape", {0}}, {"data_offsets", {20, 20}}}},
            {"__metadata__", {{"format", "pt"}}}};
  std::string f = FileBytes(h, std::string(20, 'x'));
  auto r = ParseSafetensorsHeader({reinterpret_cast<const uint8_t*>(f.data()), f.size()}, "f");
  REQUIRE(r.ok());
  REQUIRE(r.value().tensors.size() == 4);
  CHECK(r.value().tensors[0].name == "a");
  CHECK(r.value().tensors[0].dtype == DType::kBF16);
  CHECK(r.value().tensors[1].dtype == DType::kFP8E4M3);
}

namespace {
Status HeaderError(const std::string& bytes) {
  auto r = ParseSafetensorsHeader({reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()},
                                  "ckpt/model.safetensors");
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("ckpt/model.safetensors") != std::string::npos);
  return r.status();
}
json One(const std::string& dtype, json shape, uint64_t b, uint64_t e) {
  return {{"t", {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {b, e}}}}};
}
}  // namespace

TEST_CASE("TruncatedSafetensorsFileIsRejectedNamingTheFile") {
  CHECK(HeaderError("\x05\x00\x00").message().find("truncated") != std::string::npos);
  std::string f = FileBytes(One("F32", {1}, 0, 4), "abcd");
  CHECK(HeaderError(f.substr(0, 20)).message().find("past the end") != std::string::npos);
}

TEST_CASE("LyingSafetensorsHeaderLengthIsRejected") {
  std::string f = FileBytes(One("F32", {1}, 0, 4), "abcd");
  f[7] = 0x10;  // header length 2^60
  CHECK(HeaderError(f).message().find("header length") != std::string::npos);
  // A length that is within the file but cuts the JSON short.
  std::string g = FileBytes(One("F32", {1}, 0, 4), "abcd");
  g[0] = static_cast<char>(g[0] - 3);
  CHECK(HeaderError(g).message().find("not valid JSON") != std::string::npos);
}

TEST_CASE("SafetensorsOffsetsPastTheEndAreRejectedNamingTheTensor") {
  Status s = HeaderError(FileBytes(One("F32", {100}, 0, 400), "abcd"));
  CHECK(s.message().find("tensor 't'") != std::string::npos);
  CHECK(s.message().find("past the end") != std::string::npos);
}

TEST_CASE("NanLadenSafetensorsHeaderIsRejected") {
  std::string h = R"({"t":{"dtype":"F32","shape":[NaN],"data_offsets":[0,4]}})";
  std::string f(8, '\0');
  f[0] = static_cast<char>(h.size());
  CHECK(HeaderError(f + h + "abcd").code() == ErrorCode::kInvalidArgument);
  Status s = HeaderError(FileBytes(One("F32", {1.5}, 0, 4), "abcd"));
  CHECK(s.message().find("non-negative integers") != std::string::npos);
  CHECK(HeaderError(FileBytes(One("F32", {-1}, 0, 4), "abcd")).message().find("tensor 't'") !=
        std::string::npos);
}

TEST_CASE("SafetensorsShapeThatDoesNotFitItsBytesIsRejected") {
  Status s = HeaderError(FileBytes(One("F32", {2}, 0, 4), "abcd"));
  CHECK(s.message().find("needs 8") != std::string::npos);
  s = HeaderError(FileBytes(One("F32", {int64_t{1} << 40, int64_t{1} << 40}, 0, 4), "abcd"));
  CHECK(s.message().find("overflows") != std::string::npos);
}

TEST_CASE("OverlappingSafetensorsTensorsAreRejectedNamingBoth") {
  json h = {{"a", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}},
            {"z", {{"dtype", "F32"}, {"shape", {0}}, {"data_offsets", {4, 4}}}},
            {"b", {{"dtype", "F32"}, {"shape", {2}}, {"data_offsets", {8, 16}}}}};
  Status s = HeaderError(FileBytes(h, std::string(16, 'x')));
  CHECK(s.message().find("tensor 'b'") != std::string::npos);
  CHECK(s.message().find("'a'") != std::string::npos);
}

TEST_CASE("UnsupportedSafetensorsDtypeIsRejectedNamingTheTensor") {
  Status s = HeaderError(FileBytes(One("F64", {1}, 0, 8), std::string(8, 'x')));
  CHECK(s.message().find("tensor 't'") != std::string::npos);
  CHECK(s.message().find("F64") != std::string::npos);
}

TEST_CASE("DuplicateSafetensorsTensorNameIsRejectedNamingIt") {
  // JSON parsers keep one of two equal keys silently: which bytes would be the tensor?
  const std::string e = R"({"dtype":"F32","shape":[1],"data_offsets":[0,4]})";
  std::string h = R"({"t":)" + e + R"(,"u":)" + e + R"(,"t":)" + e + "}";
  std::string f(8, '\0');
  f[0] = static_cast<char>(h.size());
  Status s = HeaderError(f + h + "abcd");
  CHECK(s.message().find("tensor 't'") != std::string::npos);
  CHECK(s.message().find("twice") != std::string::npos);
  // A field given twice inside one entry, too.
  h = R"({"t":{"dtype":"F32","dtype":"I32","shape":[1],"data_offsets":[0,4]}})";
  f[0] = static_cast<char>(h.size());
  s = HeaderError(f + h + "abcd");
  CHECK(s.message().find("tensor 't': field 'dtype' given twice") != std::string::npos);
}

TEST_CASE("SafetensorsDtypeThatIsNotAStringIsNamedAsSuch") {
  Status s = HeaderError(
      FileBytes({{"t", {{"dtype", 5}, {"shape", {1}}, {"data_offsets", {0, 4}}}}}, "abcd"));
  CHECK(s.message().find("tensor 't': dtype 5 is not a string") != std::string::npos);
}

// ---------------------------------------------------------------- checkpoint files

TEST_CASE("ShardedCheckpointOpensThroughItsIndex") {
  TempDir d;
  auto ms = TpManifests("tiny-llama", 1);
  auto sources = SourcesOf(ms, 1);
  WriteCheckpoint(d.path(), sources, 3);
  auto c = SafetensorsCheckpoint::Open(d.path());
  REQUIRE(c.ok());
  CHECK(c.value()->files().size() == 3);
  CHECK(c.value()->names().size() == sources.size());
  for (const auto& [name, s] : sources) {
    const CheckpointTensor* t = c.value()->Find(name);
    REQUIRE(t);
    CHECK(t->shape == s.shape);
    CHECK(std::memcmp(t->bytes.data(), s.bytes.data(), s.bytes.size()) == 0);
  }
  // The index file itself, and one shard alone, open too.
  CHECK(SafetensorsCheckpoint::Open(d.sub("model.safetensors.index.json")).ok());
  auto one = SafetensorsCheckpoint::Open(d.sub("model-1.safetensors"));
  REQUIRE(one.ok());
  CHECK(one.value()->names().size() < sources.size());
}

TEST_CASE("CheckpointIndexNamingAFileOutsideItsFolderIsRejected") {
  TempDir d;
  std::ofstream(d.sub("model.safetensors.index.json"))
      << R"({"weight_map": {"w": "../etc/passwd"}})";
  auto c = SafetensorsCheckpoint::Open(d.path());
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message().find("tensor 'w'") != std::string::npos);
}

namespace {
// Writes a.safetensors (tensor 't') and `index` into `d`, opens the folder and returns the
// error message. REQUIRES: the open fails.
std::string IndexOpenError(const TempDir& d, const std::string& index) {
  WriteFile(d.sub("a.safetensors"), FileBytes(One("F32", {1}, 0, 4), "abcd"));
  std::ofstream(d.sub("model.safetensors.index.json")) << index;
  auto c = SafetensorsCheckpoint::Open(d.path());
  REQUIRE_FALSE(c.ok());
  return c.status().message();
}
}  // namespace

TEST_CASE("CheckpointIndexMappingATensorItsShardLacksIsRejected") {
  TempDir d;
  const std::string m =
      IndexOpenError(d, R"({"weight_map": {"t": "a.safetensors", "ghost": "a.safetensors"}})");
  CHECK(m.find("a.safetensors") != std::string::npos);
  CHECK(m.find("'ghost'") != std::string::npos);
}

TEST_CASE("CheckpointIndexMappingATensorTwiceIsRejected") {
  TempDir d;
  WriteFile(d.sub("b.safetensors"), FileBytes(One("F32", {1}, 0, 4), "efgh"));
  CHECK(IndexOpenError(d, R"({"weight_map": {"t": "a.safetensors", "t": "b.safetensors"}})")
            .find("tensor 't' is mapped twice") != std::string::npos);
}

TEST_CASE("CheckpointFilesThatAreFifosOrDevicesAreRefusedWithoutBlocking") {
  // Opening a FIFO for reading waits for a writer, and /dev/zero never ends: both must be
  // refused as not regular files, the shard named.
  TempDir d;
  REQUIRE(::mkfifo(d.sub("b.safetensors").c_str(), 0600) == 0);
  CHECK(IndexOpenError(d, R"({"weight_map": {"t": "a.safetensors", "u": "b.safetensors"}})")
            .find("b.safetensors: not a regular file") != std::string::npos);
  TempDir e;
  REQUIRE(::mkfifo(e.sub("model.safetensors.index.json").c_str(), 0600) == 0);
  auto c = SafetensorsCheckpoint::Open(e.path());
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message().find("not a regular file") != std::string::npos);
  c = SafetensorsCheckpoint::Open("/dev/zero");
  REQUIRE_FALSE(c.ok());
  CHECK(c.status().message().find("not a regular file") != std::string::npos);
}

// ---------------------------------------------------------------- dtype conversions

TEST_CASE("ExactDtypeConversionsKeepEveryValue") {
  CHECK(DTypeConversionIsExact(DType::kBF16, DType::kF32));
  CHECK(DTypeConversionIsExact(DType::kF16, DType::kF32));
  CHECK_FALSE(DTypeConversionIsExact(DType::kF32, DType::kBF16));
  CHECK_FALSE(DTypeConversionIsExact(DType::kF16, DType::kBF16));
  CHECK_FALSE(DTypeConversionIsExact(DType::kBF16, DType::kF16));
  const uint16_t bf16[] = {0x3f80, 0xc000, 0x0001};  // 1, -2, a subnormal
  float f[3];
  ConvertDType(DType::kBF16, DType::kF32, bf16, f, 3);
  CHECK(f[0] == 1.0f);
  CHECK(f[1] == -2.0f);
  CHECK(f[2] > 0.0f);
  const uint16_t f16[] = {0x3c00, 0x0001, 0xfbff, 0x7c00};  // 1, 2^-24, -65504, inf
  ConvertDType(DType::kF16, DType::kF32, f16, f, 3);
  CHECK(f[0] == 1.0f);
  CHECK(f[1] == std::ldexp(1.0f, -24));
  CHECK(f[2] == -65504.0f);
  const uint8_t fp8[] = {0x38, 0x01, 0x7e};  // 1, 2^-9, 448
  ConvertDType(DType::kFP8E4M3, DType::kF32, fp8, f, 3);
  CHECK(f[0] == 1.0f);
  CHECK(f[1] == std::ldexp(1.0f, -9));
  CHECK(f[2] == 448.0f);
  uint16_t h[3];
  ConvertDType(DType::kFP8E4M3, DType::kF16, fp8, h, 3);
  float back[3];
  ConvertDType(DType::kF16, DType::kF32, h, back, 3);
  CHECK(back[0] == 1.0f);
  CHECK(back[1] == std::ldexp(1.0f, -9));
  CHECK(back[2] == 448.0f);
}

// ---------------------------------------------------------------- WriteSource

TEST_CASE("WriteSourceSlicesTpShardsFusedQkvAndRowParallelColumns") {
  auto ms = TpManifests("tiny-llama", 2);
  auto sources = SourcesOf(ms, 7);
  TpGroup g(ms);
  g.BeginFull("t1");
  for (int r = 0; r < 2; ++r) {
    Participant& p = *g.ranks[r];
    const std::string k = "model.layers.0.self_attn.k_proj.weight";
    auto n = p.WriteSource(k, sources[k].bytes.data(), sources[k].bytes.size());
    REQUIRE(n.ok());
    CHECK(n.value() == 1);
    const std::string o = "model.layers.0.self_attn.o_proj.weight";  // split on columns
    REQUIRE(p.WriteSource(o, sources[o].bytes.data(), sources[o].bytes.size()).ok());
    // Every live element of the written shards equals its source element.
    for (const std::string& src : {k, o}) {
      for (const ShardRef& ref : p.manifest().ShardsOfSource(src)) {
        const ParamSpec& ps = p.manifest().params()[ref.param];
        const ShardSpec& sh = ps.shards[ref.shard];
        const size_t esz = DTypeSize(ps.dtype);
        std::vector<uint8_t> want(static_cast<size_t>(NumElements(sh.source_box)) * esz);
        CopyBoxOut(sh.source_shape, sh.source_box, esz, sources[src].bytes.data(), want.data());
        std::vector<uint8_t> live = Live(p, ps.name);
        std::vector<uint8_t> got(want.size());
        CopyBoxOut(ps.shape, sh.box, esz, live.data(), got.data());
        INFO(src << " rank " << r);
        CHECK(got == want);
      }
    }
  }
}

TEST_CASE("WriteSourceOfStackedExpertsWritesEveryExpertShard") {
  auto ms = TpManifests("tiny-deepseek", 2);
  auto sources = SourcesOf(ms, 3);
  TpGroup g(ms);
  g.BeginFull("t1");
  const std::string gate = "model.layers.1.mlp.experts.5.gate_proj.weight";
  auto n = g.ranks[1]->WriteSource(gate, sources[gate].bytes.data(), sources[gate].bytes.size());
  REQUIRE(n.ok());
  CHECK(n.value() == static_cast<int>(ms[1]->ShardsOfSource(gate).size()));
  CHECK(n.value() >= 1);
}

TEST_CASE("WriteSourceReturnsZeroWhenTheRankHoldsNoneOfIt") {
  auto ms = TpManifests("tiny-llama", 1);
  TpGroup g(ms);
  g.BeginFull("t1");
  uint8_t b[4] = {};
  auto n = g.ranks[0]->WriteSource("no.such.tensor", b, sizeof b);
  REQUIRE(n.ok());
  CHECK(n.value() == 0);
  CHECK_FALSE(g.ranks[0]->status().dirty);
}

TEST_CASE("WriteSourceOfTheWrongByteSizeIsRefusedAndWritesNothing") {
  auto ms = TpManifests("tiny-llama", 2);
  auto sources = SourcesOf(ms, 1);
  TpGroup g(ms);
  g.BeginFull("t1");
  const std::string q = "model.layers.1.self_attn.q_proj.weight";
  auto n = g.ranks[0]->WriteSource(q, sources[q].bytes.data(), sources[q].bytes.size() - 2);
  REQUIRE_FALSE(n.ok());
  CHECK(n.status().code() == ErrorCode::kBadWrite);
  CHECK(n.status().message().find(q) != std::string::npos);
  CHECK_FALSE(g.ranks[0]->status().dirty);
  // The right size then lands: nothing of the refused call was counted.
  CHECK(g.ranks[0]->WriteSource(q, sources[q].bytes.data(), sources[q].bytes.size()).ok());
}

TEST_CASE("WriteSourceWithoutTransactionIsNoTxAndTwiceIsDuplicate") {
  auto ms = TpManifests("tiny-llama", 1);
  auto sources = SourcesOf(ms, 1);
  TpGroup g(ms);
  const std::string v = "model.layers.0.self_attn.v_proj.weight";
  auto n = g.ranks[0]->WriteSource(v, sources[v].bytes.data(), sources[v].bytes.size());
  REQUIRE_FALSE(n.ok());
  CHECK(n.status().code() == ErrorCode::kNoTx);
  g.BeginFull("t1");
  REQUIRE(g.ranks[0]->WriteSource(v, sources[v].bytes.data(), sources[v].bytes.size()).ok());
  n = g.ranks[0]->WriteSource(v, sources[v].bytes.data(), sources[v].bytes.size());
  REQUIRE_FALSE(n.ok());
  CHECK(n.status().code() == ErrorCode::kDuplicateWrite);
  CHECK(n.status().message().find(v) != std::string::npos);
}

// ------------------------------------------------------- WriteSource by source box (issue 38)

// The pieces a source splits into: dim 0 in `rows` parts and (2-D and more) the last dim in
// `cols` parts, as FSDP (rows) and a column-parallel trainer (cols) hold them.
std::vector<Box> Tiles(const Shape& shape, int rows, int cols) {
  auto split = [](int64_t n, int k) {
    std::vector<Range> out;
    for (int i = 0; i < k; ++i) {
      const Range r{n * i / k, n * (i + 1) / k};
      if (r.end > r.begin) out.push_back(r);
    }
    return out;
  };
  std::vector<Box> out;
  const Box whole = WholeBox(shape);
  for (const Range& r : split(shape[0], rows)) {
    for (const Range& c :
         shape.size() >= 2 ? split(shape.back(), cols) : std::vector<Range>{whole.back()}) {
      Box b = whole;
      b[0] = r;
      if (shape.size() >= 2) b.back() = c;
      out.push_back(b);
    }
  }
  return out;
}

std::vector<uint8_t> PieceBytes(const Source& s, const Box& box) {
  const size_t esz = DTypeSize(s.dtype);
  std::vector<uint8_t> out(static_cast<size_t>(NumElements(box)) * esz);
  CopyBoxOut(s.shape, box, esz, s.bytes.data(), out.data());
  return out;
}

// Every rank of a tp-2 group of `model` gets every source as the pieces of
// Tiles(shape, rows, cols), each through `send` (one sender per tile); the commit must be the
// version a full write of the same sources commits.
void CheckPiecesCommitTheFullWritesVersion(
    const char* model, int rows, int cols, uint64_t seed,
    const std::function<void(Participant&, const Source&, const Box&)>& send) {
  INFO(model << " rows " << rows << " cols " << cols);
  auto ms = TpManifests(model, 2);
  auto sources = SourcesOf(ms, seed);
  auto e = ComputeExpectedVersion(Raw(ms), Lookup(sources));
  REQUIRE(e.ok());
  TpGroup g(ms);
  g.BeginFull("t1");
  for (auto& p : g.ranks) {
    for (const auto& [name, s] : sources) {
      for (const Box& box : Tiles(s.shape, rows, cols)) send(*p, s, box);
    }
    REQUIRE(p->Refresh("*").ok());
  }
  g.CommitExpecting("t1", e.value().version);
}

TEST_CASE("PiecesFromSeveralSendersCommitTheVersionOfAFullWrite") {
  for (const char* model : {"tiny-llama", "tiny-deepseek"}) {
    for (auto [rows, cols] : {std::pair{2, 1}, std::pair{3, 2}}) {
      CheckPiecesCommitTheFullWritesVersion(
          model, rows, cols, 17, [](Participant& p, const Source& s, const Box& box) {
            const std::vector<uint8_t> piece = PieceBytes(s, box);
            auto n = p.WriteSource(s.name, piece.data(), piece.size(), box);
            INFO(s.name << " " << BoxToString(box) << ": " << n.status().ToString());
            REQUIRE(n.ok());
          });
    }
  }
}

TEST_CASE("OverlappingPieceIsADuplicateWriteNamingBothBoxes") {
  auto ms = TpManifests("tiny-llama", 1);
  auto sources = SourcesOf(ms, 5);
  TpGroup g(ms);
  g.BeginFull("t1");
  const Source& s = sources.at("model.layers.0.mlp.down_proj.weight");  // [32, 48]
  const Box a{{0, 20}, {0, 48}}, b{{16, 32}, {0, 48}};
  auto pa = PieceBytes(s, a), pb = PieceBytes(s, b);
  REQUIRE(g.ranks[0]->WriteSource(s.name, pa.data(), pa.size(), a).ok());
  auto n = g.ranks[0]->WriteSource(s.name, pb.data(), pb.size(), b);
  REQUIRE_FALSE(n.ok());
  CHECK(n.status().code() == ErrorCode::kDuplicateWrite);
  CHECK(n.status().message().find(BoxToString(a)) != std::string::npos);
  CHECK(n.status().message().find(BoxToString(b)) != std::string::npos);
  // Nothing of the refused piece landed: its rows past the overlap are still missing.
  const Box rest{{20, 32}, {0, 48}};
  auto pr = PieceBytes(s, rest);
  CHECK(g.ranks[0]->WriteSource(s.name, pr.data(), pr.size(), rest).ok());
}

TEST_CASE("PieceOutsideTheSourceOrOfTheWrongSizeIsRefusedNamingIt") {
  auto ms = TpManifests("tiny-llama", 1);
  TpGroup g(ms);
  g.BeginFull("t1");
  const std::string norm = "model.norm.weight";  // [H]
  const int64_t h = ms[0]->SourceShape(norm)->at(0);
  std::vector<uint8_t> b(64 * 2);
  for (const Box& bad : {Box{{h - 2, h + 2}}, Box{{0, 4}, {0, 1}}, Box{{5, 5}}, Box{{-1, 3}}}) {
    auto n = g.ranks[0]->WriteSource(norm, b.data(), 4 * 2, bad);
    INFO(BoxToString(bad));
    REQUIRE_FALSE(n.ok());
    CHECK(n.status().code() == ErrorCode::kOutOfRange);
    CHECK(n.status().message().find(norm) != std::string::npos);
  }
  auto n = g.ranks[0]->WriteSource(norm, b.data(), 3 * 2, Box{{0, 4}});
  REQUIRE_FALSE(n.ok());
  CHECK(n.status().code() == ErrorCode::kBadWrite);
}

TEST_CASE("PieceNoShardOfTheRankIntersectsWritesNothingAndMissingPiecesAbort") {
  auto ms = TpManifests("tiny-llama", 2);
  auto sources = SourcesOf(ms, 9);
  TpGroup g(ms);
  g.BeginFull("t1");
  // k_proj at tp 2: rank 0 holds the first half of its rows, rank 1 the second.
  const Source& k = sources.at("model.layers.0.self_attn.k_proj.weight");
  const std::vector<ShardRef>& held = ms[0]->ShardsOfSource(k.name);
  REQUIRE(held.size() == 1);
  const Box top = ms[0]->params()[held[0].param].shards[held[0].shard].source_box;
  auto piece = PieceBytes(k, top);
  CHECK(g.ranks[0]->WriteSource(k.name, piece.data(), piece.size(), top).value() == 1);
  CHECK(g.ranks[1]->WriteSource(k.name, piece.data(), piece.size(), top).value() == 0);
  // Every other source whole on both ranks; rank 1 never gets its half of k_proj.
  for (auto& p : g.ranks) {
    for (const auto& [name, s] : sources) {
      if (name != k.name) REQUIRE(p->WriteSource(name, s.bytes.data(), s.bytes.size()).ok());
    }
    REQUIRE(p->Refresh("*").ok());
  }
  CommitOutcome o = g.coord->Commit("t1", {});
  CHECK(o.decision == Decision::kAbort);
  for (const VoteReport& v : o.votes) {
    INFO("rank " << v.rank << ": " << v.vote.message);
    CHECK(v.vote.yes == (v.rank == 0));
    if (v.rank == 1) CHECK(v.vote.error == ErrorCode::kCoverageIncomplete);
  }
}

TEST_CASE("PieceLandingsReserveThePartEachShardHoldsAndCommitTheFullWritesVersion") {
  // Reserve/Landed by source box: a transport receives each piece straight into the parts of
  // the live tensors it covers (here copied in from the piece, as a receive would).
  auto land = [](Participant& p, const Source& s, const Box& box) {
    const size_t esz = DTypeSize(s.dtype);
    const std::vector<uint8_t> piece = PieceBytes(s, box);
    const Shape extents = BoxExtents(box);
    LandingRegion region;
    region.source = s.name;
    region.source_box = box;
    auto rs = p.Reserve(region);
    REQUIRE(rs.ok());
    for (const Reservation& r : rs.value()) {
      REQUIRE(r.host != nullptr);
      Box rel = r.source_box;  // the reserved part, relative to the piece
      for (size_t d = 0; d < rel.size(); ++d) {
        rel[d] = {rel[d].begin - box[d].begin, rel[d].end - box[d].begin};
      }
      std::vector<uint8_t> part(static_cast<size_t>(NumElements(rel)) * esz);
      CopyBoxOut(extents, rel, esz, piece.data(), part.data());
      CopyBoxIn(p.manifest().params()[r.param_index].shape, r.box, esz, part.data(), r.host);
    }
    REQUIRE(p.Landed(region).ok());
  };
  for (const char* model : {"tiny-llama", "tiny-deepseek"}) {
    CheckPiecesCommitTheFullWritesVersion(model, 2, 2, 23, land);
  }
}

TEST_CASE("PieceLandingThatOverlapsAWrittenPieceIsRefused") {
  auto ms = TpManifests("tiny-llama", 1);
  auto sources = SourcesOf(ms, 5);
  TpGroup g(ms);
  g.BeginFull("t1");
  const Source& s = sources.at("model.norm.weight");
  const int64_t h = s.shape[0];
  const Box a{{0, h / 2 + 1}};
  auto pa = PieceBytes(s, a);
  REQUIRE(g.ranks[0]->WriteSource(s.name, pa.data(), pa.size(), a).ok());
  LandingRegion region;
  region.source = s.name;
  region.source_box = Box{{h / 2, h}};
  auto rs = g.ranks[0]->Reserve(region);
  REQUIRE_FALSE(rs.ok());
  CHECK(rs.status().code() == ErrorCode::kDuplicateWrite);
  region.source_box = Box{{h / 2, h + 1}};
  CHECK(g.ranks[0]->Reserve(region).status().code() == ErrorCode::kOutOfRange);
}

// ------------------------------------------- transfer plans, piece digests, deltas by piece

TransferPlan PlanFor(const std::string& model, const std::string& spec,
                     const std::vector<ManifestPtr>& engine) {
  std::ifstream in(Model(model));
  const json config = json::parse(in);
  auto t = ParseTrainerSpec(spec, &config);
  REQUIRE(t.ok());
  auto plan = PlanTransfer(**t, engine);
  REQUIRE(plan.ok());
  return std::move(plan).value();
}

std::string Sender(int trainer) { return "trainer rank " + std::to_string(trainer); }

// Runs `plan` into group `g`: each piece's digest is expected, then its bytes (after
// `corrupt`, which may change them in flight) are written by source box.
void SendPlan(const TransferPlan& plan, TpGroup& g, const std::map<std::string, Source>& sources,
              const std::function<void(size_t, std::vector<uint8_t>&)>& corrupt = {}) {
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    const PlannedPiece& pp = plan.pieces[i];
    const Source& s = sources.at(plan.sources[pp.source].name);
    const Box box = plan.BoxOf(i);
    std::vector<uint8_t> bytes = PieceBytes(s, box);
    Participant& p = *g.ranks[pp.engine];
    REQUIRE(
        p.ExpectPiece({s.name, box, Sender(pp.trainer), PieceDigest(bytes.data(), bytes.size())})
            .ok());
    if (corrupt) corrupt(i, bytes);
    auto n = p.WriteSource(s.name, bytes.data(), bytes.size(), box);
    INFO(s.name << " " << BoxToString(box) << ": " << n.status().ToString());
    REQUIRE(n.ok());
    CHECK(n.value() >= 1);  // a planned piece always lands on its engine rank
  }
  for (auto& p : g.ranks) REQUIRE(p->Refresh("*").ok());
}

TEST_CASE("PlannedPiecesWithDigestsCommitTheVersionOfAFullWrite") {
  struct Config {
    const char* model;
    const char* trainer;
    int tp, ep;
  };
  for (const Config& c :
       {Config{"tiny-llama", "fsdp:2", 2, 1}, Config{"tiny-qwen3-moe", "fsdp:2", 2, 1},
        Config{"tiny-llama", "fsdp:4", 2, 1}, Config{"tiny-llama", "tp:2", 4, 1},
        Config{"tiny-qwen3-moe", "ep:2", 1, 4}, Config{"tiny-deepseek", "tp:2,ep:2", 2, 4}}) {
    INFO(c.model << " " << c.trainer << " -> tp " << c.tp << " ep " << c.ep);
    auto ms = GroupManifests(c.model, c.tp, c.ep);
    auto sources = SourcesOf(ms, 29);
    auto e = ComputeExpectedVersion(Raw(ms), Lookup(sources));
    REQUIRE(e.ok());
    const TransferPlan plan = PlanFor(c.model, c.trainer, ms);
    for (size_t n = 0; n < ms.size(); ++n) {
      CHECK(CheckPlanForEngine(plan, static_cast<int>(n), *ms[n]).ok());
    }
    TpGroup g(ms);
    g.BeginFull("t1");
    SendPlan(plan, g, sources);
    g.CommitExpecting("t1", e.value().version);
  }
}

TEST_CASE("CorruptedPieceVotesVersionMismatchNamingSourceBoxAndSender") {
  auto ms = GroupManifests("tiny-llama", 2, 1);
  auto sources = SourcesOf(ms, 31);
  const TransferPlan plan = PlanFor("tiny-llama", "fsdp:2", ms);
  size_t bad = 0;
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    if (plan.pieces[i].trainer == 1 && plan.pieces[i].engine == 0) bad = i;
  }
  TpGroup g(ms);
  g.BeginFull("t1");
  SendPlan(plan, g, sources, [&](size_t i, std::vector<uint8_t>& bytes) {
    if (i == bad) bytes[bytes.size() / 2] ^= 0x40;
  });
  CommitOutcome o = g.coord->Commit("t1", {});
  CHECK(o.decision == Decision::kAbort);
  const std::string want = "source '" + plan.sources[plan.pieces[bad].source].name + "' piece " +
                           BoxToString(plan.BoxOf(bad)) + " from trainer rank 1: landed digest ";
  for (const VoteReport& v : o.votes) {
    INFO("rank " << v.rank << ": " << v.vote.message);
    CHECK(v.vote.yes == (v.rank == 1));
    if (v.rank != 0) continue;
    CHECK(v.vote.error == ErrorCode::kVersionMismatch);
    CHECK(v.vote.message.find(want) != std::string::npos);
  }
  CHECK_FALSE(g.ranks[0]->status().serving);
}

TEST_CASE("PieceDigestsAreCheckedOnDeviceLiveMemoryToo") {
  auto ms = GroupManifests("tiny-llama", 2, 1);
  auto sources = SourcesOf(ms, 35);
  const TransferPlan plan = PlanFor("tiny-llama", "fsdp:2", ms);
  auto e = ComputeExpectedVersion(Raw(ms), Lookup(sources));
  REQUIRE(e.ok());
  {
    TpGroup g(ms, /*reference_device=*/true);
    g.BeginFull("t1");
    SendPlan(plan, g, sources);
    g.CommitExpecting("t1", e.value().version);
  }
  TpGroup g(ms, /*reference_device=*/true);
  g.BeginFull("t1");
  SendPlan(plan, g, sources, [&](size_t i, std::vector<uint8_t>& bytes) {
    if (i == plan.pieces.size() - 1) bytes[0] ^= 1;
  });
  CommitOutcome o = g.coord->Commit("t1", {});
  CHECK(o.decision == Decision::kAbort);
  const int bad = plan.pieces.back().engine;
  for (const VoteReport& v : o.votes) {
    if (v.rank == bad) CHECK(v.vote.error == ErrorCode::kVersionMismatch);
  }
}

TEST_CASE("PieceSentToTheWrongRankIsRefusedBeforeAnyByteLands") {
  auto ms = GroupManifests("tiny-llama", 2, 1);
  auto sources = SourcesOf(ms, 33);
  TpGroup g(ms);
  g.BeginFull("t1");
  const Source& k = sources.at("model.layers.0.self_attn.k_proj.weight");
  const auto& held = ms[0]->ShardsOfSource(k.name);
  const Box top = ms[0]->params()[held[0].param].shards[held[0].shard].source_box;
  auto bytes = PieceBytes(k, top);
  const std::string digest = PieceDigest(bytes.data(), bytes.size());
  Status s = g.ranks[1]->ExpectPiece({k.name, top, "trainer rank 0", digest});
  CHECK(s.code() == ErrorCode::kOutOfRange);
  CHECK(s.message().find("source '" + k.name + "' piece " + BoxToString(top) +
                         " from trainer rank 0: not inside a shard of rank 1") !=
        std::string::npos);
  CHECK(s.message().find("wrong rank") != std::string::npos);
  CHECK(g.ranks[1]->ExpectPiece({"no.such", top, "trainer rank 0", digest}).code() ==
        ErrorCode::kOutOfRange);
  CHECK(g.ranks[0]->ExpectPiece({k.name, top, "trainer rank 0", "xyz"}).code() ==
        ErrorCode::kInvalidArgument);
  REQUIRE(g.ranks[0]->ExpectPiece({k.name, top, "trainer rank 0", digest}).ok());
  Status twice = g.ranks[0]->ExpectPiece({k.name, top, "trainer rank 1", digest});
  CHECK(twice.code() == ErrorCode::kDuplicateWrite);
  CHECK(twice.message().find("from trainer rank 0 expected earlier") != std::string::npos);
  CHECK_FALSE(g.ranks[1]->status().dirty);
}

// A delta on `base` by pieces: each planned piece patches every `stride`-th element of its box
// (values from `sources2`), sent by its trainer rank; returns the patched sources.
std::map<std::string, Source> PatchByPieces(const TransferPlan& plan, TpGroup& g,
                                            const std::map<std::string, Source>& base,
                                            int64_t stride) {
  std::map<std::string, Source> out = base;
  for (size_t i = 0; i < plan.pieces.size(); ++i) {
    const PlannedPiece& pp = plan.pieces[i];
    Source& s = out.at(plan.sources[pp.source].name);
    const Box box = plan.BoxOf(i);
    const size_t esz = DTypeSize(s.dtype);
    std::vector<int64_t> indices;
    std::vector<uint8_t> values;
    int64_t k = 0;
    ForEachFlatRun(s.shape, box, [&](int64_t b, int64_t len) {
      for (int64_t f = b; f < b + len; ++f, ++k) {
        if (k % stride != 0) continue;
        indices.push_back(f);
        for (size_t j = 0; j < esz; ++j) {
          // From the base, so that an element sent to several engine ranks (a replicated
          // tensor) gets one new value.
          const size_t at = static_cast<size_t>(f) * esz + j;
          s.bytes[at] = static_cast<uint8_t>(base.at(s.name).bytes[at] + 1 + j);
          values.push_back(s.bytes[at]);
        }
      }
    });
    PatchRequest req;
    req.source = s.name;
    req.indices = indices;
    req.values = values.data();
    req.value_bytes = values.size();
    req.source_box = box;
    Status st = g.ranks[pp.engine]->Patch(req);
    INFO(s.name << " " << BoxToString(box) << ": " << st.ToString());
    REQUIRE(st.ok());
  }
  for (auto& p : g.ranks) REQUIRE(p->Refresh("*").ok());
  return out;
}

BeginRequest DeltaOf(const std::string& tx, const std::string& base,
                     const std::map<std::string, Source>& sources) {
  BeginRequest b;
  b.tx = tx;
  b.kind = TxKind::kDelta;
  b.base = base;
  for (const auto& [name, s] : sources) b.sources.push_back(name);
  return b;
}

TEST_CASE("DeltaByPiecesOnTheCommittedBaseCommitsThePatchedVersion") {
  for (const char* model : {"tiny-llama", "tiny-qwen3-moe"}) {
    INFO(model);
    auto ms = GroupManifests(model, 2, 1);
    auto sources = SourcesOf(ms, 37);
    const TransferPlan plan = PlanFor(model, "fsdp:2", ms);
    TpGroup g(ms);
    g.BeginFull("t1");
    SendPlan(plan, g, sources);
    CommitOutcome full = g.coord->Commit("t1", {});
    REQUIRE(full.decision == Decision::kCommit);
    REQUIRE(g.coord->Begin(DeltaOf("t2", full.version, sources)).status.ok());
    auto patched = PatchByPieces(plan, g, sources, 7);
    auto e = ComputeExpectedVersion(Raw(ms), Lookup(patched));
    REQUIRE(e.ok());
    CHECK(g.CommitExpecting("t2", e.value().version).version != full.version);
  }
}

TEST_CASE("DeltaPiecesThatOverlapLeaveAGapOrStrayAreRefusedOrAbort") {
  auto ms = GroupManifests("tiny-llama", 1, 1);
  auto sources = SourcesOf(ms, 41);
  TpGroup g(ms);
  g.BeginFull("t1");
  g.WriteAll(sources);
  CommitOutcome full = g.coord->Commit("t1", {});
  REQUIRE(full.decision == Decision::kCommit);
  const Source& s = sources.at("model.layers.0.mlp.down_proj.weight");
  std::map<std::string, Source> only{{s.name, s}};
  REQUIRE(g.coord->Begin(DeltaOf("t2", full.version, only)).status.ok());
  Participant& p = *g.ranks[0];
  auto piece = [&](Box box, std::vector<int64_t> indices, int part = 0, int parts = 1) {
    std::vector<uint8_t> values(indices.size() * DTypeSize(s.dtype), 7);
    PatchRequest req;
    req.source = s.name;
    req.indices = indices;
    req.values = values.data();
    req.value_bytes = values.size();
    req.source_box = box;
    req.part = part;
    req.parts = parts;
    return p.Patch(req);
  };
  const int64_t r = s.shape[0], c = s.shape[1];
  REQUIRE(r % 4 == 0);
  auto rows = [&](int64_t lo, int64_t hi) { return Box{{lo, hi}, {0, c}}; };
  Status first = piece(rows(0, r / 2), {0, c * (r / 2 - 1)});
  INFO(first.ToString());
  REQUIRE(first.ok());
  Status overlap = piece(rows(r / 4, r), {c * (r - 1)});
  CHECK(overlap.code() == ErrorCode::kDuplicateWrite);
  CHECK(overlap.message().find("piece " + BoxToString(rows(r / 4, r)) + " overlaps the piece " +
                               BoxToString(rows(0, r / 2))) != std::string::npos);
  Status stray = piece(rows(r / 2, 3 * r / 4), {c * (r - 1)});
  CHECK(stray.code() == ErrorCode::kOutOfRange);
  CHECK(stray.message().find("index " + std::to_string(c * (r - 1)) + " lies outside the piece") !=
        std::string::npos);
  CHECK(piece(rows(r / 2, r + 1), {}).code() == ErrorCode::kOutOfRange);
  CHECK(piece(rows(r / 2, 3 * r / 4), {}, 0, 2).code() == ErrorCode::kBadWrite);
  // Rows [r/2, 3r/4) arrive, [3r/4, r) never do: the vote names the gap.
  REQUIRE(piece(rows(r / 2, 3 * r / 4), {c * (r / 2)}).ok());
  REQUIRE(p.Refresh("*").ok());
  CommitOutcome o = g.coord->Commit("t2", {});
  CHECK(o.decision == Decision::kAbort);
  REQUIRE(o.votes.size() == 1);
  CHECK(o.votes[0].vote.error == ErrorCode::kCoverageIncomplete);
  REQUIRE(o.votes[0].vote.missing.size() == 1);
  CHECK(o.votes[0].vote.missing[0].box == rows(3 * r / 4, r));
}

// ---------------------------------------------------------------- expected versions

TEST_CASE("ExpectedVersionEqualsTheVersionAFullLoadCommits") {
  for (const char* model : {"tiny-llama", "tiny-deepseek"}) {
    INFO(model);
    auto ms = TpManifests(model, 2);
    auto sources = SourcesOf(ms, 11);
    auto e = ComputeExpectedVersion(Raw(ms), Lookup(sources));
    REQUIRE(e.ok());
    TpGroup g(ms);
    g.BeginFull("t1");
    g.WriteAll(sources);
    CommitOptions opts;
    opts.expect_version = e.value().version;
    opts.expect_rank_digests = e.value().rank_digests;
    CommitOutcome o = g.coord->Commit("t1", opts);
    REQUIRE(o.status.ok());
    CHECK(o.decision == Decision::kCommit);
    CHECK(o.version == e.value().version);
    for (int r = 0; r < 2; ++r) {
      CHECK(g.ranks[r]->status().digest == e.value().rank_digests[r]);
      CHECK(g.ranks[r]->RecomputeDigest().value() == e.value().rank_digests[r]);
    }
  }
}

TEST_CASE("CommitWhoseDigestsDifferFromTheExpectedVersionAbortsNamingTheRank") {
  auto ms = TpManifests("tiny-llama", 2);
  auto sources = SourcesOf(ms, 1);
  auto e = ComputeExpectedVersion(Raw(ms), Lookup(sources));
  REQUIRE(e.ok());
  TpGroup g(ms);
  g.BeginFull("t1");
  g.WriteAll(sources);
  REQUIRE(g.coord->Commit("t1").status.ok());
  // t2: rank 1 receives one different tensor.
  g.BeginFull("t2");
  auto other = sources;
  const std::string up = "model.layers.1.mlp.up_proj.weight";
  other[up].bytes = Bytes(up, other[up].bytes.size(), 99);
  for (int r = 0; r < 2; ++r) {
    for (const auto& [name, s] : (r == 1 ? other : sources)) {
      REQUIRE(g.ranks[r]->WriteSource(name, s.bytes.data(), s.bytes.size()).ok());
    }
  }
  CommitOptions opts;
  opts.expect_version = e.value().version;
  opts.expect_rank_digests = e.value().rank_digests;
  CommitOutcome o = g.coord->Commit("t2", opts);
  CHECK(o.status.code() == ErrorCode::kVersionMismatch);
  CHECK(o.decision == Decision::kAbort);
  CHECK(o.status.message().find("rank(s) 1 (") != std::string::npos);
  CHECK(o.status.message().find("rank(s) 0") == std::string::npos);
  CHECK_FALSE(g.coord->CommittedVersion("t2"));
  // The committed version stays that of t1.
  for (auto& p : g.ranks) CHECK(p->status().version == e.value().version);
}

TEST_CASE("ExpectedVersionRefusesMissingSourcesWrongShapesAndInexactDtypes") {
  auto ms = TpManifests("tiny-llama", 2);
  auto sources = SourcesOf(ms, 1);
  auto missing = sources;
  missing.erase("model.norm.weight");
  auto e = ComputeExpectedVersion(Raw(ms), Lookup(missing));
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().code() == ErrorCode::kNotFound);
  CHECK(e.status().message().find("model.norm.weight") != std::string::npos);
  auto bad = sources;
  bad["model.norm.weight"].shape = {2, 32};
  e = ComputeExpectedVersion(Raw(ms), Lookup(bad));
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message().find("model.norm.weight") != std::string::npos);
  auto f32 = SourcesOf(ms, 1, DType::kF32);  // f32 into bf16 live: not exact
  e = ComputeExpectedVersion(Raw(ms), Lookup(f32));
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message().find("cannot be converted exactly") != std::string::npos);
}

SourceTensor TensorOf(const Source& s) {
  return SourceTensor{s.name, s.shape, s.dtype, s.bytes.data(), s.bytes.size()};
}

TEST_CASE("ExpectedVersionBuiltSourceBySourceInAnyOrderEqualsTheWholeComputation") {
  // tiny-deepseek: MLA, experts, padding; tp 2 slices fused and row-parallel columns.
  for (const char* model : {"tiny-llama", "tiny-deepseek", "tiny-qwen2"}) {
    INFO(model);
    auto ms = TpManifests(model, 2);
    auto sources = SourcesOf(ms, 5);
    auto whole = ComputeExpectedVersion(Raw(ms), Lookup(sources));
    REQUIRE(whole.ok());
    std::vector<const Source*> order;
    for (const auto& [_, s] : sources) order.push_back(&s);
    std::reverse(order.begin(), order.end());  // another order than the manifests'
    auto b = ExpectedVersionBuilder::Create(Raw(ms));
    REQUIRE(b.ok());
    for (const Source* s : order) {
      auto fed = b.value()->Add(TensorOf(*s));
      REQUIRE(fed.ok());
      CHECK(fed.value() > 0);
    }
    CHECK(b.value()->sources_added() == sources.size());
    auto built = b.value()->Finish();
    REQUIRE(built.ok());
    CHECK(built.value().version == whole.value().version);
    CHECK(built.value().rank_digests == whole.value().rank_digests);
  }
}

TEST_CASE("ExpectedVersionBuilderRefusesADuplicateOrMisshapenSourceAndTakesNothingFromIt") {
  auto ms = TpManifests("tiny-llama", 2);
  auto sources = SourcesOf(ms, 7);
  auto whole = ComputeExpectedVersion(Raw(ms), Lookup(sources));
  REQUIRE(whole.ok());
  auto b = ExpectedVersionBuilder::Create(Raw(ms));
  REQUIRE(b.ok());
  ExpectedVersionBuilder& builder = *b.value();
  const Source& qkv = sources.at("model.layers.0.self_attn.q_proj.weight");
  Source wrong = qkv;
  wrong.shape = {wrong.shape[1], wrong.shape[0] * 2};
  wrong.bytes.resize(wrong.bytes.size() * 2);
  auto r = builder.Add(TensorOf(wrong));
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().message().find("q_proj.weight") != std::string::npos);
  CHECK(r.status().message().find("source shape") != std::string::npos);
  Source short_bytes = qkv;
  short_bytes.bytes.pop_back();
  CHECK_FALSE(builder.Add(TensorOf(short_bytes)).ok());
  CHECK(builder.sources_added() == 0);
  Source unknown{"model.not_a_tensor", {4}, DType::kBF16, std::vector<uint8_t>(8)};
  auto ignored = builder.Add(TensorOf(unknown));
  REQUIRE(ignored.ok());
  CHECK(ignored.value() == 0);
  for (const auto& [_, s] : sources) REQUIRE(builder.Add(TensorOf(s)).ok());
  auto twice = builder.Add(TensorOf(qkv));
  REQUIRE_FALSE(twice.ok());
  CHECK(twice.status().message().find("given twice") != std::string::npos);
  auto built = builder.Finish();
  REQUIRE(built.ok());
  CHECK(built.value().version == whole.value().version);
}

TEST_CASE("ExpectedVersionBuilderNamesTheFirstMissingSourceAtFinish") {
  auto ms = TpManifests("tiny-llama", 2);
  auto sources = SourcesOf(ms, 7);
  auto b = ExpectedVersionBuilder::Create(Raw(ms));
  REQUIRE(b.ok());
  for (const auto& [name, s] : sources) {
    if (name != "model.norm.weight") REQUIRE(b.value()->Add(TensorOf(s)).ok());
  }
  auto built = b.value()->Finish();
  REQUIRE_FALSE(built.ok());
  CHECK(built.status().code() == ErrorCode::kNotFound);
  CHECK(built.status().message().find("rank 0: parameter 'model.norm.weight'") !=
        std::string::npos);
}

TEST_CASE("ExpectedVersionBuilderConvertsAnExactSourceDtypeAsTheWholeComputationDoes") {
  auto ms = TpManifests("tiny-llama", 2, DType::kF32);
  auto bf16 = SourcesOf(ms, 9, DType::kBF16);  // bf16 into f32 live: exact
  auto whole = ComputeExpectedVersion(Raw(ms), Lookup(bf16));
  REQUIRE(whole.ok());
  std::map<std::string, Source> f32;
  for (const auto& [name, s] : bf16) {
    Source c{name, s.shape, DType::kF32, std::vector<uint8_t>(s.bytes.size() * 2)};
    ConvertDType(DType::kBF16, DType::kF32, s.bytes.data(), c.bytes.data(), s.bytes.size() / 2);
    f32[name] = std::move(c);
  }
  auto converted = ComputeExpectedVersion(Raw(ms), Lookup(f32));
  REQUIRE(converted.ok());
  CHECK(converted.value().version == whole.value().version);
  auto b = ExpectedVersionBuilder::Create(Raw(ms));
  REQUIRE(b.ok());
  for (const auto& [_, s] : bf16) REQUIRE(b.value()->Add(TensorOf(s)).ok());
  auto built = b.value()->Finish();
  REQUIRE(built.ok());
  CHECK(built.value().version == whole.value().version);
}

TEST_CASE("ScenarioCommitExpectVersionOfAnEarlierTxCommitsOrAbortsAndRanksReportDigests") {
  json sc = {{"ranks", 2},
             {"model", {{"hf_config", Model("tiny-llama")}, {"tp", 2}}},
             {"steps", json::parse(R"([
    {"op": "begin", "tx": "t1", "kind": "full"},
    {"op": "write", "param": "*", "fill": {"seed": 1}},
    {"op": "commit", "tx": "t1"},
    {"op": "begin", "tx": "t2", "kind": "full"},
    {"op": "write", "param": "*", "fill": {"seed": 1}},
    {"op": "commit", "tx": "t2", "expect_version": "$t1"},
    {"op": "begin", "tx": "t3", "kind": "full"},
    {"op": "write", "rank": 0, "param": "*", "fill": {"seed": 1}},
    {"op": "write", "rank": 1, "param": "*", "fill": {"seed": 2}},
    {"op": "commit", "tx": "t3", "expect_version": "$t1"}])")}};
  TempDir d;
  auto parsed = sim::ParseScenario(sc, d.path());
  REQUIRE(parsed.ok());
  for (const std::string transport : {"inproc", "tcp"}) {
    INFO(transport);
    Result<json> out = Status::InvalidArgument("not run");
    if (transport == "tcp") {
      sim::TcpSimOptions o;
      o.journal_dir = d.sub("tcp");
      o.binary = WTX_BINARY;
      out = sim::RunScenarioTcp(parsed.value(), o);
    } else {
      sim::SimOptions o;
      o.journal_dir = d.sub("inproc");
      out = sim::RunScenario(parsed.value(), o);
    }
    REQUIRE(out.ok());
    const json& steps = out.value()["steps"];
    CHECK(steps[5]["outcome"] == "committed");
    CHECK(steps[5]["version"] == steps[2]["version"]);
    CHECK(steps[9]["outcome"] == "aborted");
    CHECK(steps[9]["error"] == "E_VERSION_MISMATCH");
    CHECK(steps[9]["message"].get<std::string>().find("rank(s) 1 (") != std::string::npos);
    std::vector<std::string> digests;
    for (const json& r : out.value()["ranks"]) digests.push_back(r["digest"].get<std::string>());
    CHECK(CombineRankDigests(digests) == steps[2]["version"].get<std::string>());
  }
}

TEST_CASE("ScenarioExpectVersionMustBeANonEmptyString") {
  json sc = {{"ranks", 1},
             {"model", {{"hf_config", Model("tiny-llama")}, {"tp", 1}}},
             {"steps", json::parse(R"([{"op": "commit", "tx": "t1", "expect_version": 3}])")}};
  auto parsed = sim::ParseScenario(sc, "/");
  REQUIRE_FALSE(parsed.ok());
  CHECK(parsed.status().message().find("steps[0].expect_version") != std::string::npos);
}

// ---------------------------------------------------------------- wtx load / expect

namespace {
json RunLoad(const CheckpointLoadRequest& req, const TempDir& d) {
  auto plan = PlanCheckpointLoad(req);
  REQUIRE(plan.ok());
  sim::SimOptions o;
  o.journal_dir = d.sub("journals");
  auto run = sim::RunScenario(plan.value().scenario, o);
  REQUIRE(run.ok());
  return CheckpointLoadOutput(plan.value(), run.value());
}
CheckpointLoadRequest Req(const std::string& ckpt, const std::string& model, int tp) {
  CheckpointLoadRequest r;
  r.checkpoint = ckpt;
  r.hf_config = Model(model);
  r.tp = tp;
  return r;
}
}  // namespace

TEST_CASE("LoadCommitsTheVersionExpectPredicts") {
  for (const char* model : {"tiny-llama", "tiny-deepseek", "tiny-qwen2"}) {
    INFO(model);
    TempDir d;
    auto ms = TpManifests(model, 2);
    WriteCheckpoint(d.path(), SourcesOf(ms, 5), 2);
    auto req = Req(d.path(), model, 2);
    auto e = ExpectCheckpointVersion(req);
    REQUIRE(e.ok());
    req.expect_version = true;
    json out = RunLoad(req, d);
    CHECK(out["outcome"] == "committed");
    CHECK(out["version"] == e.value().version);
    REQUIRE(out["ranks"].size() == 2);
    for (int r = 0; r < 2; ++r) {
      CHECK(out["ranks"][r]["digest"] == e.value().rank_digests[r]);
      CHECK(out["ranks"][r]["serving"] == true);
    }
  }
}

TEST_CASE("LoadWithoutSpareDescriptorsReadsThroughTheMappingAndCommitsTheSameVersion") {
  // With descriptors 0..511 in use the checkpoint keeps no file open (CheckpointTensor::fd is
  // -1) and the ranks copy from the mapping instead of pread: same version as expected.
  TempDir d;
  auto ms = TpManifests("tiny-llama", 2);
  WriteCheckpoint(d.path(), SourcesOf(ms, 7), 2);
  auto req = Req(d.path(), "tiny-llama", 2);
  auto e = ExpectCheckpointVersion(req);
  REQUIRE(e.ok());
  {
    auto open = SafetensorsCheckpoint::Open(d.path());
    REQUIRE(open.ok());
    const CheckpointTensor* t = open.value()->Find(open.value()->names().front());
    REQUIRE(t != nullptr);
    CHECK(t->fd >= 0);  // descriptors to spare: kept for pread
  }
  // dup returns the lowest free descriptor: once one is 511 or more, all below are taken.
  std::vector<int> held = {open("/dev/null", O_RDONLY)};
  REQUIRE(held[0] >= 0);
  while (held.back() < 511) {
    held.push_back(dup(held[0]));
    REQUIRE(held.back() >= 0);
  }
  {
    auto open = SafetensorsCheckpoint::Open(d.path());
    REQUIRE(open.ok());
    for (const std::string& n : open.value()->names()) CHECK(open.value()->Find(n)->fd == -1);
  }
  req.expect_version = true;
  json out = RunLoad(req, d);
  for (int fd : held) close(fd);
  CHECK(out["outcome"] == "committed");
  CHECK(out["version"] == e.value().version);
}

TEST_CASE("ExpectAndLoadOfAPaddedVocabularyTakeThePaddingRowsAsZeros") {
  // tiny-qwen3-moe: vocabulary 250 padded to 256; rank 1 holds 6 padding rows. They read no
  // checkpoint tensor (none is missing), stay zeros as vLLM's loader leaves them, and the
  // expected version hashes them so: the load commits exactly that version.
  TempDir d;
  auto ms = TpManifests("tiny-qwen3-moe", 2);
  WriteCheckpoint(d.path(), SourcesOf(ms, 5), 1);
  auto req = Req(d.path(), "tiny-qwen3-moe", 2);
  auto e = ExpectCheckpointVersion(req);
  INFO(e.status().ToString());
  REQUIRE(e.ok());
  req.expect_version = true;
  json out = RunLoad(req, d);
  INFO(out.dump());
  CHECK(out["outcome"] == "committed");
  CHECK_FALSE(out.contains("missing"));
  CHECK_FALSE(out.contains("error"));
  CHECK(out["version"] == e.value().version);
  for (int r = 0; r < 2; ++r) CHECK(out["ranks"][r]["digest"] == e.value().rank_digests[r]);
}

TEST_CASE("LoadOfACheckpointMissingATensorAbortsWithCoverageIncompleteNamingIt") {
  TempDir d;
  auto ms = TpManifests("tiny-llama", 2);
  auto sources = SourcesOf(ms, 5);
  sources.erase("model.layers.1.self_attn.k_proj.weight");
  WriteCheckpoint(d.path(), sources, 2);
  json out = RunLoad(Req(d.path(), "tiny-llama", 2), d);
  CHECK(out["outcome"] == "aborted");
  CHECK(out["version"].is_null());
  CHECK(out["error"] == "E_COVERAGE_INCOMPLETE");
  CHECK(out["message"].get<std::string>().find("model.layers.1.self_attn.k_proj.weight") !=
        std::string::npos);
  CHECK(out["missing"] == json::array({"model.layers.1.self_attn.k_proj.weight"}));
  CHECK(out["votes"][0]["error"] == "E_COVERAGE_INCOMPLETE");
  for (const json& r : out["ranks"]) CHECK(r["serving"] == false);
  auto e = ExpectCheckpointVersion(Req(d.path(), "tiny-llama", 2));
  REQUIRE_FALSE(e.ok());
  CHECK(e.status().message().find("k_proj") != std::string::npos);
}

TEST_CASE("LoadOfATensorOfTheWrongShapeIsRefusedNamingFileAndTensor") {
  TempDir d;
  auto ms = TpManifests("tiny-llama", 2);
  auto sources = SourcesOf(ms, 5);
  Source& v = sources["model.layers.0.self_attn.v_proj.weight"];
  v.shape = {64, 32};  // transposed: same bytes, wrong shape
  WriteCheckpoint(d.path(), sources, 1);
  auto plan = PlanCheckpointLoad(Req(d.path(), "tiny-llama", 2));
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().message().find("model.safetensors") != std::string::npos);
  CHECK(plan.status().message().find("'model.layers.0.self_attn.v_proj.weight'") !=
        std::string::npos);
  CHECK(plan.status().message().find("source_shape") != std::string::npos);
}

TEST_CASE("LoadConvertsBf16ToF32ExactlyAndRefusesF32IntoBf16") {
  TempDir d;
  auto ms = TpManifests("tiny-llama", 2);
  WriteCheckpoint(d.path(), SourcesOf(ms, 5), 2);  // bf16 checkpoint
  auto req = Req(d.path(), "tiny-llama", 2);
  req.dtype = DType::kF32;
  auto e = ExpectCheckpointVersion(req);
  REQUIRE(e.ok());
  json out = RunLoad(req, d);
  CHECK(out["outcome"] == "committed");
  CHECK(out["version"] == e.value().version);

  TempDir d32;
  WriteCheckpoint(d32.path(), SourcesOf(ms, 5, DType::kF32), 2);
  auto plan = PlanCheckpointLoad(Req(d32.path(), "tiny-llama", 2));  // bf16 live
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().message().find("not exact") != std::string::npos);
  CHECK(plan.status().message().find(".safetensors: tensor '") != std::string::npos);
}

TEST_CASE("LoadOfACorruptShardIsRefusedNamingTheFileAndChangesNothing") {
  TempDir d;
  auto ms = TpManifests("tiny-llama", 2);
  WriteCheckpoint(d.path(), SourcesOf(ms, 5), 2);
  auto req = Req(d.path(), "tiny-llama", 2);
  json first = RunLoad(req, d);
  REQUIRE(first["outcome"] == "committed");
  // Truncate the second shard in the middle of its data.
  const std::string shard = d.sub("model-2.safetensors");
  std::ifstream in(shard, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  WriteFile(shard, bytes.substr(0, bytes.size() / 2));
  auto plan = PlanCheckpointLoad(req);
  REQUIRE_FALSE(plan.ok());
  CHECK(plan.status().message().find("model-2.safetensors") != std::string::npos);
  CHECK(plan.status().message().find("past the end") != std::string::npos);
}

// ---------------------------------------------------------------- CLI

namespace {
using Run = wtx::testing::CommandResult;
Run Sh(const std::string& cmd) { return wtx::testing::RunCommand(cmd); }
}  // namespace

TEST_CASE("WtxExpectEqualsWtxLoadOnTheScriptGeneratedTinyCheckpoint") {
  TempDir d;
  const std::string script = std::string(WTX_SOURCE_DIR) + "/scripts/make_tiny_checkpoint.py";
  Run g = Sh("/usr/bin/python3 " + script + " --out " + d.sub("ckpt"));
  REQUIRE(g.code == 0);
  const std::string common =
      " --checkpoint " + d.sub("ckpt") + " --hf-config " + Model("tiny-llama") + " --tp 2 --json";
  Run e = Sh(std::string(WTX_BINARY) + " expect" + common);
  REQUIRE(e.code == 0);
  const json ej = json::parse(e.out);
  for (const char* transport : {"inproc", "tcp"}) {
    INFO(transport);
    Run l = Sh(std::string(WTX_BINARY) + " load" + common + " --transport " + transport);
    INFO(l.out);
    REQUIRE(l.code == 0);
    const json lj = json::parse(l.out);
    CHECK(lj["outcome"] == "committed");
    CHECK(lj["version"] == ej["version"]);
    for (int r = 0; r < 2; ++r) CHECK(lj["ranks"][r]["digest"] == ej["ranks"][r]["digest"]);
  }
  // The generator is deterministic: a second run writes the same bytes.
  Run g2 = Sh("/usr/bin/python3 " + script + " --out " + d.sub("ckpt2") + " && cmp " +
              d.sub("ckpt/model-00001-of-00002.safetensors") + " " +
              d.sub("ckpt2/model-00001-of-00002.safetensors"));
  CHECK(g2.code == 0);
}

TEST_CASE("WtxLoadOfABadCheckpointExitsTwoNamingFileAndTensor") {
  TempDir d;
  WriteFile(d.sub("model.safetensors"), FileBytes(One("F32", {100}, 0, 400), "abcd"));
  Run l = Sh(std::string(WTX_BINARY) + " load --checkpoint " + d.sub("model.safetensors") +
             " --hf-config " + Model("tiny-llama") + " --tp 2 --json");
  CHECK(l.code == 2);
  CHECK(l.out.find("model.safetensors: tensor 't'") != std::string::npos);
  Run e = Sh(std::string(WTX_BINARY) + " expect --checkpoint " + d.sub("nope") + " --hf-config " +
             Model("tiny-llama") + " --tp 2");
  CHECK(e.code == 2);
  CHECK(e.out.find("nope") != std::string::npos);
}

TEST_CASE("WtxLoadRefusesBadFlagsAndConfigsThatAreNotRegularFilesNamingThem") {
  TempDir d;
  WriteFile(d.sub("model.safetensors"), FileBytes(One("F32", {1}, 0, 4), "abcd"));
  const std::string bin = std::string(WTX_BINARY);
  const std::string ck = " --checkpoint " + d.sub("model.safetensors");
  // --tp is required (not silently 1), --dtype "" is no dtype.
  for (const char* cmd : {" load", " expect"}) {
    Run r = Sh(bin + cmd + ck + " --hf-config " + Model("tiny-llama"));
    CHECK(r.code == 2);
    CHECK(r.out.find("--tp") != std::string::npos);
    r = Sh(bin + cmd + ck + " --hf-config " + Model("tiny-llama") + " --tp 2 --dtype ''");
    CHECK(r.code == 2);
    CHECK(r.out.find("--dtype: unknown ''") != std::string::npos);
  }
  // A config that is a device, a FIFO or a folder is refused at once instead of read forever.
  REQUIRE(::mkfifo(d.sub("fifo.json").c_str(), 0600) == 0);
  for (const std::string& cfg : {std::string("/dev/zero"), d.sub("fifo.json"), d.path()}) {
    INFO(cfg);
    Run r = Sh("timeout 20 " + bin + " load" + ck + " --hf-config " + cfg + " --tp 2");
    CHECK(r.code == 2);
    CHECK(r.out.find("--hf-config '" + cfg + "': not a regular file") != std::string::npos);
  }
  Run r = Sh("timeout 20 " + bin + " manifest --hf-config /dev/zero --tp 1 --rank 0");
  CHECK(r.code == 2);
  CHECK(r.out.find("--hf-config '/dev/zero': not a regular file (a device)") != std::string::npos);
  r = Sh("timeout 20 " + bin + " sim " + d.sub("fifo.json"));
  CHECK(r.code == 2);
  CHECK(r.out.find("not a regular file") != std::string::npos);
}
