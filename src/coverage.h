// CoverageSet: which elements of one parameter a transaction has written, exactly, as a set of
// disjoint half-open intervals of row-major flat element indices. Adjacent writes merge, so a
// shard written whole costs one interval and a parameter written whole collapses to a flag:
// memory is O(number of non-adjacent write fragments), never per element.
//
// Thread-safety: not synchronized.
#pragma once

#include <cstdint>
#include <functional>
#include <map>

#include "wtx/box.h"

namespace wtx {

class CoverageSet {
 public:
  explicit CoverageSet(int64_t num_elements) : n_(num_elements) {}

  // True if any element of [begin, begin + len) is already covered.
  bool Overlaps(int64_t begin, int64_t len) const;
  // REQUIRES: !Overlaps(begin, len) and the interval lies in [0, n)
  void Add(int64_t begin, int64_t len);
  int64_t covered() const { return covered_; }
  bool complete() const { return covered_ == n_; }
  // Calls fn(begin, len) for each uncovered sub-interval of [begin, begin + len).
  void ForEachGap(int64_t begin, int64_t len,
                  const std::function<void(int64_t, int64_t)>& fn) const;
  size_t MemoryBytes() const;

 private:
  int64_t n_;
  int64_t covered_ = 0;
  std::map<int64_t, int64_t> runs_;  // begin -> end; empty once complete
};

// Decomposes flat interval [begin, end) of a tensor of `shape` into boxes, in order.
void FlatIntervalToBoxes(const Shape& shape, int64_t begin, int64_t end, std::vector<Box>* out);
// Merges consecutive boxes that differ in one dimension only and abut there.
std::vector<Box> MergeAdjacentBoxes(std::vector<Box> boxes);

}  // namespace wtx
