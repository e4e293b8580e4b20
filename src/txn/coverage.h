// CoverageSet: which elements of one parameter a transaction has written, exactly.
//
// Two representations, chosen adaptively:
//  * intervals: disjoint merged half-open intervals of row-major flat element indices. Adjacent
//    writes merge, so a shard written whole costs one interval and a parameter written whole
//    collapses to a flag;
//  * rows: one bit per row (row = the last dimension) plus exact intervals for partially
//    written rows, used once the intervals would cost more than the bitmap (scattered rows).
// Memory is therefore at most about one bit per row plus partial-row bookkeeping, and usually
// a few dozen bytes.
//
// Thread-safety: not synchronized.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "wtx/box.h"

namespace wtx {

class CoverageSet {
 public:
  // `row_length` (elements per row; 0: the whole parameter is one row) drives the row mode;
  // the switch happens once there are more than `min_runs_for_rows` intervals costing more
  // than the bitmap.
  explicit CoverageSet(int64_t num_elements, int64_t row_length = 0, size_t min_runs_for_rows = 64);

  // True if any element of [begin, begin + len) is already covered.
  bool Overlaps(int64_t begin, int64_t len) const;
  // REQUIRES: !Overlaps(begin, len) and the interval lies in [0, n)
  void Add(int64_t begin, int64_t len);
  int64_t covered() const { return covered_; }
  bool complete() const { return covered_ == n_; }
  bool row_mode() const { return row_mode_; }
  // Calls fn(begin, len) for each maximal uncovered sub-interval of [begin, begin + len).
  void ForEachGap(int64_t begin, int64_t len,
                  const std::function<void(int64_t, int64_t)>& fn) const;
  size_t MemoryBytes() const;

 private:
  using Runs = std::map<int64_t, int64_t>;  // begin -> end
  void SwitchToRows();
  // Calls fn(row, seg_begin, seg_end) for each row segment of [b, e).
  template <typename F>
  void ForEachRowSegment(int64_t b, int64_t e, F&& fn) const;

  int64_t n_;
  int64_t row_len_;
  size_t min_runs_for_rows_;
  int64_t covered_ = 0;
  bool row_mode_ = false;
  Runs runs_;                        // interval mode; empty once complete
  std::vector<uint64_t> full_rows_;  // row mode: bit per row
  std::map<int64_t, Runs> partial_;  // row mode: row -> its covered intervals
};

// Decomposes flat interval [begin, end) of a tensor of `shape` into boxes, in order.
void FlatIntervalToBoxes(const Shape& shape, int64_t begin, int64_t end, std::vector<Box>* out);
// Merges consecutive boxes that differ in one dimension only and abut there.
std::vector<Box> MergeAdjacentBoxes(std::vector<Box> boxes);

}  // namespace wtx
