// Storage identity (include/wtx/storage_identity.h) through the public C++ API: an embedder
// that owns its parameter buffers and reallocates one between two transactions, as an engine's
// post-load processing does. The participant must never write, hash or vouch for the old
// buffer; Rebind adopts the new one, and only a Verify that proves it or a full commit serves.
#include <catch2/catch.hpp>
#include <cstring>
#include <map>

#include "tests/test_util.h"
#include "wtx/coordinator.h"
#include "wtx/inproc_transport.h"

using namespace wtx;
using namespace wtx::testing;

namespace {

// The engine: one heap buffer per parameter, which it may replace at any time.
struct Engine {
  std::vector<std::unique_ptr<std::vector<uint8_t>>> bufs;
  std::vector<bool> freed;
  std::map<uint32_t, uint32_t> alias;  // parameter -> the parameter whose buffer it uses
  explicit Engine(const Manifest& m) {
    for (const auto& p : m.params()) {
      bufs.push_back(std::make_unique<std::vector<uint8_t>>(p.num_bytes(), 0));
      freed.push_back(false);
    }
  }
  // A new buffer for parameter i holding `bytes`; the old one is freed.
  void Reallocate(uint32_t i, std::vector<uint8_t> bytes) {
    bufs[i] = std::make_unique<std::vector<uint8_t>>(std::move(bytes));
  }
};

class EngineResolver : public StorageResolver {
 public:
  explicit EngineResolver(Engine* e) : e_(e) {}
  Status Resolve(std::span<const uint32_t> params, std::span<ParamStorage> out) override {
    for (size_t k = 0; k < params.size(); ++k) {
      const uint32_t i = e_->alias.count(params[k]) ? e_->alias.at(params[k]) : params[k];
      const auto& b = *e_->bufs[i];
      out[k] = ParamStorage{reinterpret_cast<uint64_t>(b.data()), b.size(), 0,
                            e_->freed[params[k]] ? "offloaded" : ""};
    }
    return Status::OK();
  }

 private:
  Engine* e_;
};

struct OneRank {
  TempDir dir;
  ManifestPtr m = SmallManifest();
  Engine engine{*m};
  std::unique_ptr<Participant> p;
  InProcTransport transport{1};
  std::unique_ptr<Coordinator> c;

  OneRank() {
    std::vector<std::span<uint8_t>> spans;
    for (auto& b : engine.bufs) spans.emplace_back(b->data(), b->size());
    ParticipantOptions o;
    o.journal_dir = dir.path() + "/rank0";
    o.kernel_identity = "k1";
    o.memory = NewBorrowedLiveMemory(*m, spans).value();
    o.storage_resolver = std::make_shared<EngineResolver>(&engine);
    p = Participant::Open(o, m).value();
    transport.SetParticipant(0, p.get());
    CoordinatorOptions co;
    co.journal_dir = dir.path() + "/coord";
    c = Coordinator::Open(co, &transport).value();
  }

  CommitOutcome Full(const std::string& tx, uint32_t seed) {
    BeginOutcome b = c->Begin(Req(tx, TxKind::kFull));
    if (!b.status.ok()) {
      CommitOutcome o;
      o.status = b.status;
      return o;
    }
    for (const auto& ps : m->params()) {
      auto bytes = Pattern(*m, ps.name, WholeBox(ps.shape), seed);
      WritePiece w{ps.name, "", WholeBox(ps.shape), bytes.data(), bytes.size()};
      REQUIRE(p->Write({&w, 1}).ok());
    }
    REQUIRE(p->Refresh("*").ok());
    return c->Commit(tx);
  }
};

}  // namespace

TEST_CASE("ReallocatedParameterIsRefusedThenRebound") {
  OneRank r;
  REQUIRE(r.Full("t1", 1).decision == Decision::kCommit);
  REQUIRE(r.p->status().serving);
  const uint32_t kv = *r.m->FindParam("kv_b");
  // The engine re-lays the parameter out into a new buffer with the same bytes.
  r.engine.Reallocate(kv, *r.engine.bufs[kv]);
  RankStatus st = r.p->status();
  CHECK_FALSE(st.serving);
  CHECK(st.dirty);
  CHECK(st.storage_moved == std::vector<std::string>{"kv_b"});
  // Every phase refuses, naming the parameter; nothing is written to the freed buffer.
  BeginOutcome b = r.c->Begin(Req("t2", TxKind::kFull));
  REQUIRE(b.status.code() == ErrorCode::kStorageMoved);
  CHECK(b.status.message().find("'kv_b'") != std::string::npos);
  CHECK(r.p->Verify().status().code() == ErrorCode::kStorageMoved);
  // On the record: the rank's journal names the move, the coordinator's the refused begin.
  CommandResult log = RunCommand(std::string(WTX_BINARY) + " log " + r.dir.path() + "/rank0");
  CHECK(log.out.find("STORAGE_MOVED") != std::string::npos);
  CHECK(log.out.find("'kv_b': moved from") != std::string::npos);
  CommandResult clog = RunCommand(std::string(WTX_BINARY) + " log " + r.dir.path() + "/coord");
  CHECK(clog.out.find("refused") != std::string::npos);
  CHECK(clog.out.find("E_STORAGE_MOVED") != std::string::npos);
  // Rebind adopts it; only a verify that proves the bytes serves again.
  auto changes = r.p->Rebind({});
  REQUIRE(changes.ok());
  REQUIRE(changes->size() == 1);
  CHECK(changes->front().param == "kv_b");
  CHECK(changes->front().now.address == reinterpret_cast<uint64_t>(r.engine.bufs[kv]->data()));
  CHECK_FALSE(r.p->status().serving);
  auto rep = r.p->Verify();
  REQUIRE(rep.ok());
  CHECK(rep->ok);
  CHECK(r.p->status().serving);
  CHECK_FALSE(r.p->status().dirty);
}

TEST_CASE("ReallocationWithOtherBytesServesOnlyAfterAFullCommit") {
  OneRank r;
  REQUIRE(r.Full("t1", 1).decision == Decision::kCommit);
  const uint32_t kv = *r.m->FindParam("kv_b");
  r.engine.Reallocate(kv, std::vector<uint8_t>(r.engine.bufs[kv]->size(), 7));
  REQUIRE(r.p->Rebind({}).ok());
  auto rep = r.p->Verify();
  REQUIRE(rep.ok());
  CHECK_FALSE(rep->ok);
  CHECK_FALSE(r.p->status().serving);
  // A partial update needs a clean base: refused.
  BeginRequest partial = Req("t2", TxKind::kPartial, r.p->status().version.value_or(""));
  partial.modules = {"attn"};
  CHECK(r.c->Begin(partial).status.code() == ErrorCode::kDirty);
  REQUIRE(r.Full("t3", 3).decision == Decision::kCommit);
  CHECK(r.p->status().serving);
  // The new buffer holds the committed bytes: the engine serves what wtx vouched for.
  CHECK(*r.engine.bufs[kv] == Pattern(*r.m, "kv_b", WholeBox(r.m->params()[kv].shape), 3));
}

TEST_CASE("MoveDuringATransactionVotesNoAndIsJournaled") {
  OneRank r;
  REQUIRE(r.Full("t1", 1).decision == Decision::kCommit);
  REQUIRE(r.c->Begin(Req("t2", TxKind::kFull)).status.ok());
  const uint32_t qkv = *r.m->FindParam("qkv");
  r.engine.Reallocate(qkv, *r.engine.bufs[qkv]);
  auto bytes = Pattern(*r.m, "qkv", WholeBox(r.m->params()[qkv].shape), 2);
  WritePiece w{"qkv", "", WholeBox(r.m->params()[qkv].shape), bytes.data(), bytes.size()};
  Status s = r.p->Write({&w, 1});
  CHECK(s.code() == ErrorCode::kStorageMoved);
  CommitOutcome o = r.c->Commit("t2");
  CHECK(o.decision == Decision::kAbort);
  REQUIRE(o.votes.size() == 1);
  CHECK(o.votes[0].vote.error == ErrorCode::kStorageMoved);
  // Durable: a reopened participant over the engine's current buffers is dirty.
  r.c.reset();
  r.p.reset();
  std::vector<std::span<uint8_t>> spans;
  for (auto& b : r.engine.bufs) spans.emplace_back(b->data(), b->size());
  ParticipantOptions o2;
  o2.journal_dir = r.dir.path() + "/rank0";
  o2.kernel_identity = "k1";
  o2.memory = NewBorrowedLiveMemory(*r.m, spans).value();
  auto p2 = Participant::Open(o2, r.m);
  REQUIRE(p2.ok());
  CHECK((*p2)->status().dirty);
}

TEST_CASE("FreedStorageIsNeverTouchedAndCannotBeRebound") {
  OneRank r;
  REQUIRE(r.Full("t1", 1).decision == Decision::kCommit);
  const uint32_t norm = *r.m->FindParam("norm");
  r.engine.Reallocate(norm, {});  // freed: zero bytes
  r.engine.freed[norm] = true;
  auto rebind = r.p->Rebind({});
  REQUIRE(rebind.status().code() == ErrorCode::kStorageMoved);
  CHECK(rebind.status().message().find("'norm'") != std::string::npos);
  CHECK(rebind.status().message().find("needs 32") != std::string::npos);
  CHECK(r.p->CheckStorage().code() == ErrorCode::kStorageMoved);
  CHECK_FALSE(r.p->status().serving);
}

TEST_CASE("MoveDuringARollbackTransactionAbortsDirtyWithoutTouchingTheNewStorage") {
  OneRank r;
  REQUIRE(r.Full("t1", 1).decision == Decision::kCommit);
  BeginRequest partial = Req("t2", TxKind::kPartial, r.p->status().version.value_or(""));
  partial.modules = {"attn"};
  partial.rollback = true;
  REQUIRE(r.c->Begin(partial).status.ok());
  const uint32_t kv = *r.m->FindParam("kv_b");
  const auto box = WholeBox(r.m->params()[kv].shape);
  auto bytes = Pattern(*r.m, "kv_b", box, 2);
  WritePiece w{"kv_b", "", box, bytes.data(), bytes.size()};
  REQUIRE(r.p->Write({&w, 1}).ok());
  // The engine re-lays kv_b out into new storage holding other bytes, then the update aborts:
  // the before-images must not be written into the new storage (nor the freed one).
  std::vector<uint8_t> fresh(r.engine.bufs[kv]->size(), 9);
  r.engine.Reallocate(kv, fresh);
  REQUIRE(r.c->Abort("t2").status.ok());
  CHECK(*r.engine.bufs[kv] == fresh);
  RankStatus st = r.p->status();
  CHECK(st.dirty);
  CHECK_FALSE(st.serving);
  CHECK(st.storage_moved == std::vector<std::string>{"kv_b"});
  // The rank is dirty, not crashed: it adopts the storage and a full update serves again.
  REQUIRE(r.p->Rebind({}).ok());
  REQUIRE(r.Full("t3", 3).decision == Decision::kCommit);
  CHECK(r.p->status().serving);
  // The journal replays to the same state (the OUTCOME's derived flags agree).
  r.c.reset();
  r.p.reset();
  CommandResult check = RunCommand(std::string(WTX_BINARY) + " check " + r.dir.path() + "/rank0");
  INFO(check.out);
  CHECK(check.code == 0);
}

TEST_CASE("ParametersSharingStorageAreRefusedAtOpenNamingBoth") {
  // Issue 45, 3: a tied lm_head/embedding under a manifest that lists both, or overlapping
  // views: one write would land in both, and wtx would vouch for bytes the engine no longer
  // holds. The rank is refused when it opens.
  TempDir dir;
  ManifestPtr m = SmallManifest();
  size_t total = 0;
  for (const auto& p : m->params()) total += static_cast<size_t>(p.num_bytes());
  std::vector<uint8_t> arena(total, 0);
  for (int overlap : {0, 1}) {
    INFO((overlap ? "overlapping views" : "the same storage"));
    std::vector<std::span<uint8_t>> spans;
    size_t off = 0;
    for (const auto& p : m->params()) {
      spans.emplace_back(arena.data() + off, static_cast<size_t>(p.num_bytes()));
      off += static_cast<size_t>(p.num_bytes());
    }
    // The second parameter starts inside the first (overlap) or at the same address (tied).
    const size_t shift = overlap ? 1 : 0;
    spans[1] = std::span<uint8_t>(arena.data() + shift, spans[1].size());
    ParticipantOptions o;
    o.journal_dir = dir.path() + "/rank" + std::to_string(overlap);
    o.memory = NewBorrowedLiveMemory(*m, spans).value();
    auto p = Participant::Open(o, m);
    REQUIRE_FALSE(p.ok());
    CHECK(p.status().code() == ErrorCode::kInvalidArgument);
    CHECK(p.status().message().find("'" + m->params()[0].name + "'") != std::string::npos);
    CHECK(p.status().message().find("'" + m->params()[1].name + "'") != std::string::npos);
    CHECK(p.status().message().find("share storage") != std::string::npos);
  }
  // Adjacent, disjoint buffers are fine.
  CHECK(
      CheckStorageDisjoint(std::vector<StorageExtent>{{"a", 0x1000, 16}, {"b", 0x1010, 16}}).ok());
  CHECK_FALSE(CheckStorageDisjoint(std::vector<StorageExtent>{
                                       {"a", 0x1000, 64}, {"b", 0x1020, 16}, {"c", 0x2000, 1}})
                  .ok());
}

TEST_CASE("RebindOntoStorageAnotherParameterHoldsIsRefused") {
  OneRank r;
  REQUIRE(r.Full("t1", 1).decision == Decision::kCommit);
  // The engine re-ties parameter 1 to parameter 0's (larger) buffer after a reload.
  const size_t big = std::max(r.engine.bufs[0]->size(), r.engine.bufs[1]->size());
  r.engine.Reallocate(0, std::vector<uint8_t>(big, 0));
  r.engine.alias[1] = 0;
  auto rebound = r.p->Rebind({});
  REQUIRE_FALSE(rebound.ok());
  const std::string& msg = rebound.status().message();
  CHECK(msg.find("share storage") != std::string::npos);
  CHECK(msg.find("'" + r.m->params()[1].name + "'") != std::string::npos);
  CHECK(msg.find("nothing was rebound") != std::string::npos);
  CHECK_FALSE(r.p->status().serving);
  // Untied again: the rebind goes through, and a full update serves.
  r.engine.alias.clear();
  REQUIRE(r.p->Rebind({}).ok());
  REQUIRE(r.Full("t2", 2).decision == Decision::kCommit);
  CHECK(r.p->status().serving);
}

TEST_CASE("FullUpdateWithRollbackRestoresTheCommittedVersionOnAbort") {
  // Issue 43's serving gate, restore: a full update keeps before-images too (within the
  // budget) when the rank holds a clean committed version; an abort puts it back and the rank
  // serves it on.
  OneRank r;
  const CommitOutcome first = r.Full("t1", 1);
  REQUIRE(first.decision == Decision::kCommit);
  std::vector<std::vector<uint8_t>> before;
  for (const auto& b : r.engine.bufs) before.push_back(*b);
  BeginRequest full = Req("t2", TxKind::kFull);
  full.rollback = true;
  REQUIRE(r.c->Begin(full).status.ok());
  const auto& p0 = r.m->params()[0];
  auto bytes = Pattern(*r.m, p0.name, WholeBox(p0.shape), 2);
  WritePiece w{p0.name, "", WholeBox(p0.shape), bytes.data(), bytes.size()};
  REQUIRE(r.p->Write({&w, 1}).ok());
  CHECK(*r.engine.bufs[0] != before[0]);
  REQUIRE(r.c->Abort("t2").status.ok());
  for (size_t i = 0; i < before.size(); ++i) CHECK(*r.engine.bufs[i] == before[i]);
  RankStatus st = r.p->status();
  CHECK_FALSE(st.dirty);
  CHECK(st.serving);
  CHECK(st.version == first.version);
}
