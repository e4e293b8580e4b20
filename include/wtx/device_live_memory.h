// Live memory the host cannot address: a rank's parameters in GPU memory, operated on by the
// kernels of gpu.h (copy in, scatter with before-images, chunk digests). The participant uses it
// through LiveMemory (live_memory.h) and produces the same versions, bit for bit, as with host
// memory: a mixed group of CPU and GPU ranks agrees.
//
//  * NewDeviceLiveMemory: one cudaMalloc'd, zeroed buffer per parameter on the current CUDA
//    device. Stores are synchronous host-to-device copies, scatters and digests run the
//    kernels. Only in builds with the CUDA kernels (WTX_HAVE_CUDA); elsewhere, or without a
//    usable device, it returns an error saying why. Discard() zeroes every buffer.
//  * NewBorrowedDeviceLiveMemory: the engine's own tensors, by device pointer (no allocation,
//    no copy, no zeroing at creation or open). The engine keeps them alive for the
//    LiveMemory's lifetime. Discard() zeroes them (it models the engine losing them).
//  * Stream: with DeviceLiveMemoryOptions::stream set (a cudaStream_t), every copy and kernel
//    wtx issues is ordered on that stream, and each call synchronizes that stream (not the
//    device) before returning; null: the legacy default stream.
//  * Device sources: Write pieces and patch index/value arrays with BufferLocation::kDevice
//    are device pointers (device-to-device copies; the scatter's arrays go to the host for the
//    checks and back).
//  * NewReferenceDeviceLiveMemory: the same contract executed by the kernels' CPU references
//    (ScatterRef, ChunkDigestsRef) on host buffers that it does not expose (Param() is empty,
//    HostAddressable() false). It runs the participant's device path on any machine: the tests
//    and `wtx sim --memory reference-device` use it.
//
// Thread-safety: as LiveMemory (not synchronized; the participant serializes access).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "wtx/live_memory.h"
#include "wtx/manifest.h"
#include "wtx/status.h"

namespace wtx {

struct DeviceLiveMemoryOptions {
  void* stream = nullptr;  // cudaStream_t; null: the legacy default stream
};

// One engine-owned device tensor: `bytes` bytes at device address `ptr`.
struct DeviceSpan {
  uint64_t ptr = 0;
  size_t bytes = 0;
};

Result<std::unique_ptr<LiveMemory>> NewDeviceLiveMemory(const Manifest& manifest,
                                                        DeviceLiveMemoryOptions options = {});
// spans[i] is parameter i (manifest order); sizes are checked against the manifest.
Result<std::unique_ptr<LiveMemory>> NewBorrowedDeviceLiveMemory(
    const Manifest& manifest, const std::vector<DeviceSpan>& spans,
    DeviceLiveMemoryOptions options = {});
std::unique_ptr<LiveMemory> NewReferenceDeviceLiveMemory(const Manifest& manifest);
// The reference backend over host buffers the caller owns and keeps alive (standing in for an
// engine's device tensors: survives a participant reopen, never zeroed at creation). Sizes are
// checked against the manifest.
Result<std::unique_ptr<LiveMemory>> NewBorrowedReferenceDeviceLiveMemory(
    const Manifest& manifest, std::vector<std::span<uint8_t>> spans);

// Where a rank's live bytes are, by name: "host" (default), "reference-device", "device".
enum class LiveMemoryKind { kHost, kReferenceDevice, kDevice };
Result<LiveMemoryKind> ParseLiveMemoryKind(const std::string& name);
const char* LiveMemoryKindName(LiveMemoryKind kind);
// A new LiveMemory of `kind` for `manifest` (null for kHost: the participant's default).
Result<std::shared_ptr<LiveMemory>> NewLiveMemory(LiveMemoryKind kind, const Manifest& manifest);

}  // namespace wtx
