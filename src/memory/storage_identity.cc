// DescribeStorageChange and CheckStorageDisjoint (include/wtx/storage_identity.h).
#include "wtx/storage_identity.h"

#include <algorithm>
#include <cstdio>
#include <vector>

namespace wtx {
namespace {

std::string At(const ParamStorage& s) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "0x%llx (%zu bytes)", static_cast<unsigned long long>(s.address),
                s.bytes);
  return buf;
}

}  // namespace

std::string DescribeStorageChange(const StorageChange& c) {
  const std::string name = "'" + c.param + "'";
  if (!c.now.released.empty()) {
    return name + ": released by the engine (" + c.now.released + "); was " + At(c.was);
  }
  if (c.now.address == 0 || c.now.bytes == 0) {
    return name + ": freed (storage of 0 bytes now); was " + At(c.was);
  }
  if (c.now.address != c.was.address || c.now.bytes != c.was.bytes) {
    return name + ": moved from " + At(c.was) + " to " + At(c.now) +
           (c.now.layout != c.was.layout ? ", layout changed" : "");
  }
  return name + ": layout changed (dtype, shape, strides or device) at " + At(c.now);
}

Status CheckStorageDisjoint(std::span<const StorageExtent> extents) {
  std::vector<const StorageExtent*> order;
  order.reserve(extents.size());
  for (const StorageExtent& e : extents) {
    if (e.address != 0 && e.bytes > 0) order.push_back(&e);
  }
  std::sort(order.begin(), order.end(),
            [](const StorageExtent* a, const StorageExtent* b) { return a->address < b->address; });
  // Sorted by start: an extent overlaps some earlier one iff it starts before the furthest end
  // seen so far; that extent is the one to name.
  const StorageExtent* reach = nullptr;
  for (const StorageExtent* e : order) {
    if (reach != nullptr && e->address < reach->address + reach->bytes) {
      const ParamStorage a{reach->address, reach->bytes, 0, {}};
      const ParamStorage b{e->address, e->bytes, 0, {}};
      return Status::InvalidArgument(
          "parameters '" + reach->param + "' at " + At(a) + " and '" + e->param + "' at " + At(b) +
          " share storage (tied or overlapping tensors): a write to one would change the other; "
          "give the manifest one parameter for shared storage (e.g. no separate lm_head when "
          "the embedding is tied)");
    }
    if (reach == nullptr || e->address + e->bytes > reach->address + reach->bytes) reach = e;
  }
  return Status::OK();
}

}  // namespace wtx
