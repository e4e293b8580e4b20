// wtx embedded in an inference engine, through the installed package only (find_package(wtx)).
//
// The "engine" owns the live weights of two tensor-parallel ranks (plain host buffers here;
// they would be its model tensors). Each rank opens a wtx::Participant over those buffers
// (borrowed live memory: wtx never allocates or frees them) with a manifest generated from a
// Hugging Face config.json; an in-process coordinator drives one full weight-update
// transaction over both ranks and commits it. The program prints the outcome, checks that the
// engine's own buffers hold the new weights and that both ranks serve the committed version,
// and exits non-zero otherwise.
//
// Usage: wtx_embed CONFIG_JSON WORK_DIR   (WORK_DIR receives the journals; it must be empty
// or absent: a second run would find the committed version and refuse nothing, but would
// print a different history).
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "wtx/coordinator.h"
#include "wtx/hf_manifest.h"
#include "wtx/inproc_transport.h"
#include "wtx/live_memory.h"
#include "wtx/participant.h"
#include "wtx/status.h"

namespace {

constexpr int kRanks = 2;

int Fail(const std::string& what, const wtx::Status& s) {
  std::fprintf(stderr, "wtx_embed: %s: %s\n", what.c_str(), s.ToString().c_str());
  return 1;
}

// The engine's side of one rank: its manifest and the buffers it owns.
struct EngineRank {
  wtx::ManifestPtr manifest;
  std::vector<std::vector<uint8_t>> weights;  // one buffer per parameter, manifest order
  std::unique_ptr<wtx::Participant> participant;
};

// The new weights of parameter `index` on `rank` as a trainer would send them: any bytes in
// the parameter's dtype (a deterministic pattern here).
std::vector<uint8_t> NewWeights(int rank, size_t index, size_t bytes) {
  std::vector<uint8_t> out(bytes);
  for (size_t i = 0; i < bytes; ++i) {
    out[i] = static_cast<uint8_t>((i * 31 + index * 7 + static_cast<size_t>(rank)) & 0x3f);
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: %s CONFIG_JSON WORK_DIR\n", argv[0]);
    return 2;
  }
  const std::string config = argv[1];
  const std::filesystem::path work = argv[2];

  // 1. Each rank: manifest from the HF config, buffers owned by the engine, a participant
  //    over them.
  std::vector<EngineRank> ranks(kRanks);
  wtx::InProcTransport transport(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    EngineRank& er = ranks[r];
    wtx::HfManifestOptions mo;
    mo.tp = kRanks;
    mo.rank = r;
    auto manifest = wtx::ManifestFromHfConfigFile(config, mo);
    if (!manifest.ok()) return Fail("manifest of rank " + std::to_string(r), manifest.status());
    er.manifest = *manifest;

    std::vector<std::span<uint8_t>> spans;
    for (const auto& p : er.manifest->params()) {
      er.weights.emplace_back(static_cast<size_t>(p.num_bytes()));
      spans.emplace_back(er.weights.back());
    }
    auto memory = wtx::NewBorrowedLiveMemory(*er.manifest, std::move(spans));
    if (!memory.ok()) return Fail("live memory of rank " + std::to_string(r), memory.status());

    wtx::ParticipantOptions po;
    po.rank = r;
    po.journal_dir = (work / ("rank" + std::to_string(r))).string();
    po.memory = std::move(*memory);
    auto participant = wtx::Participant::Open(po, er.manifest);
    if (!participant.ok()) return Fail("participant " + std::to_string(r), participant.status());
    er.participant = std::move(*participant);
    transport.SetParticipant(r, er.participant.get());
  }

  // 2. The coordinator, in the same process.
  wtx::CoordinatorOptions co;
  co.journal_dir = (work / "coordinator").string();
  auto coordinator = wtx::Coordinator::Open(co, &transport);
  if (!coordinator.ok()) return Fail("coordinator", coordinator.status());

  // 3. One full update: begin everywhere, every rank writes all its parameters, refreshes
  //    its derived state, then the coordinator commits (two-phase, journaled).
  wtx::BeginRequest begin;
  begin.tx = "update-1";
  begin.kind = wtx::TxKind::kFull;
  wtx::BeginOutcome began = (*coordinator)->Begin(begin);
  if (!began.status.ok()) return Fail("begin", began.status);

  std::vector<std::vector<std::vector<uint8_t>>> sent(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    EngineRank& er = ranks[r];
    const auto& params = er.manifest->params();
    std::vector<wtx::WritePiece> pieces;
    for (size_t i = 0; i < params.size(); ++i) {
      sent[r].push_back(NewWeights(r, i, static_cast<size_t>(params[i].num_bytes())));
      wtx::WritePiece piece;
      piece.param = params[i].name;
      piece.data = sent[r].back().data();
      piece.bytes = sent[r].back().size();
      pieces.push_back(std::move(piece));
    }
    wtx::Status s = er.participant->Write(pieces);
    if (!s.ok()) return Fail("write on rank " + std::to_string(r), s);
    auto refreshed = er.participant->Refresh("*");
    if (!refreshed.ok()) return Fail("refresh on rank " + std::to_string(r), refreshed.status());
  }

  wtx::CommitOutcome outcome = (*coordinator)->Commit(begin.tx);
  if (!outcome.status.ok()) return Fail("commit", outcome.status);
  if (outcome.decision != wtx::Decision::kCommit) {
    std::fprintf(stderr, "wtx_embed: %s was not committed\n", begin.tx.c_str());
    return 1;
  }
  std::printf("transaction %s: %s, version %s\n", begin.tx.c_str(),
              std::string(wtx::DecisionName(*outcome.decision)).c_str(), outcome.version.c_str());

  // 4. The engine's own buffers hold the new weights, and every rank serves the version.
  for (int r = 0; r < kRanks; ++r) {
    const EngineRank& er = ranks[r];
    for (size_t i = 0; i < er.weights.size(); ++i) {
      if (er.weights[i] != sent[r][i]) {
        std::fprintf(stderr, "wtx_embed: rank %d parameter %s: engine buffer differs\n", r,
                     er.manifest->params()[i].name.c_str());
        return 1;
      }
    }
    wtx::RankStatus st = er.participant->status();
    std::printf("rank %d: %zu parameters, %lld bytes, serving=%s, version %s\n", r,
                er.weights.size(), static_cast<long long>(er.manifest->TotalBytes()),
                st.serving ? "yes" : "no", st.version.value_or("(none)").c_str());
    if (!st.serving || st.version != outcome.version) {
      std::fprintf(stderr, "wtx_embed: rank %d does not serve the committed version\n", r);
      return 1;
    }
  }
  std::printf("ok\n");
  return 0;
}
