// Reference model for `wtx torture`: what every rank's live bytes, committed version, dirty,
// loaded, stale and in-doubt state must be, kept outside the components that crash.
//
// The model is deliberately independent of the participant's implementation: it keeps its own
// copy of each rank's live bytes (applying the writes and patches the harness issued, mapping
// patch indices through the shard boxes itself), its own element-level coverage bitmaps, its
// own staleness flags, and its own record of which transactions committed with which content.
// Only the definition of a version (wtx/content_hash.h: ParamDigest, RankDigest,
// CombineRankDigests) is shared, since it is the specification of what a version is.
//
// Where a crash makes the truth unknowable (a journal write that failed may or may not have
// reached the disk), the model says kUnknown and checks only what holds either way.
//
// Thread-safety: none; one harness thread owns a Model.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "src/conformance/fill.h"
#include "wtx/manifest.h"
#include "wtx/protocol.h"

namespace wtx::torture {

enum class Tri { kNo, kYes, kUnknown };
std::string_view TriName(Tri t);

// The manifest of rank `rank` of `ranks`: a TP-sliced fused QKV with three shards, a
// column-sliced output projection, replicated norm/embedding, a stacked two-expert MoE tensor
// (box with a leading extent-1 dimension) and a packed (non-invertible) layout; three modules
// and three derived states in the three phases. Every rank's fingerprint is the same.
nlohmann::json TortureManifestJson(int rank, int ranks);

// What the model knows of the active transaction on one rank.
struct ModelTx {
  std::string id;
  TxKind kind = TxKind::kFull;
  bool rollback = false;
  std::vector<bool> in_scope;              // per parameter
  std::set<std::string> sources;           // delta: declared
  std::vector<std::vector<bool>> covered;  // per parameter, per element
  struct Parts {
    int n = 0;
    std::vector<bool> got;
    std::set<int64_t> indices;  // source indices of the parts applied
  };
  std::map<std::string, Parts> patches;  // delta: per source this rank holds
  bool wrote = false;
  Tri dirty_at_begin = Tri::kNo;
  std::vector<std::vector<uint8_t>> live_at_begin;
  std::vector<bool> stale_at_begin;
  std::set<uint32_t> refreshed;  // derived states refreshed during the tx
  std::set<uint32_t> written;    // parameters written during the tx
  // Derived states whose last refresh in the tx came after a write of one of their sources in
  // the tx: their copies hold bytes a restoring abort takes back.
  std::set<uint32_t> refreshed_from_written;
  std::string kernel_at_begin;
  enum class Prep { kNone, kYes, kNo, kMaybe } prepared = Prep::kNone;  // durable vote
  std::string digest;        // this rank's digest when it voted yes
  bool interrupted = false;  // the process restarted since Begin
};

struct ModelRank {
  bool alive = true;
  bool loaded = false;
  Tri dirty = Tri::kNo;
  bool ever_began = false;
  std::string committed_tx;                // "" before the first commit
  std::vector<std::vector<uint8_t>> live;  // per parameter
  std::vector<bool> stale;                 // per derived state
  std::string kernel;
  std::optional<ModelTx> tx;
  // A transaction whose Begin failed with an I/O error may have been journaled; after a
  // restart it may be aborted with dirty=true.
  bool begin_maybe_logged = false;
};

struct ModelDecision {
  enum class Kind { kUnknown, kCommit, kAbort, kNoop } kind = Kind::kUnknown;
  std::string version;                    // commit
  std::vector<std::string> rank_digests;  // commit: per rank, as the model computed
};

// One write piece the harness is about to issue, in live coordinates.
struct ModelWrite {
  uint32_t param = 0;
  std::string shard;  // "" = whatever the box covers
  Box box;
  uint64_t seed = 0;
};

class Model {
 public:
  Model(std::vector<ManifestPtr> manifests, std::string kernel_identity);

  int ranks() const { return static_cast<int>(ranks_.size()); }
  const Manifest& manifest(int r) const { return *manifests_[r]; }
  ModelRank& rank(int r) { return ranks_[r]; }
  const ModelRank& rank(int r) const { return ranks_[r]; }
  const std::string& default_kernel() const { return kernel_; }

  // Bytes of `box` of parameter `param` on rank `r` for fill seed `seed`: each element is
  // FillElement(seed, source, index in the source) of the shard that holds it.
  std::vector<uint8_t> ExpectedBytes(int r, uint32_t param, const Box& box, uint64_t seed) const;
  // Value bytes (dtype of the parameter `source` feeds on rank r) for patch indices.
  std::vector<uint8_t> PatchValues(int r, const std::string& source,
                                   const std::vector<int64_t>& indices, uint64_t seed) const;

  // ---- predictions (nothing changes) ----
  // The error Begin must fail with on rank r (kOk: must succeed). `base_ok`: base names the
  // rank's committed version. nullopt: cannot tell (unknown dirty state).
  std::optional<ErrorCode> PredictBegin(int r, const BeginRequest& req) const;
  std::optional<ErrorCode> PredictWrite(int r, const std::vector<ModelWrite>& pieces) const;
  std::optional<ErrorCode> PredictPatch(int r, const std::string& source,
                                        const std::vector<int64_t>& indices, int part,
                                        int parts) const;
  // The vote rank r must cast (errors; empty = yes). nullopt when the rank has no transaction
  // `tx` (it votes no with E_NO_TX).
  std::optional<std::vector<ErrorCode>> PredictVote(int r, const std::string& tx) const;

  // ---- updates after the participant accepted the call ----
  void Begin(int r, const BeginRequest& req);
  void Write(int r, const std::vector<ModelWrite>& pieces);
  void Patch(int r, const std::string& source, const std::vector<int64_t>& indices, int part,
             int parts, uint64_t seed);
  void Refresh(int r, const std::string& name);  // "*" = every stale one
  void SetKernelIdentity(int r, const std::string& k) { ranks_[r].kernel = k; }
  // Prepare returned a yes vote (durable) / a no vote / failed in a way that may have logged.
  void Prepared(int r, ModelTx::Prep prep);
  // The decision reached rank r while alive (commit: the version the model expects).
  void ApplyDecision(int r, const std::string& tx, ModelDecision::Kind kind);
  // The process died (bytes lost) / restarted (journal recovery: unprepared tx aborted).
  void Kill(int r);
  void Restart(int r);

  // ---- transactions ----
  // The model's content digest of rank r's live bytes now.
  std::string Digest(int r) const;
  std::map<std::string, ModelDecision>& decisions() { return decisions_; }
  // The last transaction the coordinator committed ("" if none), in decision order.
  std::string last_committed() const { return last_committed_; }
  void RecordDecision(const std::string& tx, ModelDecision d);

 private:
  void Dirty(ModelRank& rk) { rk.dirty = Tri::kYes; }
  void MarkWritten(int r, uint32_t param);

  std::vector<ManifestPtr> manifests_;
  std::string kernel_;
  std::vector<ModelRank> ranks_;
  std::map<std::string, ModelDecision> decisions_;
  std::string last_committed_;
};

}  // namespace wtx::torture
