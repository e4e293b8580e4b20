// Participant::WriteSourceFromFile: a source tensor read from a file (pread straight into host
// live memory, column slices from the mapping or from one read) gives exactly the bytes and
// the version of WriteSource from memory, on any number of data-path threads and on device
// memory; a read that fails once bytes landed poisons the transaction, named.
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <fstream>
#include <map>
#include <random>
#include <vector>

#include "tests/test_util.h"
#include "wtx/device_live_memory.h"
#include "wtx/participant.h"

using namespace wtx;
using namespace wtx::testing;

namespace {

std::vector<uint8_t> RandomBytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> v(n);
  for (auto& b : v) b = static_cast<uint8_t>(rng());
  return v;
}

// Sources of several sizes (not multiples of the 64 KiB chunk, some of many jobs): a whole
// parameter, a fused parameter fed by two row blocks, a column slice.
ManifestPtr FileManifest() {
  return ParseManifest(nlohmann::json::parse(R"({
    "params": [
      {"name": "big", "dtype": "bf16", "shape": [1531, 1023], "shards": [
        {"id": "s", "source": "BIG", "source_shape": [1531, 1023], "box": [[0, 1531], [0, 1023]],
         "source_box": [[0, 1531], [0, 1023]]}]},
      {"name": "qk", "dtype": "f32", "shape": [700, 300], "shards": [
        {"id": "q", "source": "Q", "source_shape": [900, 300], "box": [[0, 400], [0, 300]],
         "source_box": [[500, 900], [0, 300]]},
        {"id": "k", "source": "K", "source_shape": [300, 300], "box": [[400, 700], [0, 300]],
         "source_box": [[0, 300], [0, 300]]}]},
      {"name": "col", "dtype": "f32", "shape": [600, 450], "shards": [
        {"id": "c", "source": "C", "source_shape": [600, 900], "box": [[0, 600], [0, 450]],
         "source_box": [[0, 600], [450, 900]]}]},
      {"name": "tiny", "dtype": "f32", "shape": [7], "shards": [
        {"id": "t", "source": "T", "source_shape": [7], "box": [[0, 7]],
         "source_box": [[0, 7]]}]}]})"))
      .value();
}

// One file holding every source after `lead` bytes, each at a recorded offset.
struct SourcesFile {
  std::map<std::string, std::vector<uint8_t>> bytes;
  std::map<std::string, uint64_t> offset;
  std::string path;
  int fd = -1;
  std::vector<uint8_t> contents;
  ~SourcesFile() {
    if (fd >= 0) close(fd);
  }
};

void WriteSourcesFile(const Manifest& m, const std::string& path, SourcesFile* f,
                      size_t lead = 333) {
  uint64_t seed = 1;
  f->contents.assign(lead, 0x5A);
  for (const auto& p : m.params()) {
    for (const auto& sh : p.shards) {
      if (f->bytes.count(sh.source)) continue;
      auto b = RandomBytes(static_cast<size_t>(NumElements(sh.source_shape)) * DTypeSize(p.dtype),
                           seed++);
      f->offset[sh.source] = f->contents.size();
      f->contents.insert(f->contents.end(), b.begin(), b.end());
      f->bytes[sh.source] = std::move(b);
    }
  }
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(f->contents.data()),
             static_cast<std::streamsize>(f->contents.size()));
  f->path = path;
  f->fd = open(path.c_str(), O_RDONLY);
  REQUIRE(f->fd >= 0);
}

bool DeviceRun() {
  const char* name = std::getenv("WTX_TEST_MEMORY");
  return name != nullptr && std::string(name) == "reference-device";
}

Result<std::unique_ptr<Participant>> OpenRank(TempDir& dir, const std::string& name, ManifestPtr m,
                                              int threads) {
  ParticipantOptions o;
  o.journal_dir = dir.sub(name);
  o.threads = threads;
  if (DeviceRun()) o.memory = NewReferenceDeviceLiveMemory(*m);
  return Participant::Open(o, std::move(m));
}

std::vector<uint8_t> LiveBytes(Participant& p, uint32_t param) {
  std::vector<uint8_t> out(p.memory().Size(param));
  REQUIRE(p.memory().Load(param, 0, out.data(), out.size()).ok());
  return out;
}

}  // namespace

TEST_CASE("SourcesReadFromAFileEqualThoseWrittenFromMemory") {
  ManifestPtr m = FileManifest();
  TempDir dir;
  SourcesFile f;
  WriteSourcesFile(*m, dir.sub("sources.bin"), &f);
  // The reference: WriteSource from memory.
  auto ref = OpenRank(dir, "ref", m, 1);
  REQUIRE(ref.ok());
  BeginRequest req;
  req.tx = "t1";
  REQUIRE((*ref)->Begin(req).ok());
  for (const auto& [name, b] : f.bytes) REQUIRE((*ref)->WriteSource(name, b.data(), b.size()).ok());
  auto ref_vote = (*ref)->Prepare("t1");
  REQUIRE(ref_vote.ok());
  REQUIRE(ref_vote->yes);
  for (int threads : {1, 2, 5}) {
    for (bool mapped : {false, true}) {
      INFO("threads " << threads << (mapped ? ", column slices from the mapping" : ""));
      auto p = OpenRank(dir, "r" + std::to_string(threads) + (mapped ? "m" : ""), m, threads);
      REQUIRE(p.ok());
      REQUIRE((*p)->Begin(req).ok());
      for (const auto& [name, b] : f.bytes) {
        SourceFile file{f.fd, f.offset[name], f.path,
                        mapped ? f.contents.data() + f.offset[name] : nullptr};
        auto n = (*p)->WriteSourceFromFile(name, file);
        REQUIRE(n.ok());
        CHECK(n.value() == 1);
      }
      auto vote = (*p)->Prepare("t1");
      REQUIRE(vote.ok());
      REQUIRE(vote->yes);
      CHECK(vote->digest == ref_vote->digest);
      CHECK(vote->digest == (*p)->RecomputeDigest().value());
      for (uint32_t i = 0; i < m->params().size(); ++i) {
        CHECK(LiveBytes(**p, i) == LiveBytes(**ref, i));
      }
    }
  }
}

TEST_CASE("SourceFileErrorsAreNamedAndLandNothing") {
  ManifestPtr m = FileManifest();
  TempDir dir;
  SourcesFile f;
  WriteSourcesFile(*m, dir.sub("sources.bin"), &f);
  auto p = OpenRank(dir, "rank0", m, 2);
  REQUIRE(p.ok());
  // No transaction.
  SourceFile file{f.fd, f.offset["BIG"], f.path};
  auto n = (*p)->WriteSourceFromFile("BIG", file);
  REQUIRE(!n.ok());
  CHECK(n.status().code() == ErrorCode::kNoTx);
  BeginRequest req;
  req.tx = "t1";
  REQUIRE((*p)->Begin(req).ok());
  // No file.
  n = (*p)->WriteSourceFromFile("BIG", SourceFile{-1, 0, "none"});
  REQUIRE(!n.ok());
  CHECK(n.status().code() == ErrorCode::kInvalidArgument);
  CHECK_THAT(n.status().message(), Catch::Contains("source 'BIG'"));
  // A source this rank does not hold: nothing read.
  n = (*p)->WriteSourceFromFile("NOT_HERE", SourceFile{f.fd, 0, f.path});
  REQUIRE(n.ok());
  CHECK(n.value() == 0);
  // Twice: the second is a duplicate, checked before any byte is read.
  REQUIRE((*p)->WriteSourceFromFile("K", SourceFile{f.fd, f.offset["K"], f.path}).ok());
  n = (*p)->WriteSourceFromFile("K", SourceFile{f.fd, f.offset["K"], f.path});
  REQUIRE(!n.ok());
  CHECK(n.status().code() == ErrorCode::kDuplicateWrite);
  auto vote = (*p)->Prepare("t1");  // the rest is missing, nothing failed
  REQUIRE(vote.ok());
  CHECK(!vote->yes);
  CHECK(vote->error == ErrorCode::kCoverageIncomplete);
}

TEST_CASE("AReadThatFailsAfterBytesLandedPoisonsTheTransaction") {
  // The file ends inside BIG (truncated after it was opened: a checkpoint being rewritten):
  // the read fails with kIOError naming the file, the source and the byte range; the live
  // bytes changed, so prepare votes no naming the read and the abort leaves the rank dirty.
  ManifestPtr m = FileManifest();
  TempDir dir;
  SourcesFile f;
  WriteSourcesFile(*m, dir.sub("sources.bin"), &f);
  const uint64_t cut = f.offset["BIG"] + f.bytes["BIG"].size() / 2 + 12345;
  REQUIRE(truncate(f.path.c_str(), static_cast<off_t>(cut)) == 0);
  for (int threads : {1, 2}) {
    INFO("threads " << threads);
    auto p = OpenRank(dir, "rank" + std::to_string(threads), m, threads);
    REQUIRE(p.ok());
    BeginRequest full;
    full.tx = "full";
    REQUIRE((*p)->Begin(full).ok());
    auto n = (*p)->WriteSourceFromFile("BIG", SourceFile{f.fd, f.offset["BIG"], f.path});
    REQUIRE(!n.ok());
    CHECK(n.status().code() == ErrorCode::kIOError);
    CHECK_THAT(n.status().message(), Catch::Contains(f.path));
    CHECK_THAT(n.status().message(), Catch::Contains("source 'BIG'"));
    CHECK_THAT(n.status().message(), Catch::Contains("the file ends at"));
    if (!DeviceRun()) {  // host memory reads in place; a device write reads first, lands nothing
      CHECK_THAT(n.status().message(), Catch::Contains("can no longer commit"));
      for (const auto& [name, b] : f.bytes) {
        if (name != "BIG") REQUIRE((*p)->WriteSource(name, b.data(), b.size()).ok());
      }
      auto vote = (*p)->Prepare("full");
      REQUIRE(vote.ok());
      CHECK(!vote->yes);
      CHECK(vote->error == ErrorCode::kBadWrite);
      CHECK_THAT(vote->message, Catch::Contains("a read failed"));
      CHECK(vote->wrote);
    }
    REQUIRE((*p)->Decide("full", Decision::kAbort, "").ok());
    if (!DeviceRun()) CHECK((*p)->status().dirty);
  }
}
