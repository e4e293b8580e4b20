// Test and benchmark hooks of the participant and the coordinator. Not part of the public API
// (include/wtx/ has no trace of them): test harnesses, the simulator, torture and benchmarks
// open their participants and coordinators through these functions; Participant::Open and
// Coordinator::Open are these with no hooks.
//
// Thread-safety: as Participant::Open / Coordinator::Open; the hooks themselves must outlive
// the objects and be thread-safe as src/util/crash_points.h says.
#pragma once

#include <memory>

#include "src/util/crash_points.h"
#include "wtx/coordinator.h"
#include "wtx/participant.h"

namespace wtx {

struct ParticipantHooks {
  CrashPoints* crash_points = nullptr;  // not owned; may be null
  // Benchmarks only (`wtx bench`): Write() checks, records coverage and journals as usual but
  // neither copies nor hashes the bytes, so the version no longer describes the live bytes.
  // Lets the coverage check of a 120 GiB rank be measured without moving 120 GiB.
  bool benchmark_coverage_only = false;
  // Benchmarks only (`wtx bench --only landing`): while *this is true, Landed does not hash
  // the chunks it covers whole and prepare rehashes them all from live memory (how landings
  // were hashed before), so both ways are measured in one run over the same buffers. Not
  // owned; may be null.
  const bool* benchmark_hash_landings_at_prepare = nullptr;
  // Benchmarks only (`wtx bench --only update`): the rank records no metrics, so that the
  // update's cost with metrics is measured against the same update without, in one run.
  bool benchmark_no_metrics = false;
};

struct CoordinatorHooks {
  CrashPoints* crash_points = nullptr;  // not owned; may be null
};

Result<std::unique_ptr<Participant>> OpenParticipantWithHooks(ParticipantOptions options,
                                                              ManifestPtr manifest,
                                                              const ParticipantHooks& hooks);
Result<std::unique_ptr<Coordinator>> OpenCoordinatorWithHooks(const CoordinatorOptions& options,
                                                              Transport* transport,
                                                              const CoordinatorHooks& hooks);

// Waits until the background hashes of landed chunks (ParticipantOptions::landing_hash_threads)
// have finished and are installed, as prepare does: a test that changes landed bytes "after the
// landing" needs the hashing to have read them first. REQUIRES: `participant` was opened by
// this library.
void WaitForLandingHashes(Participant& participant);

}  // namespace wtx
