#include "src/txn/coverage.h"

#include <cassert>

namespace wtx {

namespace {

using Runs = std::map<int64_t, int64_t>;
// std::map node in libstdc++: colour + three pointers + key/value.
constexpr size_t kNodeBytes = 32 + 2 * sizeof(int64_t);

bool RunsOverlap(const Runs& runs, int64_t b, int64_t e) {
  auto it = runs.upper_bound(b);  // first run starting after b
  if (it != runs.end() && it->first < e) return true;
  if (it != runs.begin() && std::prev(it)->second > b) return true;
  return false;
}

void RunsAdd(Runs& runs, int64_t b, int64_t e) {
  auto next = runs.lower_bound(b);
  if (next != runs.end() && next->first == e) {
    e = next->second;
    next = runs.erase(next);
  }
  if (next != runs.begin()) {
    auto prev = std::prev(next);
    if (prev->second == b) {
      prev->second = e;
      return;
    }
  }
  runs.emplace_hint(next, b, e);
}

// Calls gap(b, e) for the uncovered parts of [b, e).
template <typename F>
void RunsGaps(const Runs& runs, int64_t b, int64_t e, F&& gap) {
  int64_t cur = b;
  auto it = runs.upper_bound(b);
  if (it != runs.begin() && std::prev(it)->second > cur) cur = std::prev(it)->second;
  for (; it != runs.end() && it->first < e && cur < e; ++it) {
    if (it->first > cur) gap(cur, it->first);
    cur = std::max(cur, it->second);
  }
  if (cur < e) gap(cur, e);
}

}  // namespace

CoverageSet::CoverageSet(int64_t num_elements, int64_t row_length, size_t min_runs_for_rows)
    : n_(num_elements),
      row_len_(row_length > 0 && num_elements % row_length == 0 ? row_length : num_elements),
      min_runs_for_rows_(min_runs_for_rows) {}

template <typename F>
void CoverageSet::ForEachRowSegment(int64_t b, int64_t e, F&& fn) const {
  for (int64_t r = b / row_len_; r * row_len_ < e; ++r) {
    fn(r, std::max(b, r * row_len_), std::min(e, (r + 1) * row_len_));
  }
}

bool CoverageSet::Overlaps(int64_t begin, int64_t len) const {
  if (len <= 0) return false;
  if (complete()) return true;
  const int64_t end = begin + len;
  if (!row_mode_) return RunsOverlap(runs_, begin, end);
  bool hit = false;
  ForEachRowSegment(begin, end, [&](int64_t r, int64_t b, int64_t e) {
    if (hit) return;
    if ((full_rows_[r / 64] >> (r % 64)) & 1) {
      hit = true;
      return;
    }
    auto it = partial_.find(r);
    hit = it != partial_.end() && RunsOverlap(it->second, b, e);
  });
  return hit;
}

void CoverageSet::Add(int64_t begin, int64_t len) {
  assert(!Overlaps(begin, len) && "coverage intervals must be disjoint");
  assert(begin >= 0 && begin + len <= n_ && "coverage interval outside the parameter");
  if (len <= 0) return;
  covered_ += len;
  if (complete()) {
    runs_.clear();
    partial_.clear();
    full_rows_.clear();
    return;
  }
  const int64_t end = begin + len;
  if (!row_mode_) {
    RunsAdd(runs_, begin, end);
    const size_t bitmap_bytes = static_cast<size_t>(n_ / row_len_ / 8 + 8);
    if (runs_.size() > min_runs_for_rows_ && runs_.size() * kNodeBytes > bitmap_bytes) {
      SwitchToRows();
    }
    return;
  }
  ForEachRowSegment(begin, end, [&](int64_t r, int64_t b, int64_t e) {
    Runs& row = partial_[r];
    RunsAdd(row, b, e);
    if (row.size() == 1 && row.begin()->first == r * row_len_ &&
        row.begin()->second == (r + 1) * row_len_) {
      full_rows_[r / 64] |= uint64_t{1} << (r % 64);
      partial_.erase(r);
    }
  });
}

void CoverageSet::SwitchToRows() {
  row_mode_ = true;
  full_rows_.assign(static_cast<size_t>((n_ / row_len_ + 63) / 64), 0);
  Runs runs = std::move(runs_);
  runs_.clear();
  const int64_t covered = covered_;
  for (const auto& [b, e] : runs) {
    ForEachRowSegment(b, e, [&](int64_t r, int64_t sb, int64_t se) {
      if (sb == r * row_len_ && se == (r + 1) * row_len_) {
        full_rows_[r / 64] |= uint64_t{1} << (r % 64);
      } else {
        RunsAdd(partial_[r], sb, se);
      }
    });
  }
  covered_ = covered;
}

void CoverageSet::ForEachGap(int64_t begin, int64_t len,
                             const std::function<void(int64_t, int64_t)>& fn) const {
  if (len <= 0 || complete()) return;
  const int64_t end = begin + len;
  // Merge gaps that touch across rows so callers see maximal intervals.
  int64_t pb = -1, pe = -1;
  auto emit = [&](int64_t b, int64_t e) {
    if (pe == b) {
      pe = e;
      return;
    }
    if (pb >= 0) fn(pb, pe - pb);
    pb = b;
    pe = e;
  };
  if (!row_mode_) {
    RunsGaps(runs_, begin, end, emit);
  } else {
    ForEachRowSegment(begin, end, [&](int64_t r, int64_t b, int64_t e) {
      if ((full_rows_[r / 64] >> (r % 64)) & 1) return;
      auto it = partial_.find(r);
      if (it == partial_.end()) {
        emit(b, e);
      } else {
        RunsGaps(it->second, b, e, emit);
      }
    });
  }
  if (pb >= 0) fn(pb, pe - pb);
}

size_t CoverageSet::MemoryBytes() const {
  size_t bytes = sizeof(*this) + runs_.size() * kNodeBytes + full_rows_.capacity() * 8;
  for (const auto& [r, row] : partial_)
    bytes += kNodeBytes + sizeof(Runs) + row.size() * kNodeBytes;
  return bytes;
}

namespace {
void Decompose(const Shape& shape, const std::vector<int64_t>& st, size_t d, Box& prefix, int64_t b,
               int64_t e, std::vector<Box>* out) {
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
