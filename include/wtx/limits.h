// Documented bounds on untrusted numbers (manifests, scenarios, the control protocol, CLI
// flags). Anything beyond them is refused with an error naming the field or flag; within them
// every size wtx derives (element and byte counts, box volumes, offsets) fits in int64_t
// without overflow. docs/manifest.md and docs/cli.md list them.
//
// Thread-safety: constants.
#pragma once

#include <cstddef>
#include <cstdint>

namespace wtx {

// Ranks of one transaction group (coordinator --ranks, scenario "ranks", rank ids < this).
inline constexpr int kMaxRanks = 4096;

// Threads of a coordinator's fan-out pool (CoordinatorOptions::fan_out_threads).
inline constexpr int kMaxFanOutThreads = 4096;
// ParticipantOptions::threads and landing_hash_threads: data-path threads of one rank.
inline constexpr int kMaxDataThreads = 256;

// Dimensions of a parameter, source tensor or box.
inline constexpr size_t kMaxTensorDims = 16;

// Bytes of one parameter or one source tensor (256 TiB): far above any real tensor, far below
// the 2^63 at which byte offsets would overflow.
inline constexpr int64_t kMaxTensorBytes = int64_t{1} << 48;

// Bytes of all parameters of one manifest (4 PiB).
inline constexpr int64_t kMaxManifestBytes = int64_t{1} << 52;

// Counts read from a Hugging Face config.json, bounded before anything is sized from them (a
// config with 10^9 layers must be refused, not allocated): decoder layers, experts per layer,
// and their product (the stacked-expert parameters of a rank grow with it).
inline constexpr int64_t kMaxLayers = int64_t{1} << 12;
inline constexpr int64_t kMaxExperts = int64_t{1} << 16;
inline constexpr int64_t kMaxExpertLayers = int64_t{1} << 22;

// Parts of one delta patch (PatchRequest::parts).
inline constexpr int kMaxPatchParts = 1 << 16;

// Largest frame a TCP endpoint may be configured to accept (the length prefix is 32 bits),
// and the smallest (a frame must hold a handshake and an error reply).
inline constexpr size_t kMaxFrameBytesLimit = (size_t{1} << 32) - 1;
inline constexpr size_t kMinFrameBytesLimit = 4096;

// Longest timeout, wait or backoff accepted anywhere (one day, in milliseconds).
inline constexpr int64_t kMaxTimeoutMs = int64_t{24} * 3600 * 1000;

}  // namespace wtx
