// Typed journal records and state (src/txn/participant_records.h, coordinator_records.h,
// participant_state.h): every record type round-trips through its one Encode and one Decode,
// a malformed record is corruption naming its seq and field, replay re-derives the dirty rule
// (DecideOutcome) instead of copying the stored answer, and a journal written in the shapes
// of the previous wtx still opens, replays and accepts new transactions.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "journal/journal.h"
#include "journal/record.h"
#include "src/history/history.h"
#include "src/txn/coordinator_records.h"
#include "src/txn/journal_check.h"
#include "src/txn/participant_records.h"
#include "src/txn/participant_state.h"
#include "src/util/cbor_writer.h"
#include "src/util/hash_util.h"
#include "tests/test_util.h"
#include "wtx/participant.h"

using nlohmann::json;
using namespace wtx;
using wtx::testing::Pattern;
using wtx::testing::SmallManifest;
using wtx::testing::TempDir;

namespace {

WriteRecord SampleWrite(const std::string& tx) {
  WriteRecord w;
  w.tx = tx;
  w.param = "qkv";
  w.box = {{0, 16}, {0, 8}};
  w.elements = 128;
  w.bytes = 256;
  w.shards = {"q"};
  w.ts = 11;
  return w;
}

// One fully populated record of every type, in ParticipantRecordType order.
std::vector<ParticipantRecord> Samples() {
  std::vector<ParticipantRecord> out;
  out.push_back(CreateRecord{3, "fp", 1});
  BeginRecord b;
  b.tx = "t1";
  b.kind = TxKind::kPartial;
  b.base = "v0";
  b.modules = {"attn"};
  b.sources = {"q_proj"};
  b.rollback = true;
  b.verify = VerifyMode::kAll;
  b.fingerprint = "fp";
  b.kernel_identity = "k1";
  b.ts = 2;
  out.push_back(b);
  out.push_back(SampleWrite("t1"));
  out.push_back(PatchRecord{"t1", "q_proj", 1, 4, 10, 7, 3});
  out.push_back(RefreshRecord{"t1", {"W_UK_T", "scales"}, 4});
  PreparedRecord p;
  p.tx = "t1";
  p.yes = false;
  p.errors = {"E_MISSING_SHARD"};
  p.message = "rank 3: missing";
  p.coverage = PreparedCoverage{1, 2, 3, 4, 5, 6, 7};
  MissingGroup g;
  g.param = "qkv";
  g.shards = {"k", "v"};
  g.source = "k_proj";
  g.missing_parts = {0, 2};
  g.parts = 3;
  p.missing = {g};
  p.has_timings = true;
  p.first_write_us = 8;
  p.writes_us = 9;
  p.prepare_us = 10;
  p.ts = 5;
  out.push_back(p);
  out.push_back(ChunksRecord{"t1", 65536, {1, 2}, std::vector<uint8_t>(24, 0xab), 6});
  OutcomeRecord o;
  o.tx = "t1";
  o.decision = Decision::kCommit;
  o.version = "v1";
  o.reason = "why";
  o.interrupted = false;
  o.dirty = false;
  o.loaded = true;
  o.restored = false;
  o.ts = 7;
  out.push_back(o);
  RestartRecord rs;
  rs.dirty = true;
  rs.ts = 8;
  out.push_back(rs);
  out.push_back(ReserveRecord{"t1", "'qkv'", {ReservedBox{"qkv", "q", {{0, 16}, {0, 8}}}}, 9});
  out.push_back(LandedRecord{"t1", "'qkv'", 10});
  out.push_back(
      UndeclaredRecord{std::nullopt, {"norm"}, 1, {UndeclaredDifference{"norm", 0, 1}}, 11});
  out.push_back(ReattachRecord{"t1", 12, 13});
  return out;
}

json WithSeq(json r, uint64_t seq) {
  r["seq"] = seq;
  return r;
}

json EncodeAny(const ParticipantRecord& r) {
  return std::visit(
      [](const auto& rec) -> json {
        if constexpr (std::is_same_v<std::decay_t<decltype(rec)>, WriteRecord>) {
          return EncodeJson(rec);
        } else {
          return Encode(rec);
        }
      },
      r);
}

// The CBOR that json::to_cbor gives for `j`, as a string.
std::string ToCbor(const json& j) {
  std::vector<uint8_t> v = json::to_cbor(j);
  return std::string(v.begin(), v.end());
}

std::string CorruptMessage(const json& record) {
  auto r = DecodeParticipantRecord(record);
  REQUIRE_FALSE(r.ok());
  CHECK(r.status().code() == ErrorCode::kJournalCorrupt);
  return r.status().message();
}

// Replays `records` (seq 1, 2, ...) from empty.
ParticipantReplay Replay(const std::vector<json>& records, Status* status) {
  ParticipantReplay replay;
  uint64_t seq = 0;
  for (const json& r : records) {
    *status = replay.Apply(WithSeq(r, ++seq));
    if (!status->ok()) break;
  }
  return replay;
}

BeginRecord Begin(const std::string& tx, TxKind kind, std::optional<std::string> base = {},
                  bool rollback = false) {
  BeginRecord b;
  b.tx = tx;
  b.kind = kind;
  b.base = std::move(base);
  b.rollback = rollback;
  return b;
}

PreparedRecord YesVote(const std::string& tx) {
  PreparedRecord p;
  p.tx = tx;
  p.yes = true;
  p.digest = "d-" + tx;
  return p;
}

// An OUTCOME that states no derived value: replay alone decides dirty/loaded.
OutcomeRecord Decided(const std::string& tx, Decision d, std::optional<std::string> version = {}) {
  OutcomeRecord o;
  o.tx = tx;
  o.decision = d;
  o.version = std::move(version);
  o.interrupted = false;
  o.loaded = std::nullopt;
  return o;
}

ParticipantOptions RankOptions(const std::string& dir) {
  ParticipantOptions o;
  o.rank = 0;
  o.journal_dir = dir;
  o.kernel_identity = "k1";
  return o;
}

// Begin full, write every parameter, refresh, prepare (yes expected) and decide.
void FullTransaction(Participant& p, const std::string& tx, uint32_t seed, Decision d) {
  BeginRequest b;
  b.tx = tx;
  b.kind = TxKind::kFull;
  REQUIRE(p.Begin(b).ok());
  for (const auto& ps : p.manifest().params()) {
    Box box = WholeBox(ps.shape);
    auto bytes = Pattern(p.manifest(), ps.name, box, seed);
    WritePiece w{ps.name, "", box, bytes.data(), bytes.size()};
    REQUIRE(p.Write({&w, 1}).ok());
  }
  REQUIRE(p.Refresh("*").ok());
  auto v = p.Prepare(tx);
  REQUIRE(v.ok());
  REQUIRE(v.value().yes);
  REQUIRE(p.Decide(tx, d, "v-" + tx).ok());
}

std::unique_ptr<Journal> OpenForReading(const std::string& dir) {
  JournalOptions o;
  o.read_only = true;
  o.create_if_missing = false;
  auto j = Journal::Open(dir, o);
  REQUIRE(j.ok());
  return std::move(j).value();
}

}  // namespace

TEST_CASE("EachRecordTypeRoundTrips") {
  const std::vector<ParticipantRecord> samples = Samples();
  REQUIRE(samples.size() == 13);
  for (size_t i = 0; i < samples.size(); ++i) {
    const ParticipantRecord& rec = samples[i];
    REQUIRE(static_cast<size_t>(TypeOf(rec)) == i);
    const json encoded = EncodeAny(rec);
    INFO(encoded.dump());
    CHECK(encoded["type"] == std::string(ParticipantRecordTypeName(TypeOf(rec))));
    // Through CBOR, as stored.
    auto stored = DecodeValue(EncodeValue(WithSeq(encoded, 7)), "record 7");
    REQUIRE(stored.ok());
    auto decoded = DecodeParticipantRecord(stored.value());
    REQUIRE(decoded.ok());
    CHECK(TypeOf(decoded.value()) == TypeOf(rec));
    CHECK(EncodeAny(decoded.value()) == encoded);
  }
  // The binary WRITE form decodes to the same typed record.
  const std::string value = EncodeWriteRecord(SampleWrite("t1"), 9, 0);
  auto view = DecodeWriteRecord(value, "record 9");
  REQUIRE(view.ok());
  RecordRef ref;
  ref.seq = 9;
  ref.write = &view.value();
  auto decoded = DecodeParticipantRecord(ref);
  REQUIRE(decoded.ok());
  CHECK(EncodeAny(decoded.value()) == EncodeJson(SampleWrite("t1")));

  // Coordinator records and both states.
  DecisionRecord d;
  d.tx = "t1";
  d.decision = Decision::kCommit;
  d.version = "v1";
  d.reason = "";
  d.votes = {DecisionVote{0, "yes", ""}, DecisionVote{1, "no", "E_MISSING_SHARD"}};
  d.prepare_us = 42;
  d.ts = 5;
  for (const json& c :
       {Encode(CoordinatorCreateRecord{1}), Encode(d), Encode(EndRecord{"t1", 6})}) {
    auto back = DecodeCoordinatorRecord(WithSeq(c, 3));
    REQUIRE(back.ok());
    CHECK(std::visit([](const auto& r) { return Encode(r); }, back.value()) == c);
  }
  ParticipantState st = InitialParticipantState(2);
  st.version = "v1";
  st.committed_tx = "t1";
  st.digest = "d1";
  st.dirty = true;
  st.txs = 4;
  st.active = ActiveTxState{"t2", TxKind::kDelta, "v1", {},   {"q_proj"}, true, true,
                            true, true,           "d2", true, true,       true};
  auto st_back = DecodeParticipantState(EncodeParticipantState(st), "state");
  REQUIRE(st_back.ok());
  CHECK(st_back.value() == st);
  CoordinatorState cs{3, {"t2", "t3"}};
  auto cs_back = DecodeCoordinatorState(EncodeCoordinatorState(cs), "state");
  REQUIRE(cs_back.ok());
  CHECK(cs_back.value() == cs);
}

TEST_CASE("DirectCborEncodingIsByteIdenticalToTheJsonForm") {
  // Every record the journal is handed as a CborMap, and the state, store exactly the bytes
  // the JSON form stored (same checksums, same chain: old and new journals interoperate).
  std::vector<ParticipantRecord> samples = Samples();
  // Size classes of every length and integer encoding.
  BeginRecord big;
  big.tx = std::string(300, 'x');
  big.fingerprint = std::string(70000, 'f');
  big.modules = std::vector<std::string>(30, std::string(24, 'm'));
  big.ts = int64_t{1} << 40;
  big.marks_dirty = std::nullopt;
  samples.push_back(big);
  OutcomeRecord neg;
  neg.tx = "t";
  neg.decision = Decision::kAbort;
  neg.ts = -300;
  samples.push_back(neg);
  ChunksRecord chunks{std::string(23, 'c'),
                      1 << 20,
                      {0, 24, 255, 256, 65536, int64_t{1} << 33},
                      std::vector<uint8_t>(70000, 0x5a),
                      INT64_MIN};
  samples.push_back(chunks);
  PreparedRecord yes;
  yes.tx = "t";
  yes.yes = true;
  yes.digest = "d";
  samples.push_back(yes);
  int direct = 0;
  for (const ParticipantRecord& rec : samples) {
    JournalRecord jr = ToJournalRecord(rec);
    auto* m = std::get_if<CborMap>(&jr);
    if (!m) continue;
    ++direct;
    INFO(ParticipantRecordTypeName(TypeOf(rec)));
    m->Uint("seq", 7).Text("prev", Hex64(0xabcdef));
    json j = EncodeAny(rec);
    j["seq"] = uint64_t{7};
    j["prev"] = Hex64(0xabcdef);
    CHECK(m->Encode() == ToCbor(j));
    CHECK(EncodeCborValue(m->Encode()) == EncodeValue(j));
  }
  CHECK(direct >= 8);  // BEGIN, PREPARED, CHUNKS and OUTCOME at least, in every sample

  std::vector<ParticipantState> states;
  states.push_back(InitialParticipantState(0));
  ParticipantState st = InitialParticipantState(300);
  st.version = "v1";
  st.committed_tx = std::string(256, 't');
  st.digest = "d1";
  st.dirty = true;
  st.loaded = true;
  st.txs = int64_t{1} << 32;
  states.push_back(st);
  for (std::optional<bool> vote :
       {std::optional<bool>(), std::optional<bool>(true), std::optional<bool>(false)}) {
    st.active = ActiveTxState{"t2", TxKind::kDelta, "v1", {"a", "b"}, {"q_proj"}, true, true,
                              true, vote,           "d2", true,       false,      true};
    states.push_back(st);
  }
  st.active->base.reset();
  st.active->digest.reset();
  states.push_back(st);
  for (const ParticipantState& s : states) {
    CborMap m = EncodeParticipantStateCbor(s);
    m.Uint("seq", 12).Text("head", Hex64(99));
    json j = EncodeParticipantState(s);
    j["seq"] = uint64_t{12};
    j["head"] = Hex64(99);
    CHECK(m.Encode() == ToCbor(j));
  }
}

TEST_CASE("StateAppendedAsCborReadsBackAsItsJson") {
  TempDir dir;
  JournalOptions jo;
  jo.identity = {"participant", 2};
  ParticipantReplay replay;
  json want;
  {
    auto j = Journal::Open(dir.sub("rank-2"), jo);
    REQUIRE(j.ok());
    std::vector<JournalRecord> recs;
    REQUIRE(replay.Apply(CreateRecord{2, "fp", 0}, 1).ok());
    recs.emplace_back(Encode(CreateRecord{2, "fp", 0}));
    REQUIRE(
        j.value()->Append(std::move(recs), EncodeParticipantStateCbor(*replay.state()), true).ok());
    REQUIRE(replay.Apply(Begin("t1", TxKind::kFull), 2).ok());
    const ParticipantState st = *replay.state();
    recs.clear();
    recs.emplace_back(ToJournalRecord(Begin("t1", TxKind::kFull)));
    REQUIRE(j.value()->Append(std::move(recs), EncodeParticipantStateCbor(st), true).ok());
    want = EncodeParticipantState(st);
    want["seq"] = uint64_t{2};
    want["head"] = j.value()->state()["head"];
    CHECK(j.value()->state() == want);
    CHECK(j.value()->last_seq() == 2);
  }
  auto reopened = OpenForReading(dir.sub("rank-2"));
  CHECK(reopened->state() == want);
  CHECK(CheckJournal(*reopened).ok());
}

TEST_CASE("CborMapEncodesEverySizeClassAsNlohmann") {
  const std::vector<int64_t> ints = {
      0,         1,  23,  24,  255,  256,  65535,  65536,  UINT32_MAX, int64_t{1} << 32,
      INT64_MAX, -1, -24, -25, -256, -257, -65536, -65537, INT32_MIN,  INT64_MIN};
  for (int64_t v : ints) {
    INFO(v);
    CHECK(CborMap().Int("k", v).Encode() == ToCbor(json{{"k", v}}));
  }
  CHECK(CborMap().Uint("k", UINT64_MAX).Encode() == ToCbor(json{{"k", UINT64_MAX}}));
  for (size_t n : {0, 23, 24, 255, 256, 65535, 65536}) {
    INFO(n);
    const std::string s(n, 'a');
    CHECK(CborMap().Text("k", s).Encode() == ToCbor(json{{"k", s}}));
    const std::vector<uint8_t> b(n, 7);
    CHECK(CborMap().Binary("k", b).Encode() == ToCbor(json{{"k", json::binary(b)}}));
    const std::vector<std::string> texts(n % 300, "x");
    CHECK(CborMap().Texts("k", texts).Encode() == ToCbor(json{{"k", texts}}));
  }
  // Keys in std::map order, whatever order they were given in; nested maps and arrays of maps.
  CborMap inner;
  inner.Bool("z", true).Null("a");
  CborMap m;
  m.Int("b", 1).Int("a", 2).Int("ab", 3).Int("B", 4).Map("m", inner).Maps("l", {inner, inner});
  const json ij = {{"z", true}, {"a", nullptr}};
  CHECK(m.Encode() ==
        ToCbor(json{{"b", 1}, {"a", 2}, {"ab", 3}, {"B", 4}, {"m", ij}, {"l", {ij, ij}}}));
  // More than 23 keys: a two-byte map head.
  CborMap many;
  json manyj = json::object();
  static const std::vector<std::string> keys = [] {
    std::vector<std::string> k;
    for (int i = 0; i < 30; ++i) k.push_back("k" + std::to_string(i));
    return k;
  }();
  for (const std::string& k : keys) {
    many.Int(k, 1);
    manyj[k] = 1;
  }
  CHECK(many.Encode() == ToCbor(manyj));
}

TEST_CASE("RecordWithMissingFieldIsCorruptNamingIt") {
  auto outcome = WithSeq(EncodeAny(Samples()[7]), 7);
  outcome.erase("decision");
  CHECK_THAT(CorruptMessage(outcome),
             Catch::Equals("record 7 (OUTCOME): field 'decision' is missing"));

  auto begin = WithSeq(EncodeAny(Samples()[1]), 8);
  begin["kind"] = "sideways";
  CHECK_THAT(CorruptMessage(begin),
             Catch::Contains("record 8 (BEGIN): field 'kind' is not full, partial or delta"));
  begin["kind"] = 5;
  CHECK_THAT(CorruptMessage(begin),
             Catch::Contains("record 8 (BEGIN): field 'kind' is not a string"));

  auto prepared = WithSeq(EncodeAny(Samples()[5]), 9);
  prepared["coverage"]["bytes"] = "many";
  CHECK_THAT(CorruptMessage(prepared),
             Catch::Contains("record 9 (PREPARED coverage): field 'bytes'"));

  auto chunks = WithSeq(EncodeAny(Samples()[6]), 10);
  chunks["counts"] = {1, 1};
  CHECK_THAT(CorruptMessage(chunks), Catch::Contains("record 10 (CHUNKS): field 'digests'"));

  auto patch = WithSeq(EncodeAny(Samples()[3]), 11);
  patch["part"] = {2, 1};
  CHECK_THAT(CorruptMessage(patch), Catch::Contains("record 11 (PATCH): field 'part'"));

  auto reserve = WithSeq(EncodeAny(Samples()[9]), 12);
  reserve["boxes"][0].erase("param");
  CHECK_THAT(CorruptMessage(reserve),
             Catch::Contains("record 12 (RESERVE boxes[0]): field 'param' is missing"));

  auto write = WithSeq(EncodeAny(Samples()[2]), 13);
  write["box"] = {{5, 1}};
  CHECK_THAT(CorruptMessage(write), Catch::Contains("record 13 (WRITE): field 'box'"));

  CHECK_THAT(CorruptMessage(json{{"type", "FROB"}, {"seq", 14}}),
             Catch::Contains("record 14: unknown record type \"FROB\""));
  CHECK_THAT(CorruptMessage(json{{"seq", 15}}), Catch::Contains("record 15: field 'type'"));

  auto decision = DecodeCoordinatorRecord(json{{"type", "DECISION"}, {"seq", 16}});
  REQUIRE_FALSE(decision.ok());
  CHECK_THAT(decision.status().message(),
             Catch::Contains("record 16 (DECISION): field 'tx' is missing"));

  json state = EncodeParticipantState(InitialParticipantState(0));
  state.erase("dirty");
  auto st = DecodeParticipantState(state, "rank-0: state");
  REQUIRE_FALSE(st.ok());
  CHECK_THAT(st.status().message(), Catch::Equals("rank-0: state: field 'dirty' is missing"));
}

TEST_CASE("DecideOutcomeFollowsTheDirtyRule") {
  OutcomeFacts f;
  f.kind = TxKind::kFull;
  f.wrote = true;
  f.decision = Decision::kCommit;
  CHECK(DecideOutcome(f) == OutcomeEffect{false, true, false});  // a full commit cleans, loads
  f.interrupted = true;
  CHECK(DecideOutcome(f) == OutcomeEffect{true, false, false});  // not by a new process
  f.interrupted = false;
  f.decision = Decision::kAbort;
  CHECK(DecideOutcome(f) == OutcomeEffect{true, false, false});  // abort after writes: dirty
  f.rollback = true;
  CHECK(DecideOutcome(f) == OutcomeEffect{false, false, true});  // before-images restored
  f.undeclared = true;
  CHECK(DecideOutcome(f) == OutcomeEffect{true, false, true});  // undeclared changes stay
  f = OutcomeFacts{};
  f.decision = Decision::kNoop;
  f.loaded = true;
  CHECK(DecideOutcome(f) == OutcomeEffect{false, true, false});  // empty: as before BEGIN
  f.dirty_at_begin = true;
  CHECK(DecideOutcome(f) == OutcomeEffect{true, true, false});  // ... which may be dirty
  f.decision = Decision::kCommit;
  f.kind = TxKind::kPartial;
  CHECK(DecideOutcome(f).dirty);  // a partial commit on a dirty base does not clean
}

TEST_CASE("ReplayRederivesDirtyAfterAbort") {
  Status s;
  std::vector<json> recs = {Encode(CreateRecord{0, "fp", 0}), Encode(Begin("t1", TxKind::kFull)),
                            EncodeJson(SampleWrite("t1")), Encode(YesVote("t1")),
                            Encode(Decided("t1", Decision::kCommit, "v1"))};
  ParticipantReplay r = Replay(recs, &s);
  REQUIRE(s.ok());
  CHECK_FALSE(r.state()->dirty);
  CHECK(r.state()->loaded);
  CHECK(r.state()->version == "v1");
  CHECK(r.state()->digest == "d-t1");

  SECTION("an abort after a patch leaves the rank dirty, with no stored answer to copy") {
    PatchRecord p{"t2", "q_proj", 0, 1, 4, 4, 0};
    recs.push_back(Encode(Begin("t2", TxKind::kPartial, "v1")));
    recs.push_back(Encode(p));
    recs.push_back(Encode(Decided("t2", Decision::kAbort)));
    r = Replay(recs, &s);
    REQUIRE(s.ok());
    CHECK(r.state()->dirty);
    CHECK(r.state()->loaded);
    CHECK_FALSE(r.state()->active);
    // Only a full commit cleans it; an empty transaction gives back the dirty flag.
    recs.push_back(Encode(Begin("t3", TxKind::kFull)));
    recs.push_back(Encode(Decided("t3", Decision::kNoop)));
    r = Replay(recs, &s);
    REQUIRE(s.ok());
    CHECK(r.state()->dirty);
  }
  SECTION("an abort that restored before-images gives back the clean flag") {
    PatchRecord p{"t2", "q_proj", 0, 1, 4, 4, 0};
    recs.push_back(Encode(Begin("t2", TxKind::kDelta, "v1", /*rollback=*/true)));
    recs.push_back(Encode(p));
    recs.push_back(Encode(Decided("t2", Decision::kAbort)));
    r = Replay(recs, &s);
    REQUIRE(s.ok());
    CHECK_FALSE(r.state()->dirty);
  }
  SECTION("an abort after nothing was written keeps the rank clean") {
    PatchRecord p{"t2", "q_proj", 0, 1, 4, 0, 0};  // no index held by this rank
    recs.push_back(Encode(Begin("t2", TxKind::kDelta, "v1")));
    recs.push_back(Encode(p));
    recs.push_back(Encode(Decided("t2", Decision::kAbort)));
    r = Replay(recs, &s);
    REQUIRE(s.ok());
    CHECK_FALSE(r.state()->dirty);
  }
  SECTION("a decision after a restart leaves the rank dirty") {
    recs.push_back(Encode(Begin("t2", TxKind::kFull)));
    recs.push_back(EncodeJson(SampleWrite("t2")));
    recs.push_back(Encode(YesVote("t2")));
    recs.push_back(Encode(RestartRecord{true, 0}));
    recs.push_back(Encode(Decided("t2", Decision::kCommit, "v2")));
    r = Replay(recs, &s);
    REQUIRE(s.ok());
    CHECK(r.state()->dirty);
    CHECK_FALSE(r.state()->loaded);
    CHECK(r.state()->version == "v2");
  }
}

TEST_CASE("LiveAbortAndReplayAgreeOnDirty") {
  TempDir dir;
  auto manifest = SmallManifest();
  {
    auto p = Participant::Open(RankOptions(dir.sub("rank-0")), manifest);
    REQUIRE(p.ok());
    FullTransaction(*p.value(), "t1", 1, Decision::kCommit);
    CHECK_FALSE(p.value()->status().dirty);
    FullTransaction(*p.value(), "t2", 2, Decision::kAbort);
    CHECK(p.value()->status().dirty);
  }
  auto j = OpenForReading(dir.sub("rank-0"));
  REQUIRE(CheckJournal(*j).ok());
  auto replayed = ReplayState(*j);
  REQUIRE(replayed.ok());
  CHECK(replayed.value()["dirty"] == true);
  CHECK(replayed.value()["version"] == "v-t1");
  auto h = ReadHistory(*j);
  REQUIRE(h.ok());
  REQUIRE(h.value().size() == 2);
  CHECK(h.value()[0]["dirty_after"] == false);
  CHECK(h.value()[1]["dirty_after"] == true);
}

TEST_CASE("OutcomeWhoseStoredDirtyDisagreesIsCorrupt") {
  // A stored value is a check on the rule, never an answer to copy: a journal that says clean
  // where the rule derives dirty (or the reverse) is corrupt, naming the record and the field.
  Status s;
  OutcomeRecord clean_after_abort = Decided("t1", Decision::kAbort);
  clean_after_abort.dirty = false;
  Replay({Encode(CreateRecord{0, "fp", 0}), Encode(Begin("t1", TxKind::kFull)),
          EncodeJson(SampleWrite("t1")), Encode(clean_after_abort)},
         &s);
  REQUIRE(s.code() == ErrorCode::kJournalCorrupt);
  CHECK_THAT(s.message(), Catch::Contains("record 4 (OUTCOME): field 'dirty' is false but the "
                                          "dirty rule derives true"));

  OutcomeRecord unloaded = Decided("t1", Decision::kCommit, "v1");
  unloaded.loaded = false;
  Replay({Encode(CreateRecord{0, "fp", 0}), Encode(Begin("t1", TxKind::kFull)),
          Encode(YesVote("t1")), Encode(unloaded)},
         &s);
  REQUIRE(s.code() == ErrorCode::kJournalCorrupt);
  CHECK_THAT(s.message(), Catch::Contains("record 4 (OUTCOME): field 'loaded' is false"));

  Replay(
      {Encode(CreateRecord{0, "fp", 0}), Encode(Begin("t1", TxKind::kFull)), Encode(YesVote("t1")),
       Encode(Decided("t1", Decision::kCommit, "v1")), Encode(RestartRecord{false, 0})},
      &s);
  REQUIRE(s.code() == ErrorCode::kJournalCorrupt);
  CHECK_THAT(s.message(), Catch::Contains("record 5 (RESTART): field 'dirty' is false"));

  // The same through a stored journal: `wtx check`'s replay refuses it.
  TempDir dir;
  {
    JournalOptions jo;
    jo.identity = {"participant", 0};
    auto j = Journal::Open(dir.sub("rank-0"), jo);
    REQUIRE(j.ok());
    ParticipantState st = InitialParticipantState(0);
    st.txs = 1;
    std::vector<JournalRecord> recs;
    recs.emplace_back(Encode(CreateRecord{0, "fp", 0}));
    recs.emplace_back(Encode(Begin("t1", TxKind::kFull)));
    recs.emplace_back(SampleWrite("t1"));
    recs.emplace_back(Encode(clean_after_abort));
    REQUIRE(j.value()->Append(std::move(recs), EncodeParticipantState(st), true).ok());
  }
  Status c = CheckJournal(*OpenForReading(dir.sub("rank-0")));
  REQUIRE(c.code() == ErrorCode::kJournalCorrupt);
  CHECK_THAT(c.message(), Catch::Contains("record 4 (OUTCOME): field 'dirty'"));
}

namespace {

// The JSON shapes the previous wtx wrote (participant.cc before typed records): OUTCOME with a
// stored dirty/loaded/restored, a recovery abort (no loaded) before its RESTART, a state
// snapshot without the dirty rule's facts.
json OldBegin(const std::string& tx, const std::string& fp) {
  return {{"type", "BEGIN"},
          {"tx", tx},
          {"kind", "full"},
          {"base", nullptr},
          {"modules", json::array()},
          {"sources", json::array()},
          {"rollback", false},
          {"verify", "touched"},
          {"fingerprint", fp},
          {"kernel_identity", "k1"},
          {"ts", 100},
          {"dirty", true}};
}

json OldPrepared(const std::string& tx) {
  return {{"type", "PREPARED"},
          {"tx", tx},
          {"vote", "yes"},
          {"digest", "d-" + tx},
          {"errors", json::array()},
          {"message", ""},
          {"coverage",
           {{"shards", 6},
            {"pieces", 4},
            {"rows", 45},
            {"elements", 328},
            {"bytes", 632},
            {"patched", 0},
            {"missing", 0}}},
          {"missing", json::array()},
          {"timings_us", {{"first_write", 1}, {"writes", 2}, {"prepare", 3}}},
          {"ts", 101}};
}

json OldOutcome(const std::string& tx, const std::string& decision, bool dirty, bool loaded) {
  json o = {{"type", "OUTCOME"},    {"tx", tx},
            {"decision", decision}, {"version", decision == "commit" ? json("v-" + tx) : json()},
            {"dirty", dirty},       {"loaded", loaded},
            {"restored", false},    {"ts", 102}};
  return o;
}

void AppendOld(Journal& j, std::vector<json> recs, const json& state, bool with_write) {
  std::vector<JournalRecord> v;
  for (auto& r : recs) {
    v.emplace_back(std::move(r));
    // A binary WRITE after each BEGIN.
    if (with_write && std::get<json>(v.back())["type"] == "BEGIN") {
      v.emplace_back(SampleWrite(std::get<json>(v.back())["tx"].get<std::string>()));
    }
  }
  REQUIRE(j.Append(std::move(v), state, true).ok());
}

}  // namespace

TEST_CASE("PreChangeJournalReplaysAndAcceptsNewTransaction") {
  TempDir dir;
  auto manifest = SmallManifest();
  const std::string fp = manifest->Fingerprint();
  const std::string rank_dir = dir.sub("rank-0");
  {
    JournalOptions jo;
    jo.identity = {"participant", 0};
    auto j = Journal::Open(rank_dir, jo);
    REQUIRE(j.ok());
    json st = {{"rank", 0},      {"version", nullptr}, {"committed_tx", nullptr},
               {"dirty", false}, {"loaded", false},    {"active", nullptr},
               {"txs", 0}};
    AppendOld(*j.value(), {{{"type", "CREATE"}, {"rank", 0}, {"fingerprint", fp}, {"ts", 1}}}, st,
              false);
    // t1 commits cleanly.
    st["version"] = "v-t1";
    st["committed_tx"] = "t1";
    st["digest"] = "d-t1";
    st["loaded"] = true;
    st["txs"] = 1;
    AppendOld(*j.value(),
              {OldBegin("t1", fp), OldPrepared("t1"), OldOutcome("t1", "commit", false, true)}, st,
              true);
    // t2 prepared yes, the process restarted (in doubt), then it committed: dirty.
    st["version"] = "v-t2";
    st["committed_tx"] = "t2";
    st["digest"] = "d-t2";
    st["dirty"] = true;
    st["loaded"] = false;
    st["txs"] = 2;
    AppendOld(*j.value(),
              {OldBegin("t2", fp),
               OldPrepared("t2"),
               {{"type", "RESTART"}, {"dirty", true}, {"ts", 103}},
               OldOutcome("t2", "commit", true, false)},
              st, true);
    SECTION("ended by a recovery abort of the previous wtx") {
      // t3 began and wrote; the process died; recovery aborted it (an OUTCOME without
      // `loaded`, before the RESTART).
      st["txs"] = 3;
      AppendOld(*j.value(),
                {OldBegin("t3", fp),
                 {{"type", "OUTCOME"},
                  {"tx", "t3"},
                  {"decision", "abort"},
                  {"reason", "process restarted before the transaction was decided"},
                  {"dirty", true},
                  {"ts", 104}},
                 {{"type", "RESTART"}, {"dirty", true}, {"ts", 105}}},
                st, true);
    }
    SECTION("ended in doubt") {
      // t3 prepared yes and the process died: the old snapshot of the active transaction has
      // none of the dirty rule's facts.
      st["txs"] = 3;
      st["active"] = {{"tx", "t3"},
                      {"kind", "full"},
                      {"base", nullptr},
                      {"modules", json::array()},
                      {"sources", json::array()},
                      {"rollback", false},
                      {"wrote", true},
                      {"prepared", true},
                      {"vote", "yes"},
                      {"digest", "d-t3"}};
      AppendOld(*j.value(),
                {OldBegin("t3", fp),
                 OldPrepared("t3"),
                 {{"type", "RESTART"}, {"dirty", true}, {"ts", 105}}},
                st, true);
    }
  }
  // It verifies and replays to the state it stores.
  {
    auto j = OpenForReading(rank_dir);
    REQUIRE(CheckJournal(*j).ok());
    auto h = ReadHistory(*j);
    REQUIRE(h.ok());
    REQUIRE(h.value().size() == 3);
    CHECK(h.value()[0]["dirty_after"] == false);
    CHECK(h.value()[1]["dirty_after"] == true);
  }
  // A participant opens it (recovering what the old process left) and commits a new
  // transaction, which cleans the rank.
  {
    auto p = Participant::Open(RankOptions(rank_dir), manifest);
    REQUIRE(p.ok());
    RankStatus st = p.value()->status();
    CHECK(st.dirty);
    CHECK_FALSE(st.serving);
    if (st.in_doubt) REQUIRE(p.value()->Decide("t3", Decision::kCommit, "v-t3").ok());
    CHECK(p.value()->status().dirty);  // decided by a process that never had the bytes
    FullTransaction(*p.value(), "t4", 4, Decision::kCommit);
    st = p.value()->status();
    CHECK(st.version == "v-t4");
    CHECK_FALSE(st.dirty);
    CHECK(st.serving);
  }
  auto j = OpenForReading(rank_dir);
  REQUIRE(CheckJournal(*j).ok());
  auto replayed = ReplayState(*j);
  REQUIRE(replayed.ok());
  CHECK(replayed.value()["version"] == "v-t4");
  CHECK(replayed.value()["dirty"] == false);
  CHECK(replayed.value()["txs"] == 4);
}

TEST_CASE("PatchByPieceRecordKeepsItsBoxAndRefusesAMalformedOne") {
  PatchRecord p{"t1", "k_proj", 0, 1, 2, 2, 4, Box{{8, 16}, {0, 32}}};
  nlohmann::json j = Encode(p);
  auto back = DecodePatch(j);
  REQUIRE(back.ok());
  REQUIRE(back->source_box.has_value());
  CHECK(*back->source_box == *p.source_box);
  CHECK_FALSE(DecodePatch(Encode(PatchRecord{"t1", "k", 0, 1, 2, 2, 4})).value().source_box);
  j["source_box"] = "rows 8..16";
  auto bad = DecodePatch(j);
  REQUIRE_FALSE(bad.ok());
  CHECK(bad.status().message().find("source_box") != std::string::npos);
}
