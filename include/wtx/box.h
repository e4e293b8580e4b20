// Boxes: half-open [begin, end) ranges per dimension, in live or source coordinates, and the
// geometry wtx needs on them (containment, intersection, row-major flat runs).
//
// A Box is a plain value. Thread-safety: pure functions, safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace wtx {

using Shape = std::vector<int64_t>;

struct Range {
  int64_t begin = 0;
  int64_t end = 0;
  // end - begin, saturated at the int64_t limits (ranges from untrusted input may be anything;
  // a range inside a validated shape never saturates).
  int64_t extent() const {
    int64_t e = 0;
    if (__builtin_sub_overflow(end, begin, &e)) return end > begin ? INT64_MAX : INT64_MIN;
    return e;
  }
  bool operator==(const Range&) const = default;
};

using Box = std::vector<Range>;

// Element counts (a box's empty ranges count 0). Saturate at INT64_MAX instead of overflowing:
// within the bounds a validated manifest keeps (wtx/limits.h) they are exact.
int64_t NumElements(const Shape& shape);
int64_t NumElements(const Box& box);
Box WholeBox(const Shape& shape);
bool BoxIsEmpty(const Box& box);
// The extent of each dimension: the shape of a dense tensor holding the box.
Shape BoxExtents(const Box& box);
// Every range of `inner` lies inside the matching range of `outer` (same rank).
bool BoxContains(const Box& outer, const Box& inner);
// True when `box` has the rank of `shape` and lies inside it.
bool BoxInsideShape(const Box& box, const Shape& shape);
// Intersection; empty (some extent <= 0) when they do not overlap.
Box Intersect(const Box& a, const Box& b);
bool Overlaps(const Box& a, const Box& b);
// Appends to `out` disjoint boxes that together hold the elements of `a` outside `b` (at most
// 2 per dimension; none when `b` contains `a`; `a` itself when they do not overlap).
// REQUIRES: a.size() == b.size()
void SubtractBox(const Box& a, const Box& b, std::vector<Box>* out);
// The elements of `a` outside every box of `bs`, as disjoint boxes (SubtractBox, box after box).
// REQUIRES: every box has a's rank
std::vector<Box> SubtractBoxes(const Box& a, const std::vector<Box>& bs);
// "[[0, 32], [0, 16]]"
std::string BoxToString(const Box& box);
// "[2, 128, 64]"
std::string ShapeToString(const Shape& shape);

// Calls fn(flat_begin, length) for each maximal run of consecutive row-major flat indices (in a
// tensor of `shape`) that `box` covers, in increasing order.
// REQUIRES: BoxInsideShape(box, shape) and !BoxIsEmpty(box)
void ForEachFlatRun(const Shape& shape, const Box& box,
                    const std::function<void(int64_t, int64_t)>& fn);
// Number of flat runs ForEachFlatRun would produce.
int64_t NumFlatRuns(const Shape& shape, const Box& box);

// Copies the elements of `box` out of a row-major tensor of `shape` (`src`) into `dst`, dense
// and row-major over the box; CopyBoxIn is the reverse (dense `src` into the box of `dst`).
// `elem_size` is the element's byte width.
// REQUIRES: BoxInsideShape(box, shape); the buffers are large enough and do not overlap.
void CopyBoxOut(const Shape& shape, const Box& box, size_t elem_size, const void* src, void* dst);
void CopyBoxIn(const Shape& shape, const Box& box, size_t elem_size, const void* src, void* dst);

// Row-major strides of `shape`, in elements.
std::vector<int64_t> Strides(const Shape& shape);

}  // namespace wtx
