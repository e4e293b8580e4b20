#include "src/memory/chunks_before_declare.h"

#include <algorithm>
#include <cassert>

#include "wtx/content_hash.h"

namespace wtx {

Status PartlyDeclaredChunks::BeforeDeclare(LiveMemory& memory, uint32_t param, size_t offset,
                                           size_t len, const std::vector<bool>& declared,
                                           const std::vector<uint64_t>& committed) {
  assert(len > 0 && "an empty declaration changes no chunk");
  const size_t size = memory.Size(param);
  assert(offset + len <= size && "declaration past the parameter");
  const size_t end = offset + len;
  for (size_t c = offset / kHashChunkBytes; c <= (end - 1) / kHashChunkBytes; ++c) {
    const size_t cb = c * kHashChunkBytes, ce = std::min(cb + kHashChunkBytes, size);
    const std::pair<size_t, size_t> range{std::max(offset, cb), std::min(end, ce)};
    if (auto it = chunks_.find({param, c}); it != chunks_.end()) {
      it->second.declared.push_back(range);
      continue;
    }
    if (c < declared.size() && declared[c]) continue;  // declared whole before
    if (offset <= cb && end >= ce) continue;           // covered whole: nothing undeclared
    Chunk k;
    k.before.resize(ce - cb);
    WTX_RETURN_IF_ERROR(memory.Load(param, cb, k.before.data(), k.before.size()));
    k.differed =
        c >= committed.size() || committed[c] != ChunkDigest(k.before.data(), k.before.size());
    k.declared.push_back(range);
    chunks_.emplace(std::make_pair(param, c), std::move(k));
  }
  return Status::OK();
}

Result<bool> PartlyDeclaredChunks::UndeclaredBytesChanged(LiveMemory& memory, uint32_t param,
                                                          size_t chunk,
                                                          uint64_t live_digest) const {
  auto it = chunks_.find({param, chunk});
  if (it == chunks_.end()) return false;
  const Chunk& k = it->second;
  if (k.differed) return true;
  // The saved bytes with the declared ranges as they are now: equal to the live chunk exactly
  // when no undeclared byte changed.
  std::string expect = k.before;
  const size_t cb = chunk * kHashChunkBytes;
  for (const auto& [b, e] : k.declared) {
    WTX_RETURN_IF_ERROR(memory.Load(param, b, expect.data() + (b - cb), e - b));
  }
  return ChunkDigest(expect.data(), expect.size()) != live_digest;
}

}  // namespace wtx
