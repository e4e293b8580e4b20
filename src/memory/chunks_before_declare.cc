#include "src/memory/chunks_before_declare.h"

#include <algorithm>
#include <cassert>

#include "wtx/content_hash.h"

namespace wtx {

Status CheckChunksBeforeDeclare(LiveMemory& memory, uint32_t param, size_t offset, size_t len,
                                const std::vector<bool>& declared,
                                const std::vector<uint64_t>& committed,
                                std::vector<bool>* changed) {
  assert(len > 0 && "an empty declaration changes no chunk");
  const size_t size = memory.Size(param);
  assert(offset + len <= size && "declaration past the parameter");
  const size_t end = offset + len;
  const size_t last = (end - 1) / kHashChunkBytes;
  for (size_t c = offset / kHashChunkBytes; c <= last && c < declared.size(); ++c) {
    if (declared[c]) continue;  // compared when it was first declared
    const size_t cb = c * kHashChunkBytes, ce = std::min(cb + kHashChunkBytes, size);
    if (offset <= cb && end >= ce) continue;  // covered whole: no undeclared byte survives
    uint64_t digest = 0;
    WTX_RETURN_IF_ERROR(memory.ChunkDigests(param, c, 1, &digest));
    if (c >= committed.size() || committed[c] != digest) (*changed)[c] = true;
  }
  return Status::OK();
}

}  // namespace wtx
