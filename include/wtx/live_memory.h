// LiveMemory: where a rank's live parameter bytes are. The participant writes and hashes
// through it; an engine either lets the participant own host buffers or lends its own
// (pointer + size per parameter). A GPU backend implements the same interface.
//
// Contract: Param(i) stays valid (same address and size) for the LiveMemory's lifetime, except
// across Discard(), which models process death (contents lost, zeroed).
// Thread-safety: not synchronized; the participant serializes access.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "wtx/manifest.h"

namespace wtx {

class LiveMemory {
 public:
  virtual ~LiveMemory() = default;
  // Host-addressable bytes of parameter `index` (manifest order), num_bytes() long.
  virtual std::span<uint8_t> Param(uint32_t index) = 0;
  // The bytes are lost (process restart): every parameter reads as zeros afterwards.
  virtual void Discard() = 0;
};

// Zero-initialized host buffers owned by the LiveMemory.
std::unique_ptr<LiveMemory> NewHostLiveMemory(const Manifest& manifest);
// Borrowed buffers; spans[i].size() must equal the parameter's byte size (checked).
Result<std::unique_ptr<LiveMemory>> NewBorrowedLiveMemory(const Manifest& manifest,
                                                          std::vector<std::span<uint8_t>> spans);

}  // namespace wtx
