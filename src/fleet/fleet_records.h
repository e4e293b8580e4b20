// The values the fleet registry keeps in etcd (wtx/fleet.h, docs/fleet.md), each a JSON object
// with its own "format" and "v", one encoder and one strict decoder each (src/etcd/
// stored_record.h), and the keys they live under:
//
//   PREFIX/fleet/<fleet>/policy                  {"format":"wtx-fleet-policy","v":1,
//                                                 "max_lag":N|null,"quorum":N,"lineage":".."}
//   PREFIX/fleet/<fleet>/newest                  {"format":"wtx-fleet-step","v":1,"lineage",
//   PREFIX/fleet/<fleet>/published                "step","version","replica","time_micros"}
//   PREFIX/fleet/<fleet>/ranks/<replica>/<rank>  {"format":"wtx-fleet-rank","v":1,"replica",
//                                                 "rank","world","lineage","step"|null,
//                                                 "version"|null,"state","reason","time_micros",
//                                                 "control"}
//
// A rank's key is attached to its member's lease; the others are not leased.
//
// Thread-safety: pure functions and values.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "wtx/fleet.h"
#include "wtx/status.h"

namespace wtx::fleet {

// One rank of one replica as its member registers it.
struct RankRecord {
  std::string replica;
  int rank = 0;
  int world = 0;  // 0: unknown
  std::string lineage;
  std::optional<int64_t> step;
  std::optional<std::string> version;
  ReplicaState state = ReplicaState::kHeld;
  std::string reason;  // why it does not serve; "" when it does
  int64_t time_micros = 0;
  std::string control;  // HOST:PORT of its rank control ("" for none): catch-up reads there

  bool operator==(const RankRecord&) const = default;
};

// A step of the fleet's lineage: the newest one committed, the newest one published.
struct StepMark {
  std::string lineage;
  int64_t step = 0;
  std::string version;
  std::string replica;  // the replica that raised it
  int64_t time_micros = 0;

  bool operator==(const StepMark&) const = default;
};

// Where the fleet's keys live.
struct FleetKeys {
  std::string base;  // "PREFIX/fleet/<fleet>/"

  FleetKeys(std::string_view prefix, std::string_view fleet);
  std::string policy() const { return base + "policy"; }
  std::string newest() const { return base + "newest"; }
  std::string published() const { return base + "published"; }
  std::string ranks() const { return base + "ranks/"; }
  std::string rank(std::string_view replica, int rank) const;
};

// kInvalidArgument "WHAT 'NAME': ..." unless `name` is 1 to 128 characters of [A-Za-z0-9._-].
Status CheckFleetName(std::string_view what, std::string_view name);

// "serving", ... and back (nullopt for an unknown name).
std::optional<ReplicaState> ReplicaStateFromName(std::string_view name);

Result<std::string> EncodePolicy(const FleetPolicy& policy);
Result<FleetPolicy> DecodePolicy(std::string_view value);
Result<std::string> EncodeStepMark(const StepMark& mark);
Result<StepMark> DecodeStepMark(std::string_view value);
Result<std::string> EncodeRankRecord(const RankRecord& record);
Result<RankRecord> DecodeRankRecord(std::string_view value);

}  // namespace wtx::fleet
