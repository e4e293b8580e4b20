// `wtx check` detects every corruption of a journal built by a real `wtx sim` run (two ranks,
// a commit, a rank crash and restart, a second commit: the rank's journal then has a table
// file, a MANIFEST and a write-ahead log), and `wtx log` / `wtx status` refuse a journal
// that fails it. Each case mutates a fresh copy and asserts that the check fails naming what
// is wrong.
#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <array>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <random>
#include <sstream>

#include <rocksdb/db.h>
#include <nlohmann/json.hpp>

#include "journal/record.h"
#include "src/txn/journal_check.h"
#include "wtx/coordinator.h"
#include "wtx/inproc_transport.h"
#include "wtx/journal_reader.h"
#include "wtx/participant.h"

using nlohmann::json;
using namespace wtx;
namespace fs = std::filesystem;

namespace {

struct Run {
  int code = -1;
  std::string out;  // stdout and stderr
  std::string stdout_only;
};

Run Sh(const std::string& cmd) {
  Run r;
  std::array<char, 4096> buf;
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int st = pclose(p);
  r.code = WIFEXITED(st) ? WEXITSTATUS(st) : -1;
  FILE* q = popen((cmd + " 2>/dev/null").c_str(), "r");
  while ((n = fread(buf.data(), 1, buf.size(), q)) > 0) r.stdout_only.append(buf.data(), n);
  pclose(q);
  return r;
}

std::string Q(const std::string& s) { return "'" + s + "'"; }

class Scratch {
 public:
  Scratch() {
    std::random_device rd;
    path_ =
        (fs::temp_directory_path() / ("wtx-corrupt-" + std::to_string(rd()) + std::to_string(rd())))
            .string();
    fs::create_directories(path_);
  }
  ~Scratch() {
    std::error_code ec;
    fs::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// The manifest of the sim run below (both ranks).
json SimManifestJson() {
  return json::parse(R"({
    "params": [
      {"name": "qkv", "dtype": "bf16", "shape": [12, 8], "shards": [
        {"id": "q", "source": "q", "source_shape": [4, 8], "box": [[0, 4], [0, 8]], "source_box": [[0, 4], [0, 8]]},
        {"id": "k", "source": "k", "source_shape": [4, 8], "box": [[4, 8], [0, 8]], "source_box": [[0, 4], [0, 8]]},
        {"id": "v", "source": "v", "source_shape": [4, 8], "box": [[8, 12], [0, 8]], "source_box": [[0, 4], [0, 8]]}]},
      {"name": "norm", "dtype": "f32", "shape": [8]}
    ],
    "modules": [{"name": "l0", "params": ["qkv", "norm"]}],
    "derived": [{"name": "W_UK_T", "sources": ["qkv"], "phase": "attention"}]
  })");
}

// The journals of one sim run, built once per test process.
const std::string& SimJournals() {
  static Scratch dir;
  static std::string journals;
  if (!journals.empty()) return journals;
  const json manifest = SimManifestJson();
  json steps = json::array();
  for (int t = 1; t <= 3; ++t) {
    const std::string tx = "t" + std::to_string(t);
    steps.push_back({{"op", "begin"}, {"tx", tx}, {"kind", "full"}});
    steps.push_back({{"op", "write"}, {"param", "*"}, {"fill", {{"seed", t}}}});
    steps.push_back({{"op", "refresh"}, {"derived", "*"}});
    steps.push_back({{"op", "commit"}, {"tx", tx}});
    if (t == 1) {
      // The restart flushes the recovered records into a table file.
      steps.push_back({{"op", "crash"}, {"who", 0}, {"power_loss", false}});
      steps.push_back({{"op", "restart"}, {"who", 0}});
      steps.push_back({{"op", "crash"}, {"who", 1}, {"power_loss", false}});
      steps.push_back({{"op", "restart"}, {"who", 1}});
    }
  }
  json sc = {{"ranks", 2},
             {"model", {{"manifest", manifest}}},
             {"kernel_identity", "k"},
             {"steps", steps}};
  const std::string path = dir.path() + "/scenario.json";
  std::ofstream(path) << sc.dump();
  const std::string out = dir.path() + "/journals";
  Run r = Sh(Q(WTX_BINARY) + " sim " + Q(path) + " --journal-dir " + Q(out));
  INFO(r.out);
  REQUIRE(r.code == 0);
  journals = out;
  return journals;
}

// A fresh copy of one journal of the sim run, under the name `as` (rank-0 by default).
struct Copy {
  Scratch dir;
  std::string path;
  explicit Copy(const std::string& which = "rank-0", const std::string& as = "rank-0") {
    path = dir.path() + "/" + as;
    fs::copy(SimJournals() + "/" + which, path, fs::copy_options::recursive);
  }
  std::vector<std::string> Files(const std::string& suffix) const {
    std::vector<std::string> v;
    for (const auto& e : fs::directory_iterator(path)) {
      const std::string n = e.path().filename().string();
      if (n.size() >= suffix.size() &&
          n.compare(n.size() - suffix.size(), suffix.size(), suffix) == 0) {
        v.push_back(e.path().string());
      }
      if (suffix == "MANIFEST-" && n.rfind(suffix, 0) == 0) v.push_back(e.path().string());
    }
    std::sort(v.begin(), v.end());
    return v;
  }
  std::string One(const std::string& suffix) const {
    auto v = Files(suffix);
    REQUIRE_FALSE(v.empty());
    return v.back();
  }
};

void Flip(const std::string& file, uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  REQUIRE(f);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x5a));
}

// Calls fn(dir, offset) on a fresh copy `dir` of journal `base` in which the byte at `offset`
// of its file `name` is flipped, for about `samples` offsets spread over [0, limit); returns how
// many.
int ForEachFlippedCopy(const std::string& base, const std::string& name, uint64_t limit,
                       uint64_t samples,
                       const std::function<void(const std::string&, uint64_t)>& fn) {
  int n = 0;
  for (uint64_t off = 0; off < limit; off += std::max<uint64_t>(1, limit / samples)) {
    Scratch s;
    const std::string dir = s.path() + "/rank-0";
    fs::copy(base, dir, fs::copy_options::recursive);
    Flip(dir + "/" + name, off);
    fn(dir, off);
    ++n;
  }
  return n;
}

Run Check(const std::string& dir, const std::string& extra = "") {
  return Sh(Q(WTX_BINARY) + " check " + Q(dir) + " " + extra);
}

void ExpectCorrupt(const std::string& dir, const std::string& names) {
  Run r = Check(dir);
  INFO(r.out);
  CHECK(r.code == 3);
  CHECK_THAT(r.out, Catch::Contains("E_JOURNAL_CORRUPT"));
  CHECK_THAT(r.out, Catch::Contains(names, Catch::CaseSensitive::No));
}

}  // namespace

TEST_CASE("CleanSimJournalsPassTheCheck") {
  for (const char* j : {"rank-0", "rank-1", "coordinator"}) {
    Run r = Check(SimJournals() + "/" + j, "--strict");
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("as expected"));
  }
  Copy c;
  CHECK_FALSE(c.Files(".sst").empty());  // the case this test is built to cover
  CHECK_FALSE(c.Files(".log").empty());
}

TEST_CASE("FlippedWalByteIsDetected") {
  Copy c;
  const std::string wal = c.One(".log");
  Flip(wal, fs::file_size(wal) / 2);
  ExpectCorrupt(c.path, "write-ahead log");
}

TEST_CASE("FlippedSstByteIsDetected") {
  Copy c;
  Flip(c.One(".sst"), 40);
  ExpectCorrupt(c.path, "checksum");
}

TEST_CASE("FlippedManifestByteIsDetected") {
  Copy c;
  const std::string m = c.One("MANIFEST-");
  Flip(m, fs::file_size(m) / 2);
  ExpectCorrupt(c.path, "journal_corrupt");
}

TEST_CASE("TruncatedWalIsDetected") {
  Copy c;
  const std::string wal = c.One(".log");
  fs::resize_file(wal, fs::file_size(wal) * 2 / 3);
  ExpectCorrupt(c.path, "synced records lost");
}

TEST_CASE("TruncatedSstIsDetected") {
  Copy c;
  const std::string sst = c.One(".sst");
  fs::resize_file(sst, fs::file_size(sst) - 10);
  ExpectCorrupt(c.path, "sst");
}

TEST_CASE("DeletedWalIsDetected") {
  Copy c;
  for (const auto& f : c.Files(".log")) fs::remove(f);
  ExpectCorrupt(c.path, "synced records lost");
}

TEST_CASE("DeletedSstIsDetected") {
  Copy c;
  fs::remove(c.One(".sst"));
  ExpectCorrupt(c.path, "missing");
}

TEST_CASE("DeletedManifestIsDetected") {
  Copy c;
  for (const auto& f : c.Files("MANIFEST-")) fs::remove(f);
  ExpectCorrupt(c.path, "missing");
}

TEST_CASE("DeletedCurrentIsDetected") {
  Copy c;
  fs::remove(c.path + "/CURRENT");
  ExpectCorrupt(c.path, "CURRENT is missing");
}

TEST_CASE("DeletedWatermarkCopiesAreCorruption") {
  // Records and nothing that says how many were synced: a cut write-ahead log looks the same.
  Copy c;
  for (const char* f : kWatermarkCopies) fs::remove(c.path + "/" + f);
  ExpectCorrupt(c.path, "no valid sync watermark");
  ExpectCorrupt(c.path, std::string(kWatermarkCopies[0]) + ": missing");
  ExpectCorrupt(c.path, std::string(kWatermarkCopies[1]) + ": missing");
}

namespace {

// Rewrites records through RocksDB itself: every checksum RocksDB keeps stays valid.
void Rewrite(const std::string& dir, const std::function<void(rocksdb::DB*)>& fn) {
  rocksdb::Options o;
  rocksdb::DB* db = nullptr;
  REQUIRE(rocksdb::DB::Open(o, dir, &db).ok());
  fn(db);
  db->SyncWAL().PermitUncheckedError();
  delete db;
}

}  // namespace

TEST_CASE("RecordsOutOfOrderAreDetected") {
  Copy c;
  Rewrite(c.path, [](rocksdb::DB* db) {
    std::string a, b;
    REQUIRE(db->Get(rocksdb::ReadOptions(), RecordKey(2), &a).ok());
    REQUIRE(db->Get(rocksdb::ReadOptions(), RecordKey(3), &b).ok());
    REQUIRE(db->Put(rocksdb::WriteOptions(), RecordKey(2), b).ok());
    REQUIRE(db->Put(rocksdb::WriteOptions(), RecordKey(3), a).ok());
  });
  ExpectCorrupt(c.path, "record 2");
}

TEST_CASE("MissingRecordIsDetected") {
  Copy c;
  Rewrite(c.path,
          [](rocksdb::DB* db) { REQUIRE(db->Delete(rocksdb::WriteOptions(), RecordKey(4)).ok()); });
  ExpectCorrupt(c.path, "records missing");
}

TEST_CASE("RewrittenStateIsDetected") {
  Copy c;
  Rewrite(c.path, [](rocksdb::DB* db) {
    std::string v;
    REQUIRE(db->Get(rocksdb::ReadOptions(), std::string(kStateKey), &v).ok());
    json st = DecodeValue(v, "state").value();
    st["dirty"] = !st["dirty"].get<bool>();
    REQUIRE(db->Put(rocksdb::WriteOptions(), std::string(kStateKey), EncodeValue(st)).ok());
  });
  ExpectCorrupt(c.path, "differs from the stored state");
}

// Found by fuzz_record: a record with a valid checksum and chain link but a missing field made
// the replay throw, so `wtx check` died instead of reporting. It is corruption.
TEST_CASE("MalformedRecordWithValidChecksumIsReportedNotACrash") {
  Copy c;
  Rewrite(c.path, [](rocksdb::DB* db) {
    std::string prev;
    REQUIRE(db->Get(rocksdb::ReadOptions(), RecordKey(2), &prev).ok());
    char hex[17];
    std::snprintf(hex, sizeof hex, "%016llx", static_cast<unsigned long long>(ValueChecksum(prev)));
    json bad = {{"type", "OUTCOME"}, {"tx", "t1"}, {"seq", 3}, {"prev", hex}};  // no decision
    REQUIRE(db->Put(rocksdb::WriteOptions(), RecordKey(3), EncodeValue(bad)).ok());
  });
  Run r = Check(c.path);
  INFO(r.out);
  CHECK(r.code == 3);
  CHECK_THAT(r.out, Catch::Contains("record 3"));
}

TEST_CASE("ForeignJournalIsDetected") {
  Copy c("rank-1", "rank-0");  // rank 1's files in rank 0's directory
  ExpectCorrupt(c.path, "journal of participant rank 1 where the journal of participant rank 0");
  Copy d("coordinator", "rank-1");
  ExpectCorrupt(d.path, "journal of coordinator");
}

TEST_CASE("ForeignWalIsDetected") {
  Copy c;
  Copy other("rank-1", "rank-1");
  for (const auto& f : c.Files(".log")) fs::remove(f);
  for (const auto& f : other.Files(".log")) {
    fs::copy_file(f, c.path + "/" + fs::path(f).filename().string());
  }
  Run r = Check(c.path);
  INFO(r.out);
  CHECK(r.code == 3);
}

TEST_CASE("ExpectRankChecksTheIdentityOfAnyDirectory") {
  Copy c("rank-0", "journal");
  Run plain = Check(c.path);
  INFO(plain.out);
  CHECK(plain.code == 0);
  CHECK_THAT(plain.out, Catch::Contains("identity not checked"));
  CHECK(Check(c.path, "--expect-rank 0").code == 0);
  Run wrong = Check(c.path, "--expect-rank 1");
  CHECK(wrong.code == 3);
  CHECK_THAT(wrong.out, Catch::Contains("journal of participant rank 0 where the journal of "
                                        "participant rank 1"));
  CHECK(Check(c.path, "--expect-coordinator").code == 3);
}

TEST_CASE("LogShowAndStatusRefuseACorruptJournal") {
  Copy c;
  const std::string wal = c.One(".log");
  Flip(wal, fs::file_size(wal) / 2);
  for (const std::string cmd : {"log", "status", "show"}) {
    Run r = Sh(Q(WTX_BINARY) + " " + cmd + " " + Q(c.path) + (cmd == "show" ? " t1" : ""));
    INFO(cmd << ": " << r.out);
    CHECK(r.code == 3);
    CHECK(r.stdout_only.empty());  // no (wrong) history printed
    CHECK_THAT(r.out, Catch::Contains("E_JOURNAL_CORRUPT"));
  }
}

TEST_CASE("EveryFlippedWalByteIsDetected") {
  Copy base;
  const std::string wal_name = fs::path(base.One(".log")).filename().string();
  const uint64_t size = fs::file_size(base.One(".log"));
  REQUIRE(size > 100);
  const int checked =
      ForEachFlippedCopy(base.path, wal_name, size, 300, [&](const std::string& dir, uint64_t off) {
        JournalCheckReport rep = VerifyJournalDir(dir);
        INFO("offset " << off << " of " << size);
        CHECK(rep.status.code() == ErrorCode::kJournalCorrupt);
      });
  CHECK(checked > 100);
}

TEST_CASE("EveryFlippedSstContentByteIsDetected") {
  Copy base;
  const std::string sst = base.One(".sst");
  const std::string sst_name = fs::path(sst).filename().string();
  // The block-based table footer (53 bytes) has padding no reader looks at; every byte before
  // it is covered by a block checksum.
  const uint64_t covered = fs::file_size(sst) - 53;
  const int checked = ForEachFlippedCopy(base.path, sst_name, covered, 200,
                                         [&](const std::string& dir, uint64_t off) {
                                           JournalCheckReport rep = VerifyJournalDir(dir);
                                           INFO("offset " << off << " of " << covered);
                                           CHECK(rep.status.code() == ErrorCode::kJournalCorrupt);
                                         });
  CHECK(checked > 50);
}

// ---------------------------------------------------------------------------------------------
// Daemons refuse what `wtx check` rejects (issue 12 item 10): Participant::Open and
// Coordinator::Open (hence `wtx rank`, `wtx coordinator`) verify a journal before they write to
// it, refuse a damaged one naming what is wrong, and leave every file as it was.

namespace {

// Name, size and content hash of every file: what "no file was deleted or rewritten" compares.
std::map<std::string, std::string> Listing(const std::string& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    std::stringstream ss;
    ss << in.rdbuf();
    const std::string bytes = ss.str();
    out[e.path().filename().string()] =
        std::to_string(bytes.size()) + ":" + std::to_string(std::hash<std::string>()(bytes));
  }
  return out;
}

// The manifest of the sim run that built SimJournals().
ManifestPtr SimManifest() {
  static ManifestPtr m = ParseManifest(SimManifestJson()).value();
  return m;
}

Status OpenRank(const std::string& dir, int rank = 0) {
  ParticipantOptions o;
  o.rank = rank;
  o.journal_dir = dir;
  o.kernel_identity = "k";
  auto p = Participant::Open(o, SimManifest());
  return p.ok() ? Status::OK() : p.status();
}

Status OpenCoordinator(const std::string& dir) {
  InProcTransport t(2);
  CoordinatorOptions o;
  o.journal_dir = dir;
  auto c = Coordinator::Open(o, &t);
  return c.ok() ? Status::OK() : c.status();
}

// Opening `dir` (a damaged journal) is refused as corrupt, naming `names`, and changes no file.
void ExpectOpenRefused(const std::string& dir,
                       const std::function<Status(const std::string&)>& open,
                       const std::string& names) {
  const auto before = Listing(dir);
  Status s = open(dir);
  INFO(s.ToString());
  CHECK(s.code() == ErrorCode::kJournalCorrupt);
  CHECK_THAT(s.message(), Catch::Contains(names, Catch::CaseSensitive::No));
  CHECK(Listing(dir) == before);
}

std::string Secret(const Scratch& d) {
  const std::string p = d.path() + "/secret";
  std::ofstream(p) << "0123456789abcdef0123456789abcdef";
  fs::permissions(p, fs::perms::owner_read | fs::perms::owner_write);
  return p;
}

}  // namespace

TEST_CASE("DaemonsOpenACleanJournalAndInitialiseOnlyAnEmptyOrAbsentDirectory") {
  Copy rank("rank-0");
  CHECK(OpenRank(rank.path).ok());
  Copy coord("coordinator", "coordinator");
  CHECK(OpenCoordinator(coord.path).ok());
  Scratch s;
  CHECK(OpenRank(s.path() + "/absent/rank-0").ok());
  fs::create_directories(s.path() + "/empty");
  CHECK(OpenCoordinator(s.path() + "/empty").ok());
  CHECK(VerifyJournalDir(s.path() + "/empty").status.ok());
}

TEST_CASE("DaemonsRefuseANonEmptyDirectoryWithoutAJournal") {
  Scratch s;
  const std::string dir = s.path() + "/rank-0";
  fs::create_directories(dir);
  std::ofstream(dir + "/notes.txt") << "not a journal";
  Status st = OpenRank(dir);
  CHECK(st.code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(st.message(), Catch::Contains("holds no journal"));
  CHECK_THAT(st.message(), Catch::Contains("notes.txt"));
  CHECK_FALSE(fs::exists(dir + "/CURRENT"));
}

TEST_CASE("CoordinatorRefusesAJournalWhoseWalAndWatermarkWereDeleted") {
  Copy c("coordinator", "coordinator");
  for (const auto& f : c.Files(".log")) fs::remove(f);
  for (const char* f : kWatermarkCopies) fs::remove(c.path + "/" + f);
  ExpectCorrupt(c.path, "no identity record");  // what `wtx check` says
  ExpectOpenRefused(c.path, OpenCoordinator, "no identity record");
  // The daemon refuses to start, with the reason, and writes nothing.
  Scratch s;
  const auto before = Listing(c.path);
  Run r = Sh("timeout 30 " + Q(WTX_BINARY) + " coordinator --listen 127.0.0.1:0 --journal " +
             Q(c.path) + " --secret-file " + Q(Secret(s)) + " --ranks 2");
  INFO(r.out);
  CHECK(r.code != 0);
  CHECK(r.code != 124);  // refused, not left running until the timeout
  CHECK_THAT(r.out, Catch::Contains("E_JOURNAL_CORRUPT"));
  CHECK_THAT(r.stdout_only, Catch::Contains("\"ready\":false"));
  CHECK(Listing(c.path) == before);
}

TEST_CASE("RankRefusesATruncatedManifestAndDeletesNothing") {
  Copy c;
  const std::string m = c.One("MANIFEST-");
  fs::resize_file(m, fs::file_size(m) / 2);
  REQUIRE(Check(c.path).code == 3);
  ExpectOpenRefused(
      c.path, [](const std::string& d) { return OpenRank(d); }, "journal");
  Scratch s;
  std::ofstream(s.path() + "/m.json") << SimManifest()->ToJson().dump();
  const auto before = Listing(c.path);
  Run r =
      Sh("timeout 30 " + Q(WTX_BINARY) + " rank --connect 127.0.0.1:1 --rank 0 --journal " +
         Q(c.path) + " --secret-file " + Q(Secret(s)) + " --manifest " + Q(s.path() + "/m.json"));
  INFO(r.out);
  CHECK(r.code != 0);
  CHECK(r.code != 124);
  CHECK_THAT(r.out, Catch::Contains("E_JOURNAL_CORRUPT"));
  CHECK(Listing(c.path) == before);
}

TEST_CASE("DaemonsRefuseFlippedBytesInOldSstBlocks") {
  Copy base;
  const std::string sst = base.One(".sst");
  const std::string sst_name = fs::path(sst).filename().string();
  const uint64_t covered = fs::file_size(sst) - 53;  // before the footer's padding
  const int refused = ForEachFlippedCopy(
      base.path, sst_name, covered, 40, [&](const std::string& dir, uint64_t off) {
        INFO("offset " << off << " of " << covered);
        REQUIRE(VerifyJournalDir(dir).status.code() == ErrorCode::kJournalCorrupt);
        ExpectOpenRefused(
            dir, [](const std::string& d) { return OpenRank(d); }, "");
      });
  CHECK(refused >= 40);
}

TEST_CASE("DaemonsRefuseEveryDamageThatCheckRejects") {
  // One copy per kind of damage `wtx check` reports; each daemon refuses it too.
  const std::vector<std::pair<std::string, std::function<void(Copy&)>>> damages = {
      {"flipped WAL byte", [](Copy& c) { Flip(c.One(".log"), fs::file_size(c.One(".log")) / 2); }},
      {"truncated WAL",
       [](Copy& c) { fs::resize_file(c.One(".log"), fs::file_size(c.One(".log")) * 2 / 3); }},
      {"deleted WAL",
       [](Copy& c) {
         for (const auto& f : c.Files(".log")) fs::remove(f);
       }},
      {"deleted SST", [](Copy& c) { fs::remove(c.One(".sst")); }},
      {"deleted CURRENT", [](Copy& c) { fs::remove(c.path + "/CURRENT"); }},
      {"flipped MANIFEST byte",
       [](Copy& c) { Flip(c.One("MANIFEST-"), fs::file_size(c.One("MANIFEST-")) / 2); }},
  };
  for (const auto& [what, damage] : damages) {
    Copy c;
    damage(c);
    INFO(what);
    REQUIRE(Check(c.path).code == 3);
    ExpectOpenRefused(
        c.path, [](const std::string& d) { return OpenRank(d); }, "");
  }
  // Another rank's journal: the identity check.
  Copy foreign("rank-1", "rank-0");
  ExpectOpenRefused(
      foreign.path, [](const std::string& d) { return OpenRank(d, 0); },
      "journal of participant rank 1 where the journal of participant rank 0");
}

TEST_CASE("ReplayRefusesACorruptJournal") {
  Copy c;
  Flip(c.One(".log"), fs::file_size(c.One(".log")) / 2);
  Run r = Sh(Q(WTX_BINARY) + " replay " + Q(c.path));
  INFO(r.out);
  CHECK(r.code == 3);
  CHECK(r.stdout_only.empty());
  CHECK_THAT(r.out, Catch::Contains("E_JOURNAL_CORRUPT"));
}

// ---- The sync watermark: two copies, and a journal without a valid one is refused ----

namespace {

// The ends of the write batches in a RocksDB write-ahead log (the legacy record format: a
// 7-byte header, checksum, length and type, per fragment, in 32 KiB blocks). Cutting the file
// at one of them leaves a log that ends cleanly, as if the later batches had never been
// written: no WAL checksum can see it.
std::vector<uint64_t> WalBatchEnds(const std::string& wal) {
  std::ifstream in(wal, std::ios::binary);
  const std::string b((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  constexpr uint64_t kBlock = 32768, kHeader = 7;
  std::vector<uint64_t> ends;
  uint64_t off = 0;
  while (off + kHeader <= b.size()) {
    if (kBlock - off % kBlock < kHeader) {  // block trailer
      off += kBlock - off % kBlock;
      continue;
    }
    const uint64_t len = static_cast<uint8_t>(b[off + 4]) | static_cast<uint8_t>(b[off + 5]) << 8;
    const int type = static_cast<uint8_t>(b[off + 6]);
    if (type == 0 && len == 0) break;  // zero padding: the end
    off += kHeader + len;
    if (type == 1 || type == 4) ends.push_back(off);  // a full record, or a last fragment
  }
  return ends;
}

// Cuts the journal's write-ahead log before its last `batches` write batches.
void CutWalBatches(const Copy& c, size_t batches) {
  const std::string wal = c.One(".log");
  const auto ends = WalBatchEnds(wal);
  REQUIRE(ends.size() > batches);
  REQUIRE(ends.back() == fs::file_size(wal));  // the walk understood the whole file
  fs::resize_file(wal, ends[ends.size() - 1 - batches]);
}

void RemoveWatermarkCopies(const std::string& dir) {
  for (const char* f : kWatermarkCopies) fs::remove(dir + "/" + f);
}

Status OpenRankAccepting(const std::string& dir) {
  ParticipantOptions o;
  o.journal_dir = dir;
  o.kernel_identity = "k";
  o.accept_unverified_journal = true;
  auto p = Participant::Open(o, SimManifest());
  return p.ok() ? Status::OK() : p.status();
}

// Damages one watermark copy: 0 deletes it, 1 flips a byte, 2 truncates it.
void DamageCopy(const std::string& dir, int copy, int how) {
  const std::string f = dir + "/" + kWatermarkCopies[copy];
  REQUIRE(fs::exists(f));
  if (how == 0) fs::remove(f);
  if (how == 1) Flip(f, 20);
  if (how == 2) fs::resize_file(f, 17);
}

std::string CoordinatorCommand(const Scratch& s, const std::string& dir, const std::string& extra) {
  return "timeout -s TERM 5 " + Q(WTX_BINARY) + " coordinator --listen 127.0.0.1:0 --journal " +
         Q(dir) + " --secret-file " + Q(Secret(s)) + " --ranks 2 --startup-wait-ms 100 " + extra;
}

}  // namespace

TEST_CASE("WalCutAtARecordBoundaryIsCaughtByTheWatermark") {
  // The cut itself is invisible to RocksDB: only the watermark tells.
  for (const char* which : {"rank-0", "coordinator"}) {
    Copy c(which, which);
    CutWalBatches(c, 2);
    ExpectCorrupt(c.path, "synced records lost");
  }
}

TEST_CASE("CoordinatorThatLostItsLastDecisionAndBothWatermarkCopiesIsRefused") {
  // Before: `wtx check` passed with a warning and the coordinator started, presuming abort for
  // the transaction whose commit DECISION the cut took.
  Copy c("coordinator", "coordinator");
  CutWalBatches(c, 2);  // the last DECISION and its END
  RemoveWatermarkCopies(c.path);
  Run r = Check(c.path);
  INFO(r.out);
  CHECK(r.code == 3);
  CHECK_THAT(r.out, Catch::Contains("no valid sync watermark"));
  CHECK_THAT(r.out, Catch::Contains(c.path));
  CHECK_THAT(r.out, Catch::Contains(std::string(kWatermarkCopies[0]) + ": missing"));
  ExpectOpenRefused(c.path, OpenCoordinator, "no valid sync watermark");

  Scratch s;
  const auto before = Listing(c.path);
  Run d = Sh(CoordinatorCommand(s, c.path, ""));
  INFO(d.out);
  CHECK(d.code != 0);
  CHECK(d.code != 124);  // refused, not left running until the timeout
  CHECK_THAT(d.out, Catch::Contains("E_JOURNAL_CORRUPT"));
  CHECK_THAT(d.out, Catch::Contains("--accept-unverified-journal"));
  CHECK_THAT(d.out, Catch::Contains(c.path));
  CHECK_THAT(d.stdout_only, Catch::Contains("\"ready\":false"));
  CHECK(Listing(c.path) == before);

  // The operator accepts it: the daemon starts and the journal says so.
  Run a = Sh(CoordinatorCommand(s, c.path, "--accept-unverified-journal"));
  INFO(a.out);
  CHECK_THAT(a.stdout_only, Catch::Contains("\"ready\":true"));
  Run log = Sh(Q(WTX_BINARY) + " log " + Q(c.path));
  INFO(log.out);
  CHECK(log.code == 0);
  CHECK_THAT(log.out, Catch::Contains("EVENT"));
  CHECK_THAT(log.out, Catch::Contains("ACCEPTED_UNVERIFIED"));
  CHECK_THAT(log.out, Catch::Contains("no valid sync watermark"));
  auto h = ReadJournalHistory(c.path);
  REQUIRE(h.ok());
  REQUIRE(h->events.size() == 1);
  CHECK(h->events[0].type == "ACCEPTED_UNVERIFIED");
  CHECK(h->entries.size() == 2);  // t3 is gone: the loss the operator accepted
  // From then on the journal has its watermark again.
  CHECK(Check(c.path, "--strict").code == 0);
}

TEST_CASE("RankThatLostSyncedRecordsAndBothWatermarkCopiesIsRefusedUnlessAccepted") {
  Copy c;
  CutWalBatches(c, 2);  // the last PREPARED (synced) and OUTCOME
  RemoveWatermarkCopies(c.path);
  ExpectCorrupt(c.path, "no valid sync watermark");
  ExpectOpenRefused(
      c.path, [](const std::string& d) { return OpenRank(d); }, "no valid sync watermark");
  Status refused = OpenRank(c.path);
  CHECK_THAT(refused.message(), Catch::Contains("--accept-unverified-journal"));

  REQUIRE(OpenRankAccepting(c.path).ok());
  auto h = ReadJournalHistory(c.path);
  REQUIRE(h.ok());
  REQUIRE(h->events.size() == 1);
  CHECK(h->events[0].type == "ACCEPTED_UNVERIFIED");
  CHECK_THAT(h->events[0].detail, Catch::Contains("no valid sync watermark"));
  auto recs = ReadJournalState(c.path);
  REQUIRE(recs.ok());
  CHECK(Check(c.path, "--strict").code == 0);
  // Accepted once: a later start needs no flag, and logs nothing more.
  REQUIRE(OpenRank(c.path).ok());
  CHECK(ReadJournalHistory(c.path)->events.size() == 1);
}

TEST_CASE("OneWatermarkCopyLostOrDamagedIsVerifiedFromTheOther") {
  for (int copy = 0; copy < 2; ++copy) {
    for (int how = 0; how < 3; ++how) {
      INFO("copy " << kWatermarkCopies[copy] << ", damage " << how);
      {
        Copy c;
        DamageCopy(c.path, copy, how);
        Run r = Check(c.path);
        INFO(r.out);
        CHECK(r.code == 0);
        CHECK_THAT(r.out, Catch::Contains("warning: sync watermark damaged"));
        CHECK_THAT(r.out, Catch::Contains(kWatermarkCopies[copy]));
        CHECK(Check(c.path, "--strict").code == 3);
        // A daemon starts, and recreates the copy.
        REQUIRE(OpenRank(c.path).ok());
        CHECK(Check(c.path, "--strict").code == 0);
      }
      {
        // The other copy still catches a write-ahead log cut at a record boundary.
        Copy c;
        CutWalBatches(c, 2);
        DamageCopy(c.path, copy, how);
        ExpectCorrupt(c.path, "synced records lost");
        ExpectOpenRefused(
            c.path, [](const std::string& d) { return OpenRank(d); }, "synced records lost");
      }
    }
  }
}

TEST_CASE("BothWatermarkCopiesLostOrDamagedIsRefused") {
  for (int how_a = 0; how_a < 3; ++how_a) {
    for (int how_b = 0; how_b < 3; ++how_b) {
      INFO("damage " << how_a << " and " << how_b);
      Copy c;
      DamageCopy(c.path, 0, how_a);
      DamageCopy(c.path, 1, how_b);
      ExpectCorrupt(c.path, "no valid sync watermark");
      ExpectOpenRefused(
          c.path, [](const std::string& d) { return OpenRank(d); }, "no valid sync watermark");
    }
  }
}

namespace {

// A copy of a journal written by wtx before the two watermark copies (one WTX-SYNCED file).
struct LegacyCopy {
  Scratch dir;
  std::string path;
  explicit LegacyCopy(const std::string& which) {
    path = dir.path() + "/" + which;
    fs::copy(std::string(WTX_SOURCE_DIR) + "/tests/data/legacy-watermark/" + which, path,
             fs::copy_options::recursive);
  }
};

}  // namespace

TEST_CASE("JournalsWithTheSingleWatermarkFileOfOlderVersionsVerifyAndOpen") {
  {
    LegacyCopy c("rank-0");
    REQUIRE(fs::exists(c.path + "/" + kWatermarkFile));
    Run r = Check(c.path, "--strict");
    INFO(r.out);
    CHECK(r.code == 0);
    CHECK_THAT(r.out, Catch::Contains("synced through record 15"));
    REQUIRE(OpenRank(c.path).ok());
    // Replaced by the two copies, naming at least what it named.
    CHECK_FALSE(fs::exists(c.path + "/" + kWatermarkFile));
    WatermarkReading w = ReadWatermark(c.path, nullptr);
    CHECK(w.copy_valid[0]);
    CHECK(w.copy_valid[1]);
    REQUIRE(w.newest);
    CHECK(w.newest->seq >= 15);
    CHECK(Check(c.path, "--strict").code == 0);
  }
  {
    LegacyCopy c("coordinator");
    CHECK(Check(c.path, "--strict").code == 0);
    REQUIRE(OpenCoordinator(c.path).ok());
    CHECK_FALSE(fs::exists(c.path + "/" + kWatermarkFile));
    CHECK(Check(c.path, "--strict").code == 0);
    auto h = ReadJournalHistory(c.path);
    REQUIRE(h.ok());
    CHECK(h->entries.size() == 2);
  }
  {
    // The old file still catches a cut log, and its loss is refused like the copies'.
    LegacyCopy c("rank-0");
    Flip(c.path + "/" + kWatermarkFile, 20);
    ExpectCorrupt(c.path, "no valid sync watermark");
    ExpectCorrupt(c.path, kWatermarkFile);
  }
}
