// DescribeStorageChange (include/wtx/storage_identity.h).
#include "wtx/storage_identity.h"

#include <cstdio>

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

}  // namespace wtx
