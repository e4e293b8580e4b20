#include "wtx/box.h"

#include <algorithm>
#include <cassert>
#include <cstring>

#include "src/util/checked_math.h"

namespace wtx {

int64_t NumElements(const Shape& shape) {
  int64_t n = 1;
  for (int64_t d : shape) {
    if (d <= 0) return 0;
    if (!CheckedMul(n, d, &n)) n = INT64_MAX;
  }
  return n;
}

int64_t NumElements(const Box& box) {
  int64_t n = 1;
  for (const Range& r : box) {
    const int64_t e = r.extent();
    if (e <= 0) return 0;
    if (!CheckedMul(n, e, &n)) n = INT64_MAX;
  }
  return n;
}

Box WholeBox(const Shape& shape) {
  Box b;
  b.reserve(shape.size());
  for (int64_t d : shape) b.push_back({0, d});
  return b;
}

bool BoxIsEmpty(const Box& box) {
  return std::any_of(box.begin(), box.end(), [](const Range& r) { return r.extent() <= 0; });
}

Shape BoxExtents(const Box& box) {
  Shape out;
  out.reserve(box.size());
  for (const Range& r : box) out.push_back(r.extent());
  return out;
}

bool BoxContains(const Box& outer, const Box& inner) {
  if (outer.size() != inner.size()) return false;
  for (size_t i = 0; i < outer.size(); ++i) {
    if (inner[i].begin < outer[i].begin || inner[i].end > outer[i].end) return false;
  }
  return true;
}

bool BoxInsideShape(const Box& box, const Shape& shape) {
  if (box.size() != shape.size()) return false;
  for (size_t i = 0; i < box.size(); ++i) {
    if (box[i].begin < 0 || box[i].end > shape[i] || box[i].begin > box[i].end) return false;
  }
  return true;
}

Box Intersect(const Box& a, const Box& b) {
  assert(a.size() == b.size() && "intersecting boxes of different rank");
  Box r(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    r[i].begin = std::max(a[i].begin, b[i].begin);
    r[i].end = std::min(a[i].end, b[i].end);
  }
  return r;
}

bool Overlaps(const Box& a, const Box& b) {
  return a.size() == b.size() && !BoxIsEmpty(Intersect(a, b));
}

void SubtractBox(const Box& a, const Box& b, std::vector<Box>* out) {
  assert(a.size() == b.size() && "boxes of one tensor have one rank");
  if (!Overlaps(a, b)) {
    out->push_back(a);
    return;
  }
  // Peel off, dimension by dimension, the slabs of `rest` below and above `b`.
  Box rest = a;
  for (size_t d = 0; d < a.size(); ++d) {
    if (rest[d].begin < b[d].begin) {
      Box below = rest;
      below[d].end = b[d].begin;
      out->push_back(std::move(below));
      rest[d].begin = b[d].begin;
    }
    if (rest[d].end > b[d].end) {
      Box above = rest;
      above[d].begin = b[d].end;
      out->push_back(std::move(above));
      rest[d].end = b[d].end;
    }
  }
}

std::vector<Box> SubtractBoxes(const Box& a, const std::vector<Box>& bs) {
  std::vector<Box> rest{a}, next;
  for (const Box& b : bs) {
    if (rest.empty()) break;
    next.clear();
    for (const Box& r : rest) SubtractBox(r, b, &next);
    rest.swap(next);
  }
  return rest;
}

std::string ShapeToString(const Shape& shape) {
  std::string r = "[";
  for (size_t i = 0; i < shape.size(); ++i) r += (i ? ", " : "") + std::to_string(shape[i]);
  return r + "]";
}

std::string BoxToString(const Box& box) {
  std::string s = "[";
  for (size_t i = 0; i < box.size(); ++i) {
    if (i) s += ", ";
    // Appended piece by piece: g++ 12 warns falsely (-Wstringop-overflow) on "[" + string&&.
    s += '[';
    s += std::to_string(box[i].begin);
    s += ", ";
    s += std::to_string(box[i].end);
    s += ']';
  }
  return s + "]";
}

std::vector<int64_t> Strides(const Shape& shape) {
  std::vector<int64_t> st(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) st[i - 1] = st[i] * shape[i];
  return st;
}

namespace {
// The first dimension from which the box spans whole trailing dimensions contiguously: dims
// [split, n) form one contiguous run per index of dims [0, split).
size_t ContiguousSplit(const Shape& shape, const Box& box) {
  size_t n = shape.size();
  if (n == 0) return 0;
  size_t split = n - 1;  // the last dim is always contiguous within a run
  while (split > 0 && box[split].begin == 0 && box[split].end == shape[split]) --split;
  return split;
}
}  // namespace

int64_t NumFlatRuns(const Shape& shape, const Box& box) {
  size_t split = ContiguousSplit(shape, box);
  int64_t runs = 1;
  for (size_t i = 0; i < split; ++i) runs *= box[i].extent();
  return runs;
}

void ForEachFlatRun(const Shape& shape, const Box& box,
                    const std::function<void(int64_t, int64_t)>& fn) {
  assert(BoxInsideShape(box, shape) && "flat runs of a box outside its tensor");
  if (shape.empty()) {
    fn(0, 1);
    return;
  }
  const size_t split = ContiguousSplit(shape, box);
  const std::vector<int64_t> st = Strides(shape);
  int64_t run_len = box[split].extent() * st[split];
  // Odometer over dims [0, split).
  std::vector<int64_t> idx(split);
  for (size_t i = 0; i < split; ++i) idx[i] = box[i].begin;
  while (true) {
    int64_t base = box[split].begin * st[split];
    for (size_t i = 0; i < split; ++i) base += idx[i] * st[i];
    fn(base, run_len);
    size_t d = split;
    while (d > 0) {
      --d;
      if (++idx[d] < box[d].end) break;
      idx[d] = box[d].begin;
      if (d == 0) return;
    }
    if (split == 0) return;
  }
}

}  // namespace wtx

namespace wtx {

namespace {

// Copies between the box of a row-major tensor and a dense buffer: out of the tensor when
// `out`, into it otherwise.
void CopyBox(const Shape& shape, const Box& box, size_t elem_size, const void* src, void* dst,
             bool out) {
  if (NumElements(box) == 0) return;
  const uint8_t* s = static_cast<const uint8_t*>(src);
  uint8_t* d = static_cast<uint8_t*>(dst);
  ForEachFlatRun(shape, box, [&](int64_t b, int64_t len) {
    const size_t n = static_cast<size_t>(len) * elem_size;
    const size_t at = static_cast<size_t>(b) * elem_size;
    if (out) {
      std::memcpy(d, s + at, n);
      d += n;
    } else {
      std::memcpy(d + at, s, n);
      s += n;
    }
  });
}

}  // namespace

void CopyBoxOut(const Shape& shape, const Box& box, size_t elem_size, const void* src, void* dst) {
  CopyBox(shape, box, elem_size, src, dst, /*out=*/true);
}

void CopyBoxIn(const Shape& shape, const Box& box, size_t elem_size, const void* src, void* dst) {
  CopyBox(shape, box, elem_size, src, dst, /*out=*/false);
}

}  // namespace wtx
