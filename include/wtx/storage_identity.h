// Storage identity: the bytes a participant vouches for are the bytes the engine serves.
//
// A participant over borrowed live memory (the engine's own tensors) is told at Open where each
// parameter's bytes are. An engine may later rebind a parameter to other storage (vLLM's
// post-load processing: `param.data = new_tensor`, a re-layout, a `.contiguous()` copy), shrink
// it, or free it (an offload). Its old address then holds bytes the engine no longer serves, or
// no memory at all. A StorageResolver tells the participant where the engine's parameters are
// *now*; the participant consults it at every phase (Begin, each Write/WriteSource/Patch/Reserve/
// Landed before it touches a parameter, Prepare, Verify, Reattach, a restoring abort, and each
// status() that reports serving) and compares the answer with the storage it is bound to:
//  * a parameter whose address, usable size or layout token changed, or that the engine let go
//    of (`released`), is never dereferenced again; the call is refused with E_STORAGE_MOVED
//    naming each such parameter with its old and new address and size; the rank becomes
//    durably dirty (a STORAGE_MOVED journal record; an active transaction votes no) and does
//    not serve until Participant::Rebind adopts the new storage and then either Verify proves
//    its bytes equal the committed version or a `full` transaction commits.
//  * Without a resolver (ParticipantOptions::storage_resolver null: owned memory, or an
//    embedder that guarantees its buffers never move) nothing is checked.
//
// Thread-safety: the participant calls Resolve with its mutex held, from the thread of the
// participant call that needs it; an implementation must not call back into the participant.
// Resolve may be called concurrently with the engine's own use of its parameters; the engine
// must not free or rebind a parameter while a participant call that touches it is in flight
// (nothing can make a store safe against a free that races it).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "wtx/status.h"

namespace wtx {

// Where one parameter's bytes are, as its owner sees them now.
struct ParamStorage {
  uint64_t address = 0;  // first byte of the parameter (host or device address); 0: none
  size_t bytes = 0;      // bytes usable from `address` on (the storage's size less the offset)
  // Everything else the owner can compare (dtype, shape, strides, device), as an opaque token:
  // equal tokens mean an unchanged layout. 0 when the owner checks nothing more.
  uint64_t layout = 0;
  // Non-empty: the owner let go of the storage (freed, dropped, removed from its module); says
  // how. Such storage is never dereferenced, whatever `address` says.
  std::string released;

  bool operator==(const ParamStorage&) const = default;
};

class StorageResolver {
 public:
  virtual ~StorageResolver() = default;
  // out[k] = where parameter params[k] (manifest order) is now. A non-OK status (the resolver
  // itself failed) refuses the participant call that asked, with that status.
  // REQUIRES: out.size() == params.size(), every index < the manifest's parameter count.
  virtual Status Resolve(std::span<const uint32_t> params, std::span<ParamStorage> out) = 0;
};

// One parameter whose storage changed, as a refusal or a rebind reports it.
struct StorageChange {
  std::string param;
  ParamStorage was;  // the storage the participant was bound to
  ParamStorage now;  // what the resolver says now
};

// One parameter's bytes in memory, for the shared-storage check.
struct StorageExtent {
  std::string param;
  uint64_t address = 0;  // 0: no storage (never overlaps)
  size_t bytes = 0;
};

// OK when no two extents share a byte. Parameters that share storage (a tied lm_head and
// embedding under a manifest that lists both, overlapping views) would let one write land in
// both, so a rank is refused them when it opens or rebinds (DESIGN.md, Identity):
// InvalidArgument naming both parameters and their addresses. Host and device addresses are
// compared alike (CUDA's unified addressing gives every allocation its own range).
Status CheckStorageDisjoint(std::span<const StorageExtent> extents);

// "'p': moved from 0x1000 (64 bytes) to 0x2000 (64 bytes)", "'p': freed (was 0x1000, 64
// bytes): <released>", "'p': layout changed at 0x1000 (64 bytes)".
std::string DescribeStorageChange(const StorageChange& c);

}  // namespace wtx
