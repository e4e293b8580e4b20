// Live verification: do a rank's live bytes still equal its committed version? Catches writes
// that bypassed a transaction (a stray kernel, a buggy loader, memory corruption).
//
// The committed rank digest is the "digest" of the PREPARED record of the rank's committed
// transaction (state "committed_tx"); it is compared with the rank digest recomputed from live
// bytes (content_hash.h). The comparison is meaningful only when the journal says the rank is
// clean: a dirty rank's bytes are expected to differ, and a rank without a commit has nothing
// to compare with. Such ranks are reported "not comparable", never "match".
//
// A journal directory holds no live bytes, so offline verification (`wtx verify`) takes a live
// image: the raw bytes of every parameter concatenated in manifest order (DumpLiveImage writes
// one from a running participant).
//
// Thread-safety: the functions share no state. ReadCommittedDigest opens the journal
// read-only, which RocksDB allows while the participant has it open (it sees the records
// written up to that moment).
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "wtx/env.h"
#include "wtx/manifest.h"
#include "wtx/participant.h"
#include "wtx/status.h"

namespace wtx {

struct CommittedDigest {
  bool dirty = false;        // journal state: live bytes may differ from the committed version
  std::string committed_tx;  // empty: never committed
  std::string version;       // committed version (all ranks)
  std::string rank_digest;   // PREPARED "digest" of committed_tx; empty when never committed
};

struct LiveVerifyReport {
  CommittedDigest committed;
  std::string live_digest;
  bool comparable = false;  // clean, loaded and committed
  bool match = false;       // comparable and live_digest == committed.rank_digest
  std::string message;      // one line for humans
};

// REQUIRES: `journal_dir` is a participant journal.
Result<CommittedDigest> ReadCommittedDigest(const std::string& journal_dir);

// Recomputes `participant`'s rank digest from its live bytes (RecomputeDigest) and compares it
// with the committed one read from `journal_dir` (its own journal).
Result<LiveVerifyReport> VerifyLive(Participant& participant, const std::string& journal_dir);

// Rank digest of a live image (every parameter's bytes, manifest order, concatenated).
// InvalidArgument when the image size is not the manifest's total size.
Result<std::string> RankDigestOfImage(const Manifest& manifest, std::span<const uint8_t> image);
// Compares an image with the journal; `loaded` is assumed (the image is what was dumped).
Result<LiveVerifyReport> VerifyImage(const Manifest& manifest, std::span<const uint8_t> image,
                                     const std::string& journal_dir);

// Writes participant.memory()'s parameters, manifest order, to `path` (replaced if it exists),
// synced, through `env.fs` (the default filesystem when null): a fault-injection filesystem
// reaches it. IOError naming `path` when it cannot be created, written or synced.
// REQUIRES: no concurrent Write/Patch.
Status DumpLiveImage(Participant& participant, const std::string& path, const Env& env = {});

}  // namespace wtx
