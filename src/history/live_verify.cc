#include "wtx/live_verify.h"

#include <memory>

#include <rocksdb/file_system.h>

#include "journal/journal.h"
#include "src/txn/participant_records.h"
#include "src/txn/participant_state.h"
#include "wtx/content_hash.h"

namespace wtx {

namespace {

LiveVerifyReport Compare(CommittedDigest committed, std::string live_digest, bool loaded) {
  LiveVerifyReport r;
  r.committed = std::move(committed);
  r.live_digest = std::move(live_digest);
  const CommittedDigest& c = r.committed;
  if (c.committed_tx.empty() || c.rank_digest.empty()) {
    r.message = "not comparable: the rank has no committed transaction";
  } else if (c.dirty) {
    r.message =
        "not comparable: the rank is dirty (its bytes may differ from version " + c.version + ")";
  } else if (!loaded) {
    r.message = "not comparable: the rank's live bytes were lost (not loaded)";
  } else {
    r.comparable = true;
    r.match = r.live_digest == c.rank_digest;
    r.message = r.match ? "live bytes match committed transaction '" + c.committed_tx + "'"
                        : "MISMATCH: live digest " + r.live_digest + " != committed digest " +
                              c.rank_digest + " of transaction '" + c.committed_tx +
                              "' (bytes changed outside a transaction)";
  }
  return r;
}

}  // namespace

Result<CommittedDigest> ReadCommittedDigest(const std::string& journal_dir) {
  JournalOptions o;
  o.read_only = true;
  o.create_if_missing = false;
  auto j = Journal::Open(journal_dir, o);
  if (!j.ok()) return j.status();
  const Journal& journal = *j.value();
  if (journal.identity().role != "participant") {
    return Status::InvalidArgument(journal_dir + " is not a participant journal (role '" +
                                   journal.identity().role + "')");
  }
  CommittedDigest c;
  if (journal.state().is_null()) return c;
  auto st = DecodeParticipantState(journal.state(), journal_dir + ": state");
  if (!st.ok()) return st.status();
  c.dirty = st.value().dirty;
  c.committed_tx = st.value().committed_tx.value_or("");
  c.version = st.value().version.value_or("");
  if (c.committed_tx.empty()) return c;
  WTX_RETURN_IF_ERROR(journal.ForEachRecordRef([&](const RecordRef& ref) -> Status {
    if (!ref.json) return Status::OK();  // a binary WRITE
    WTX_ASSIGN_OR_RETURN(type, ParticipantRecordTypeOf(*ref.json));
    if (type != ParticipantRecordType::kPrepared) return Status::OK();
    WTX_ASSIGN_OR_RETURN(p, DecodePrepared(*ref.json));
    // The live bytes are the served form: the served digest where it differs (the last wins).
    if (p.tx == c.committed_tx && p.digest) c.rank_digest = p.served_digest.value_or(*p.digest);
    return Status::OK();
  }));
  if (c.rank_digest.empty()) {
    return Status::Corruption(journal_dir + ": committed transaction '" + c.committed_tx +
                              "' has no PREPARED record with a digest");
  }
  return c;
}

Result<LiveVerifyReport> VerifyLive(Participant& participant, const std::string& journal_dir) {
  auto c = ReadCommittedDigest(journal_dir);
  if (!c.ok()) return c.status();
  const RankStatus st = participant.status();
  auto recomputed = participant.RecomputeDigest();
  if (!recomputed.ok()) return recomputed.status();
  std::string live = std::move(recomputed).value();
  CommittedDigest committed = std::move(c).value();
  committed.dirty = committed.dirty || st.dirty;
  return Compare(std::move(committed), std::move(live), st.loaded);
}

Result<std::string> RankDigestOfImage(const Manifest& manifest, std::span<const uint8_t> image) {
  size_t total = 0;
  for (const auto& p : manifest.params()) total += static_cast<size_t>(p.live_bytes());
  if (image.size() != total) {
    return Status::InvalidArgument("live image is " + std::to_string(image.size()) +
                                   " bytes; the manifest's parameters total " +
                                   std::to_string(total));
  }
  std::vector<uint64_t> digests;
  size_t off = 0;
  for (const auto& p : manifest.params()) {
    const size_t n = static_cast<size_t>(p.live_bytes());
    digests.push_back(ParamDigest(image.subspan(off, n)));
    off += n;
  }
  return ServedRankDigest(manifest, digests);
}

Result<LiveVerifyReport> VerifyImage(const Manifest& manifest, std::span<const uint8_t> image,
                                     const std::string& journal_dir) {
  auto live = RankDigestOfImage(manifest, image);
  if (!live.ok()) return live.status();
  auto c = ReadCommittedDigest(journal_dir);
  if (!c.ok()) return c.status();
  return Compare(std::move(c).value(), std::move(live).value(), /*loaded=*/true);
}

Status DumpLiveImage(Participant& participant, const std::string& path, const Env& env) {
  const std::shared_ptr<rocksdb::FileSystem> fs = env.fs ? env.fs : rocksdb::FileSystem::Default();
  auto failed = [&](const char* what, const rocksdb::IOStatus& s) {
    return Status::IOError(std::string("cannot ") + what + " " + path + ": " + s.ToString());
  };
  std::unique_ptr<rocksdb::FSWritableFile> out;
  rocksdb::IOStatus s = fs->NewWritableFile(path, rocksdb::FileOptions(), &out, nullptr);
  if (!s.ok()) return failed("create", s);
  LiveMemory& mem = participant.memory();
  std::string staged;
  for (uint32_t i = 0; i < participant.manifest().params().size(); ++i) {
    std::span<const uint8_t> b = mem.Param(i);
    if (!mem.HostAddressable()) {  // a device: through a host copy
      staged.resize(mem.Size(i));
      WTX_RETURN_IF_ERROR(mem.Load(i, 0, staged.data(), staged.size()));
      b = {reinterpret_cast<const uint8_t*>(staged.data()), staged.size()};
    }
    s = out->Append(rocksdb::Slice(reinterpret_cast<const char*>(b.data()), b.size()),
                    rocksdb::IOOptions(), nullptr);
    if (!s.ok()) return failed("write", s);
  }
  s = out->Fsync(rocksdb::IOOptions(), nullptr);
  if (!s.ok()) return failed("sync", s);
  s = out->Close(rocksdb::IOOptions(), nullptr);
  if (!s.ok()) return failed("close", s);
  return Status::OK();
}

}  // namespace wtx
