// Feeding a participant from a safetensors checkpoint: each rank reads, by source name, the
// tensors its manifest names and writes its own slices (Participant::WriteSource), converting
// dtypes only where the conversion is exact in meaning (dtype.h).
//
// Thread-safety: pure functions over their arguments; the participant serializes its calls.
#pragma once

#include <functional>

#include <string>
#include <vector>

#include "wtx/manifest.h"
#include "wtx/participant.h"
#include "wtx/safetensors.h"
#include "wtx/status.h"

namespace wtx {

// The checkpoint tensors one rank's manifest reads, sorted, each once.
std::vector<std::string> SourcesOfManifest(const Manifest& manifest);

// Checks every tensor `manifest` reads that `checkpoint` holds: shape equal to the manifest's
// source_shape, dtype equal to the live dtype or exactly convertible to it. Returns the
// sources the checkpoint lacks (not an error here: a transaction reports them as missing
// coverage). Errors name the file and the tensor.
Result<std::vector<std::string>> CheckCheckpointForManifest(const SafetensorsCheckpoint& checkpoint,
                                                            const Manifest& manifest);

struct SliceLoadReport {
  int shards = 0;                    // shards written
  uint64_t bytes = 0;                // source bytes read
  std::vector<std::string> missing;  // sources the checkpoint lacks
};

// Writes every source of the participant's manifest that `checkpoint` holds (checked as
// above first: on a check error nothing is written). REQUIRES: an active transaction.
// `on_read` (optional) is called after each source with the bytes read of it (`wtx load`'s
// progress).
Result<SliceLoadReport> WriteCheckpointSlices(
    const SafetensorsCheckpoint& checkpoint, Participant& participant,
    const std::function<void(uint64_t bytes)>& on_read = nullptr);

// The bytes WriteCheckpointSlices reads of `checkpoint` for `manifest` (what `on_read` adds up
// to).
uint64_t CheckpointBytesFor(const SafetensorsCheckpoint& checkpoint, const Manifest& manifest);

}  // namespace wtx
