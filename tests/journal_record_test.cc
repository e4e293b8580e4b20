// The binary WRITE record form (journal/record.h): it decodes to exactly the JSON its CBOR form
// would, every damage to it is corruption, the journal chains it like any record, and replaying
// it without JSON (ParticipantReplay::ApplyWrite) gives the state the JSON rule gives.
#include <catch2/catch.hpp>

#include <random>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "journal/journal.h"
#include "journal/record.h"
#include "src/txn/journal_check.h"
#include "src/txn/participant_records.h"
#include "src/txn/participant_state.h"
#include "src/util/hash_util.h"
#include "tests/test_util.h"

using nlohmann::json;
using namespace wtx;
using wtx::testing::TempDir;

namespace {

WriteRecord SampleWrite() {
  WriteRecord w;
  w.tx = "step-42";
  w.param = "model.layers.3.self_attn.qkv_proj.weight";
  w.box = {{16, 24}, {0, 8}};
  w.elements = 64;
  w.bytes = 128;
  w.shards = {"k", "v"};
  w.ts = 1700000000123456;
  return w;
}

// A value with a valid header (`magic`, checksum) around an arbitrary payload.
std::string WithValidHeader(const std::string& payload, const std::string& magic = "WTXW") {
  std::string v = magic;
  const uint64_t h = XXH3_64bits(payload.data(), payload.size());
  for (int i = 0; i < 8; ++i) v.push_back(static_cast<char>((h >> (8 * i)) & 0xff));
  return v + payload;
}

std::string PayloadOf(const std::string& value) { return value.substr(12); }

}  // namespace

TEST_CASE("BinaryWriteRecordDecodesToTheJsonOfItsCborForm") {
  const WriteRecord w = SampleWrite();
  const std::string v = EncodeWriteRecord(w, 7, 0x1234abcdULL);
  REQUIRE(IsWriteRecordValue(v));
  auto j = DecodeValue(v, "test");
  REQUIRE(j.ok());
  const json expected = {{"type", "WRITE"},
                         {"tx", "step-42"},
                         {"param", w.param},
                         {"box", {{16, 24}, {0, 8}}},
                         {"elements", 64},
                         {"bytes", 128},
                         {"shards", {"k", "v"}},
                         {"ts", 1700000000123456},
                         {"seq", 7},
                         {"prev", Hex64(0x1234abcdULL)}};
  CHECK(j.value() == expected);
  // The same record through the CBOR form decodes identically.
  CHECK(DecodeValue(EncodeValue(expected), "test").value() == expected);
  // The checksum is the chain link, as for CBOR values.
  CHECK(ValueChecksum(v) == XXH3_64bits(v.data() + 12, v.size() - 12));
}

TEST_CASE("BinaryWriteRecordWithEmptyFieldsRoundTrips") {
  WriteRecord w;  // no tx, no param, rank-0 box, no shards
  const std::string v = EncodeWriteRecord(w, 1, 0);
  auto view = DecodeWriteRecord(v, "test");
  REQUIRE(view.ok());
  CHECK(view.value().tx.empty());
  CHECK(view.value().ToJson()["box"] == json::array());
  CHECK(view.value().ToJson()["shards"] == json::array());
}

TEST_CASE("EncodingIntoAReusedBufferGivesTheSameBytes") {
  // The append path reuses one buffer across records of different sizes.
  WriteRecord big = SampleWrite();
  big.param = std::string(300, 'p');
  big.shards = {"q", "k", "v", "gate", "up"};
  big.box = {{0, 1}, {2, 3}, {4, 5}};
  const WriteRecord small = SampleWrite();
  std::string buf;
  EncodeWriteRecordTo(big, 1, 5, &buf);
  CHECK(buf == EncodeWriteRecord(big, 1, 5));
  EncodeWriteRecordTo(small, 2, ValueChecksum(buf), &buf);
  CHECK(buf == EncodeWriteRecord(small, 2, ValueChecksum(EncodeWriteRecord(big, 1, 5))));
  REQUIRE(DecodeWriteRecord(buf, "test").ok());
  CHECK(DecodeWriteRecord(buf, "test").value().param == small.param);
}

TEST_CASE("EveryFlippedByteOfABinaryWriteRecordIsCorruption") {
  const std::string v = EncodeWriteRecord(SampleWrite(), 3, 99);
  for (size_t i = 0; i < v.size(); ++i) {
    for (uint8_t bit : {uint8_t{0x01}, uint8_t{0x80}}) {
      std::string bad = v;
      bad[i] = static_cast<char>(bad[i] ^ bit);
      auto d = DecodeValue(bad, "record 3");
      INFO("byte " << i << " bit " << int(bit));
      REQUIRE_FALSE(d.ok());
      CHECK(d.status().code() == ErrorCode::kJournalCorrupt);
      CHECK_THAT(d.status().message(), Catch::Contains("record 3"));
    }
  }
}

TEST_CASE("TruncatedBinaryWriteRecordIsCorruption") {
  const std::string v = EncodeWriteRecord(SampleWrite(), 3, 99);
  for (size_t n = 0; n < v.size(); ++n) {
    INFO("length " << n);
    CHECK_FALSE(DecodeValue(v.substr(0, n), "t").ok());
  }
}

TEST_CASE("MalformedBinaryWriteLayoutWithAValidChecksumIsCorruption") {
  const std::string payload = PayloadOf(EncodeWriteRecord(SampleWrite(), 3, 99));
  std::vector<std::pair<std::string, std::string>> cases;
  cases.emplace_back("trailing byte", payload + "x");
  cases.emplace_back("short", payload.substr(0, payload.size() - 1));
  std::string layout = payload;
  layout[0] = 2;
  cases.emplace_back("unknown layout", layout);
  std::string huge_tx = payload;
  huge_tx[1 + 5 * 8 + 3] = '\x7f';  // tx length's top byte: far past the payload
  cases.emplace_back("tx length past the end", huge_tx);
  cases.emplace_back("empty payload", "");
  for (const auto& [name, p] : cases) {
    INFO(name);
    auto d = DecodeValue(WithValidHeader(p), "record 3");
    REQUIRE_FALSE(d.ok());
    CHECK(d.status().code() == ErrorCode::kJournalCorrupt);
    CHECK_THAT(d.status().message(), Catch::Contains("malformed binary WRITE record"));
  }
}

namespace {

// A journal with CREATE, BEGIN and `writes` binary WRITE records.
void BuildJournal(const std::string& dir, int writes) {
  JournalOptions jo;
  jo.identity = {"participant", 0};
  auto j = Journal::Open(dir, jo);
  REQUIRE(j.ok());
  ParticipantReplay replay;
  std::vector<JournalRecord> recs;
  recs.emplace_back(Encode(CreateRecord{0, "", 1}));
  BeginRecord begin;
  begin.tx = "step-42";
  begin.ts = 2;
  recs.emplace_back(Encode(begin));
  for (int i = 0; i < writes; ++i) {
    WriteRecord w = SampleWrite();
    w.box = {{i, i + 1}, {0, 8}};
    recs.emplace_back(w);
  }
  for (const auto& r : recs) {
    const auto* w = std::get_if<WriteRecord>(&r);
    REQUIRE((w ? replay.ApplyWrite(0, w->tx) : replay.Apply(std::get<json>(r))).ok());
  }
  REQUIRE(j.value()->Append(std::move(recs), EncodeParticipantState(*replay.state()), true).ok());
}

// Replaces the stored value of record `seq` (RocksDB directly: a valid checksum, wrong content).
void Overwrite(const std::string& dir, uint64_t seq, const std::string& value) {
  rocksdb::DB* raw = nullptr;
  rocksdb::Options o;
  ConfigureJournalOptions(&o);
  REQUIRE(rocksdb::DB::Open(o, dir, &raw).ok());
  std::unique_ptr<rocksdb::DB> db(raw);
  REQUIRE(db->Put(rocksdb::WriteOptions(), RecordKey(seq), value).ok());
}

std::unique_ptr<Journal> OpenReadOnly(const std::string& dir) {
  JournalOptions jo;
  jo.read_only = true;
  jo.create_if_missing = false;
  auto j = Journal::Open(dir, jo);
  REQUIRE(j.ok());
  return std::move(j).value();
}

}  // namespace

TEST_CASE("JournalOfBinaryWritesReplaysToItsStoredState") {
  TempDir dir;
  BuildJournal(dir.sub("j"), 50);
  auto j = OpenReadOnly(dir.sub("j"));
  REQUIRE(CheckJournal(*j).ok());
  auto replayed = ReplayState(*j);
  REQUIRE(replayed.ok());
  CHECK(replayed.value()["dirty"] == true);
  CHECK(replayed.value()["active"]["wrote"] == true);
  // Readers of JSON see the binary records as WRITE records.
  int writes = 0;
  REQUIRE(j->ForEachRecord([&](const json& r) {
             if (r["type"] == "WRITE") {
               CHECK(r["box"][0][0] == writes);
               ++writes;
             }
             return Status::OK();
           }).ok());
  CHECK(writes == 50);
}

TEST_CASE("BinaryWriteRecordFromAnotherPlaceInTheChainIsCorruption") {
  TempDir dir;
  BuildJournal(dir.sub("j"), 5);
  SECTION("wrong predecessor") {
    Overwrite(dir.sub("j"), 4, EncodeWriteRecord(SampleWrite(), 4, 12345));
    auto s = OpenReadOnly(dir.sub("j"))->Verify();
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.message(), Catch::Contains("record 4: chain broken"));
  }
  SECTION("wrong sequence number") {
    Overwrite(dir.sub("j"), 4, EncodeWriteRecord(SampleWrite(), 9, 0));
    auto s = OpenReadOnly(dir.sub("j"))->Verify();
    REQUIRE_FALSE(s.ok());
    CHECK_THAT(s.message(), Catch::Contains("record 4: stored under the wrong sequence number"));
  }
}

TEST_CASE("ReplayingABinaryWriteEqualsReplayingItsJson") {
  // Random record sequences (including WRITEs of the wrong transaction, before CREATE, with
  // and without an active transaction): ApplyWrite and Apply(JSON) agree on success and state.
  std::mt19937_64 rng(20261202);
  auto pick = [&](int n) { return static_cast<int>(rng() % static_cast<uint64_t>(n)); };
  for (int trial = 0; trial < 400; ++trial) {
    ParticipantReplay fast, slow;
    bool stopped = false;
    for (int step = 0; step < 30 && !stopped; ++step) {
      const std::string tx = std::string(1, 't').append(std::to_string(pick(3)));
      json rec;
      bool is_write = false;
      switch (pick(trial == 0 ? 1 : 7)) {
        case 0:
          is_write = true;
          break;
        case 1:
          rec = Encode(CreateRecord{0, "", 0});
          break;
        case 2: {
          BeginRecord b;
          b.tx = tx;
          rec = Encode(b);
          break;
        }
        case 3: {
          PatchRecord p;
          p.tx = tx;
          p.source = "s";
          p.parts = 1;
          p.indices = 2;
          p.applied = pick(2);
          rec = Encode(p);
          break;
        }
        case 4: {
          OutcomeRecord o;
          o.tx = tx;
          o.decision = pick(2) ? Decision::kCommit : Decision::kAbort;
          o.version = "v";
          o.dirty = pick(2) == 1;  // a stored value the rule may disagree with: corrupt
          rec = Encode(o);
          break;
        }
        case 5: {
          RestartRecord r;
          r.dirty = pick(2) == 1;
          rec = Encode(r);
          break;
        }
        default:
          is_write = true;
      }
      rec["seq"] = step + 1;
      Status a, b;
      if (is_write) {
        a = fast.ApplyWrite(step + 1, tx);
        WriteRecord w = SampleWrite();
        w.tx = tx;
        json as_json = EncodeJson(w);
        as_json["seq"] = step + 1;
        b = slow.Apply(as_json);
      } else {
        a = fast.Apply(rec);
        b = slow.Apply(rec);
      }
      INFO("trial " << trial << " step " << step << ": "
                    << (is_write ? "WRITE " + tx : rec.dump()));
      REQUIRE(a.ok() == b.ok());
      if (!a.ok()) {
        CHECK(a.code() == ErrorCode::kJournalCorrupt);
        stopped = true;  // the state after an error is unspecified
      } else {
        REQUIRE(fast.state() == slow.state());
      }
    }
  }
}

TEST_CASE("CborWithAnExcessiveDeclaredSizeIsCorruptionNotAnException") {
  // A map holding an array that declares 2^64-1 items (nlohmann throws out_of_range.408 for
  // it even with allow_exceptions=false): found by the record fuzzer.
  std::string payload = "\xa1\x61x\x9b";
  payload.append(8, '\xff');
  auto d = DecodeValue(WithValidHeader(payload, "WTX1"), "record 9");
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().code() == ErrorCode::kJournalCorrupt);
  CHECK_THAT(d.status().message(), Catch::Contains("record 9: undecodable CBOR"));
}

TEST_CASE("CborNestedDeeperThanTheLimitIsCorruption") {
  std::string payload(100000, '\x81');  // [[[[...]]]] one hundred thousand deep
  payload.push_back('\x00');
  auto d = DecodeValue(WithValidHeader(payload, "WTX1"), "record 9");
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().code() == ErrorCode::kJournalCorrupt);
}

TEST_CASE("BinaryWriteRecordWithTextThatIsNotUtf8IsCorruption") {
  // Found by the record fuzzer: readers print record fields as JSON, which must be UTF-8.
  for (const std::string& bad : {std::string("\xe1\x31"), std::string("\xc0\x80"),
                                 std::string("\xed\xa0\x80"), std::string("\xff")}) {
    for (int field = 0; field < 3; ++field) {
      WriteRecord w = SampleWrite();
      (field == 0 ? w.tx : field == 1 ? w.param : w.shards[1]) = "ok" + bad;
      auto d = DecodeValue(EncodeWriteRecord(w, 1, 0), "record 1");
      INFO("field " << field);
      REQUIRE_FALSE(d.ok());
      CHECK_THAT(d.status().message(), Catch::Contains("not UTF-8"));
    }
  }
  WriteRecord fine = SampleWrite();
  fine.tx = "\xc3\xa9t\xc3\xa9-\xf0\x9f\x9a\x80";  // "été-🚀"
  CHECK(DecodeValue(EncodeWriteRecord(fine, 1, 0), "record 1").ok());
}

TEST_CASE("BinaryWriteRecordWithABoxEndingBeforeItBeginsIsCorruption") {
  // Found by the record fuzzer: the JSON form's decoder refuses such a box, so the binary form
  // (replayed without JSON) must refuse it too, or the two replays disagree.
  WriteRecord w = SampleWrite();
  w.box = {{16, 24}, {8, 0}};
  auto d = DecodeValue(EncodeWriteRecord(w, 1, 0), "record 1");
  REQUIRE_FALSE(d.ok());
  CHECK(d.status().code() == ErrorCode::kJournalCorrupt);
  CHECK_THAT(d.status().message(), Catch::Contains("box dimension 1: end 0 precedes begin 8"));
  w.box = {{16, 24}, {8, 8}};  // empty ranges are fine
  CHECK(DecodeValue(EncodeWriteRecord(w, 1, 0), "record 1").ok());
}

TEST_CASE("ReplayErrorsNamingTextThatIsNotUtf8DoNotThrow") {
  ParticipantReplay replay(InitialParticipantState(0));
  Status s = replay.ApplyWrite(3, "\xe1\x31");
  CHECK(s.code() == ErrorCode::kJournalCorrupt);
  CHECK_THAT(s.message(), Catch::Contains("record 3 (WRITE)"));
}

TEST_CASE("CborRecordWithTextThatIsNotUtf8IsCorruption") {
  // {"type": "\xff"}: decodable by nlohmann, but printing it would throw.
  const std::string payload = std::string("\xa1\x64type\x61\xff", 8);
  auto d = DecodeValue(WithValidHeader(payload, "WTX1"), "record 2");
  REQUIRE_FALSE(d.ok());
  CHECK_THAT(d.status().message(), Catch::Contains("record 2: undecodable CBOR"));
  CHECK(DecodeValue(WithValidHeader(std::string("\xa1\x64type\x61x", 8), "WTX1"), "r").ok());
}

TEST_CASE("CborRecordWithANonFiniteFloatIsCorruption") {
  // Found by the record fuzzer: {"ts": NaN} decoded, but NaN != NaN and prints as null, so
  // the record no longer said what was stored. Half, single and double NaN and infinities.
  for (const std::string& num :
       {std::string("\xf9\x7e\x00", 3), std::string("\xf9\x7c\x00", 3),
        std::string("\xfa\xff\xff\xff\x02", 5), std::string("\xfa\x7f\x80\x00\x00", 5),
        std::string("\xfb\x7f\xf8\x00\x00\x00\x00\x00\x00", 9),
        std::string("\xfb\xff\xf0\x00\x00\x00\x00\x00\x00", 9)}) {
    auto d = DecodeValue(WithValidHeader("\xa1\x62ts" + num, "WTX1"), "record 4");
    REQUIRE_FALSE(d.ok());
    CHECK_THAT(d.status().message(), Catch::Contains("record 4: undecodable CBOR"));
  }
  // Finite floats of every width still decode.
  for (const std::string& num :
       {std::string("\xf9\x3c\x00", 3), std::string("\xfa\x3f\x80\x00\x00", 5),
        std::string("\xfb\x3f\xf0\x00\x00\x00\x00\x00\x00", 9)}) {
    auto d = DecodeValue(WithValidHeader("\xa1\x62ts" + num, "WTX1"), "record 4");
    REQUIRE(d.ok());
    CHECK(d.value()["ts"] == 1.0);
  }
}
