// LiveMemory: where a rank's live parameter bytes are. The participant writes, patches, saves
// before-images and hashes through it; an engine either lets the participant own host buffers,
// lends its own host buffers (pointer + size per parameter), or provides memory the host cannot
// address (GPU memory: include/wtx/device_live_memory.h).
//
// Two kinds of backend:
//  * host-addressable (HostAddressable() true): Param(i) spans are the live bytes. The
//    participant copies and hashes them itself in one pass (ParamHashCache::CopyIn); the
//    operations below have working defaults on those spans.
//  * not host-addressable (a device): Param(i) is empty, and the backend overrides every
//    operation below (Size, Store, Load, Scatter, ChunkDigests). Digests computed by a backend
//    must equal content_hash.h's bit for bit, so a rank's version does not depend on where its
//    bytes live.
//
// Contract: Param(i) stays valid (same address and size) for the LiveMemory's lifetime, except
// across Discard(), which models process death (contents lost, zeroed), and Rebind(), by which
// borrowed memory adopts storage its owner moved the parameter to (storage_identity.h). Offsets and
// lengths are in bytes; a failing operation (a device error) returns a non-OK Status and the
// participant treats the rank as crashed. Thread-safety: not synchronized; the participant
// serializes access.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "wtx/manifest.h"
#include "wtx/status.h"

namespace wtx {

class LiveMemory {
 public:
  virtual ~LiveMemory() = default;
  // Host-addressable bytes of parameter `index` (manifest order), Size(index) long; empty when
  // !HostAddressable().
  virtual std::span<uint8_t> Param(uint32_t index) = 0;
  // The bytes are lost (process restart): every parameter reads as zeros afterwards.
  virtual void Discard() = 0;

  virtual bool HostAddressable() const { return true; }
  // Byte size of parameter `index`.
  virtual size_t Size(uint32_t index) { return Param(index).size(); }
  // Bytes [offset, offset + len) of parameter `index` = `src` (host memory).
  // REQUIRES: offset + len <= Size(index)
  virtual Status Store(uint32_t index, size_t offset, const void* src, size_t len);
  // `dst` (host memory) = bytes [offset, offset + len) of parameter `index`.
  // REQUIRES: offset + len <= Size(index)
  virtual Status Load(uint32_t index, size_t offset, void* dst, size_t len);
  // For each k: element flat[k] (elem_size bytes) of parameter `index` = values[k]; when
  // `before` is not null, its old value goes to before[k] first (all values host memory).
  // REQUIRES: flat indices distinct and inside the parameter; elem_size 1, 2, 4 or 8.
  virtual Status Scatter(uint32_t index, std::span<const int64_t> flat, const void* values,
                         size_t elem_size, void* before);
  // out[k] = chunk digest (content_hash.h) of chunk first + k of parameter `index`, k < count.
  // REQUIRES: the chunks exist.
  virtual Status ChunkDigests(uint32_t index, size_t first, size_t count, uint64_t* out);

  // ---- Device sources (in-place landings, device-to-device writes) ----
  // Device address of parameter `index`'s first byte (what an engine writes to in place); 0
  // for host memory. The reference device backend returns the host address of its hidden
  // buffer (the CPU stands in for the device).
  virtual uint64_t DeviceAddress(uint32_t /*index*/) { return 0; }
  // Bytes [offset, offset + len) of parameter `index` = `len` bytes at device address `src`
  // (device-to-device, ordered on the backend's stream). Host memory: InvalidArgument.
  // REQUIRES: offset + len <= Size(index)
  virtual Status StoreFromDevice(uint32_t index, size_t offset, const void* src, size_t len);
  // `dst` (host) = `len` bytes at device address `src` (index/value arrays given on the
  // device). Host memory: InvalidArgument.
  virtual Status CopyDeviceToHost(const void* src, void* dst, size_t len);

  // ---- Identity (storage_identity.h) ----
  // Where parameter `index`'s first byte is: the host address of Param(index), or
  // DeviceAddress(index) where the memory is not host-addressable.
  uint64_t Address(uint32_t index) {
    return HostAddressable() ? reinterpret_cast<uint64_t>(Param(index).data())
                             : DeviceAddress(index);
  }
  // Borrowed memory: parameter `index` is now the Size(index) bytes at `address` (host memory:
  // a host address; device memory: a device address on the same device). Memory the LiveMemory
  // owns cannot be rebound: kInvalidArgument.
  // REQUIRES: `address` holds at least Size(index) bytes that stay valid until the next Rebind.
  virtual Status Rebind(uint32_t index, uint64_t address);
};

// Zero-initialized host memory owned by the LiveMemory: one mapping for all parameters, each
// 64-byte aligned (pages handed out lazily by the OS; advised to transparent huge pages where
// the kernel allows). Discard maps fresh zero pages.
std::unique_ptr<LiveMemory> NewHostLiveMemory(const Manifest& manifest);
// Borrowed buffers; spans[i].size() must equal the parameter's byte size (checked). Their
// contents are left as they are (never zeroed at creation or at a participant's Open).
Result<std::unique_ptr<LiveMemory>> NewBorrowedLiveMemory(const Manifest& manifest,
                                                          std::vector<std::span<uint8_t>> spans);

}  // namespace wtx
