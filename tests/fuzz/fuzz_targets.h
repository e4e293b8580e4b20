// Fuzz entry points, shared by the libFuzzer executables (fuzz_main.cc, built with
// -DWTX_FUZZ=ON and clang) and by fuzz_regression_test.cc, which replays every input under
// tests/fuzz/regressions/<target>/ in the normal build.
//
// Each target feeds one parser arbitrary bytes and checks properties that must hold for every
// input: no crash, no exception escaping (wtx APIs do not throw), and round trips (a manifest
// that parses re-parses from its own JSON with the same fingerprint; a record that decodes
// re-encodes to a value that decodes to the same record).
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <string_view>

#include <xxhash.h>
#include <nlohmann/json.hpp>

#include "journal/record.h"
#include "src/conformance/scenario.h"
#include "src/txn/participant_state.h"
#include "src/util/cbor.h"
#include "wtx/limits.h"
#include "wtx/manifest.h"
#include "wtx/safetensors.h"

namespace wtx::fuzz {

// A broken property: print and abort (libFuzzer records the input as a crash).
inline void Violated(const char* what) {
  std::fprintf(stderr, "fuzz property violated: %s\n", what);
  std::abort();
}

// A built manifest's sizes are exact: every parameter's byte count, computed in 128-bit
// arithmetic, is within kMaxTensorBytes and equal to num_bytes() (an overflow that wrapped to
// a small size would be accepted and corrupt memory on the first write).
inline void CheckManifestSizes(const Manifest& m) {
  __int128 total = 0;
  for (const ParamSpec& p : m.params()) {
    __int128 bytes = static_cast<__int128>(DTypeSize(p.dtype));
    for (int64_t d : p.shape) {
      if (d < 0) Violated("a built manifest has no negative extent");
      bytes *= d;
      if (bytes > static_cast<__int128>(kMaxTensorBytes)) break;
    }
    if (bytes > static_cast<__int128>(kMaxTensorBytes)) {
      Violated("a built manifest's parameters are at most kMaxTensorBytes");
    }
    if (bytes != p.num_bytes()) Violated("a parameter's num_bytes() is exact");
    total += bytes;
  }
  if (total > static_cast<__int128>(kMaxManifestBytes) || total != m.TotalBytes()) {
    Violated("a built manifest's total size is exact and within kMaxManifestBytes");
  }
}

// Input: JSON text of a `wtx sim` scenario. Files named by the scenario are never read (a
// fuzzer could name /dev/zero): inputs whose model names a file are skipped.
inline void FuzzScenario(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return;
  if (j.is_object() && j.contains("model") && j["model"].is_object() &&
      (j["model"].contains("manifest_file") || j["model"].contains("hf_config"))) {
    return;
  }
  auto sc = sim::ParseScenario(j, "/nonexistent-wtx-fuzz");
  if (!sc.ok()) return;
  if (static_cast<size_t>(sc.value().ranks) != sc.value().manifests.size()) {
    Violated("a parsed scenario has one manifest per rank");
  }
  if (sc.value().ranks < 1 || sc.value().ranks > kMaxRanks) {
    Violated("a parsed scenario has 1..kMaxRanks ranks");
  }
  for (const auto& m : sc.value().manifests) CheckManifestSizes(*m);
}

// Input: JSON text of a manifest.
inline void FuzzManifest(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  auto m = ParseManifestText(text);
  if (!m.ok()) return;
  CheckManifestSizes(*m.value());
  auto again = ParseManifest(m.value()->ToJson());
  if (!again.ok()) Violated("a parsed manifest re-parses from its own JSON");
  if (again.value()->Fingerprint() != m.value()->Fingerprint()) {
    Violated("re-parsing a manifest keeps its fingerprint");
  }
}

// Input: a stored journal value ("WTX1" | xxh3 | CBOR, or "WTXW" | xxh3 | binary WRITE) when
// it starts with 'W'; a binary WRITE payload after a selector byte 'B', which gets a valid
// header first; otherwise one selector byte and a bare CBOR payload, which gets a valid header
// first: so that the fuzzer reaches both decoders and the record replay past the checksum.
inline void FuzzRecord(const uint8_t* data, size_t size) {
  std::string value(reinterpret_cast<const char*>(data), size);
  if (size > 0 && data[0] == 'B') {
    const std::string payload = value.substr(1);
    const uint64_t h = XXH3_64bits(payload.data(), payload.size());
    value = "WTXW";
    for (int i = 0; i < 8; ++i) value.push_back(static_cast<char>((h >> (8 * i)) & 0xff));
    value += payload;
  } else if (size > 0 && data[0] != 'W') {
    std::optional<nlohmann::json> payload = ParseCbor(data + 1, size - 1);
    if (!payload) return;
    value = EncodeValue(*payload);
  }
  auto rec = DecodeValue(value, "fuzz");
  if (!rec.ok()) return;
  auto again = DecodeValue(EncodeValue(rec.value()), "fuzz");
  if (!again.ok() || again.value() != rec.value()) Violated("a decoded record round-trips");
  // Replay it onto an empty journal and onto one with an active transaction: a record with a
  // valid checksum but wrong content is E_JOURNAL_CORRUPT, never a crash.
  ParticipantState active = InitialParticipantState(0);
  active.active = ActiveTxState{};
  active.active->tx = "t1";
  const bool binary = IsWriteRecordValue(value);
  for (const std::optional<ParticipantState>& state :
       {std::optional<ParticipantState>(),
        std::optional<ParticipantState>(InitialParticipantState(0)),
        std::optional<ParticipantState>(active)}) {
    ParticipantReplay by_json(state);
    Status js = by_json.Apply(rec.value());
    if (!js.ok() && js.code() != ErrorCode::kJournalCorrupt) {
      Violated("a record replay fails only as corruption");
    }
    // A record that decodes re-encodes to a record that decodes to the same.
    if (auto typed = DecodeParticipantRecord(rec.value()); typed.ok()) {
      JournalRecord again = ToJournalRecord(typed.value());
      if (const auto* j = std::get_if<nlohmann::json>(&again)) {
        auto round = DecodeParticipantRecord(*j);
        if (!round.ok()) Violated("an encoded record decodes");
      }
    }
    if (!binary) continue;
    // A binary WRITE replays without JSON to the state its JSON form gives.
    auto write = DecodeWriteRecord(value, "fuzz");
    if (!write.ok()) Violated("a binary WRITE record that decodes as JSON decodes as a view");
    ParticipantReplay fast(state);
    Status s = fast.ApplyWrite(write.value().seq, write.value().tx);
    if (s.ok() != js.ok() || (s.ok() && fast.state() != by_json.state())) {
      Violated("a binary WRITE replays as its JSON form");
    }
  }
}

// Input: a whole safetensors file (8-byte header length, JSON header, data). A header that
// parses describes tensors inside the data section, of the byte size their shape and dtype
// need, pairwise disjoint.
inline void FuzzSafetensors(const uint8_t* data, size_t size) {
  auto h = ParseSafetensorsHeader({data, size}, "fuzz.safetensors");
  if (!h.ok()) return;
  const SafetensorsHeader& hd = h.value();
  if (hd.data_offset != 8 + hd.header_bytes || hd.data_offset > size) {
    Violated("the data section starts inside the file");
  }
  const uint64_t data_size = size - hd.data_offset;
  uint64_t furthest = 0;
  for (const SafetensorsEntry& t : hd.tensors) {
    if (t.begin > t.end || t.end > data_size) Violated("a tensor lies inside the data section");
    uint64_t elements = 1;
    for (int64_t d : t.shape) elements *= static_cast<uint64_t>(d);
    if (elements * DTypeSize(t.dtype) != t.end - t.begin)
      Violated("a tensor's bytes fit its shape");
    if (t.end > t.begin && t.begin < furthest) Violated("tensors do not overlap");
    if (t.end > furthest) furthest = t.end;
  }
}

}  // namespace wtx::fuzz
