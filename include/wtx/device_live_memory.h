// Live memory the host cannot address: a rank's parameters in GPU memory, operated on by the
// kernels of gpu.h (copy in, scatter with before-images, chunk digests). The participant uses it
// through LiveMemory (live_memory.h) and produces the same versions, bit for bit, as with host
// memory: a mixed group of CPU and GPU ranks agrees.
//
//  * NewDeviceLiveMemory: one cudaMalloc'd, zeroed buffer per parameter on the current CUDA
//    device. Stores are synchronous host-to-device copies, scatters and digests run the
//    kernels. Only in builds with the CUDA kernels (WTX_HAVE_CUDA); elsewhere, or without a
//    usable device, it returns an error saying why. Discard() zeroes every buffer.
//  * NewReferenceDeviceLiveMemory: the same contract executed by the kernels' CPU references
//    (ScatterRef, ChunkDigestsRef) on host buffers that it does not expose (Param() is empty,
//    HostAddressable() false). It runs the participant's device path on any machine: the tests
//    and `wtx sim --memory reference-device` use it.
//
// Thread-safety: as LiveMemory (not synchronized; the participant serializes access).
#pragma once

#include <memory>
#include <string>

#include "wtx/live_memory.h"
#include "wtx/manifest.h"
#include "wtx/status.h"

namespace wtx {

Result<std::unique_ptr<LiveMemory>> NewDeviceLiveMemory(const Manifest& manifest);
std::unique_ptr<LiveMemory> NewReferenceDeviceLiveMemory(const Manifest& manifest);

// Where a rank's live bytes are, by name: "host" (default), "reference-device", "device".
enum class LiveMemoryKind { kHost, kReferenceDevice, kDevice };
Result<LiveMemoryKind> ParseLiveMemoryKind(const std::string& name);
const char* LiveMemoryKindName(LiveMemoryKind kind);
// A new LiveMemory of `kind` for `manifest` (null for kHost: the participant's default).
Result<std::shared_ptr<LiveMemory>> NewLiveMemory(LiveMemoryKind kind, const Manifest& manifest);

}  // namespace wtx
