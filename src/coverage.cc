#include "coverage.h"

#include <cassert>

namespace wtx {

bool CoverageSet::Overlaps(int64_t begin, int64_t len) const {
  if (len <= 0) return false;
  if (complete()) return true;
  const int64_t end = begin + len;
  auto it = runs_.upper_bound(begin);  // first run starting after begin
  if (it != runs_.end() && it->first < end) return true;
  if (it != runs_.begin()) {
    --it;
    if (it->second > begin) return true;
  }
  return false;
}

void CoverageSet::Add(int64_t begin, int64_t len) {
  assert(!Overlaps(begin, len) && "coverage intervals must be disjoint");
  assert(begin >= 0 && begin + len <= n_ && "coverage interval outside the parameter");
  if (len <= 0) return;
  covered_ += len;
  if (complete()) {
    runs_.clear();
    return;
  }
  int64_t b = begin;
  int64_t e = begin + len;
  auto next = runs_.lower_bound(b);
  if (next != runs_.end() && next->first == e) {
    e = next->second;
    next = runs_.erase(next);
  }
  if (next != runs_.begin()) {
    auto prev = std::prev(next);
    if (prev->second == b) {
      prev->second = e;
      return;
    }
  }
  runs_.emplace_hint(next, b, e);
}

void CoverageSet::ForEachGap(int64_t begin, int64_t len,
                             const std::function<void(int64_t, int64_t)>& fn) const {
  if (len <= 0 || complete()) return;
  const int64_t end = begin + len;
  int64_t cur = begin;
  auto it = runs_.upper_bound(begin);
  if (it != runs_.begin()) {
    auto prev = std::prev(it);
    if (prev->second > cur) cur = prev->second;
  }
  for (; it != runs_.end() && it->first < end && cur < end; ++it) {
    if (it->first > cur) fn(cur, it->first - cur);
    cur = std::max(cur, it->second);
  }
  if (cur < end) fn(cur, end - cur);
}

size_t CoverageSet::MemoryBytes() const {
  // std::map node: three pointers, colour, key/value (measured layout of libstdc++).
  constexpr size_t kNode = 32 + 2 * sizeof(int64_t);
  return sizeof(*this) + runs_.size() * kNode;
}

namespace {
void Decompose(const Shape& shape, const std::vector<int64_t>& st, size_t d, Box& prefix,
               int64_t b, int64_t e, std::vector<Box>* out) {
  if (b >= e) return;
  const size_t n = shape.size();
  auto emit = [&](int64_t lo, int64_t hi) {  // slabs [lo, hi) of dim d, full below
    Box box = prefix;
    box.push_back({lo, hi});
    for (size_t k = d + 1; k < n; ++k) box.push_back({0, shape[k]});
    out->push_back(std::move(box));
  };
  const int64_t s = st[d];
  int64_t lo = b / s;
  int64_t hi = e / s;
  if (b % s == 0 && e % s == 0) {
    emit(lo, hi);
    return;
  }
  if (lo == (e - 1) / s) {  // inside one slab
    prefix.push_back({lo, lo + 1});
    Decompose(shape, st, d + 1, prefix, b - lo * s, e - lo * s, out);
    prefix.pop_back();
    return;
  }
  if (b % s != 0) {
    prefix.push_back({lo, lo + 1});
    Decompose(shape, st, d + 1, prefix, b - lo * s, s, out);
    prefix.pop_back();
    ++lo;
  }
  if (hi > lo) emit(lo, hi);
  if (e % s != 0) {
    prefix.push_back({hi, hi + 1});
    Decompose(shape, st, d + 1, prefix, 0, e - hi * s, out);
    prefix.pop_back();
  }
}
}  // namespace

void FlatIntervalToBoxes(const Shape& shape, int64_t begin, int64_t end, std::vector<Box>* out) {
  if (shape.empty()) {
    if (begin < end) out->push_back({});
    return;
  }
  Box prefix;
  Decompose(shape, Strides(shape), 0, prefix, begin, end, out);
}

std::vector<Box> MergeAdjacentBoxes(std::vector<Box> boxes) {
  std::vector<Box> out;
  for (auto& b : boxes) {
    if (!out.empty() && out.back().size() == b.size()) {
      Box& last = out.back();
      int diff = -1;
      bool mergeable = true;
      for (size_t i = 0; i < b.size(); ++i) {
        if (last[i] == b[i]) continue;
        if (diff >= 0 || last[i].end != b[i].begin) {
          mergeable = false;
          break;
        }
        diff = static_cast<int>(i);
      }
      if (mergeable && diff >= 0) {
        last[diff].end = b[diff].end;
        continue;
      }
    }
    out.push_back(std::move(b));
  }
  return out;
}

}  // namespace wtx
