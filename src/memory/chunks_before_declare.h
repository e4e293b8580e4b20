// verify "all" over every byte of a hash chunk. The verifier compares chunks (kHashChunkBytes),
// and a chunk a transaction declares changed is not compared with the committed version. A
// declaration that covers a chunk only in part (a shard whose rows end inside it, the
// vocabulary rows before the padding rows, one expert of a stacked tensor, a patch) leaves the
// chunk's other bytes -- padding, alignment slack, a neighbouring shard -- undeclared. So
// PartlyDeclaredChunks keeps, for each such chunk, its bytes from just before the first
// declared change (compared then with the committed digest) and the byte ranges declared since;
// at prepare the chunk's undeclared bytes must still be those: the saved bytes with the declared
// ranges taken from live memory must hash to the chunk's live digest.
// Cost: one copy of kHashChunkBytes per chunk declared only in part, for the transaction.
//
// Thread-safety: not synchronized; the participant calls it under its mutex, serialized with
// every other use of the live memory.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "wtx/live_memory.h"
#include "wtx/status.h"

namespace wtx {

class PartlyDeclaredChunks {
 public:
  // Bytes [offset, offset + len) of parameter `param` are about to change under a declaration.
  // A chunk the range covers only in part and that no earlier declaration covered (`declared`)
  // has its live bytes saved and compared with committed[c] (a chunk without a committed digest
  // differs); later declarations into a saved chunk add their ranges. A chunk the range covers
  // whole needs nothing: every byte of it is declared. Returns the memory's error.
  // REQUIRES: len > 0, offset + len <= memory.Size(param), declared has one entry per chunk.
  Status BeforeDeclare(LiveMemory& memory, uint32_t param, size_t offset, size_t len,
                       const std::vector<bool>& declared, const std::vector<uint64_t>& committed);

  // Whether an undeclared byte of chunk `chunk` of `param` changed: it differed from the
  // committed version at the first declaration, or its undeclared bytes no longer equal those
  // saved then (`live_digest`: the chunk's digest now). False for a chunk not saved.
  Result<bool> UndeclaredBytesChanged(LiveMemory& memory, uint32_t param, size_t chunk,
                                      uint64_t live_digest) const;

 private:
  struct Chunk {
    std::string before;     // the chunk's bytes before the first declared change
    bool differed = false;  // ... and they were not the committed ones
    std::vector<std::pair<size_t, size_t>> declared;  // [begin, end) byte offsets in the param
  };
  std::map<std::pair<uint32_t, size_t>, Chunk> chunks_;
};

}  // namespace wtx
