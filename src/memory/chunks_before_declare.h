// verify "all" over every byte of a hash chunk: the verifier compares chunks (kHashChunkBytes),
// and a chunk a transaction declares changed is exempt from the comparison with the committed
// version. A declaration that covers a chunk only in part (a shard whose rows end inside it, the
// vocabulary rows before the padding rows, a landing of one expert) leaves the chunk's other
// bytes -- padding, alignment slack, a neighbouring shard -- undeclared but no longer compared.
// So, before the first declared change to such a chunk, its live bytes are compared with the
// committed digest: a chunk that already differs was changed without a declared write.
//
// Thread-safety: a pure function over the caller's memory; the caller serializes it with every
// other use of `memory`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "wtx/live_memory.h"
#include "wtx/status.h"

namespace wtx {

// Bytes [offset, offset + len) of parameter `param` are about to change under a declaration.
// For each chunk of the range that `declared` does not mark yet and that the range covers only
// in part, digests its live bytes and sets (*changed)[c] when the digest differs from
// committed[c] (or committed has no chunk c). A chunk the range covers whole is skipped: every
// byte of it is replaced by declared bytes. Returns the memory's error (a device failure).
// REQUIRES: len > 0, offset + len <= memory.Size(param), declared and *changed have one entry
// per chunk of the parameter.
Status CheckChunksBeforeDeclare(LiveMemory& memory, uint32_t param, size_t offset, size_t len,
                                const std::vector<bool>& declared,
                                const std::vector<uint64_t>& committed, std::vector<bool>* changed);

}  // namespace wtx
