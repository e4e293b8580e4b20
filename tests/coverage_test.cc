// CoverageSet against a naive per-element reference, in both representations.
#include <catch2/catch.hpp>
#include <random>

#include "src/txn/coverage.h"

using namespace wtx;

namespace {

void Compare(const CoverageSet& c, const std::vector<bool>& ref, std::mt19937& rng) {
  int64_t covered = 0;
  for (bool b : ref) covered += b;
  REQUIRE(c.covered() == covered);
  const int64_t n = static_cast<int64_t>(ref.size());
  for (int q = 0; q < 20; ++q) {
    int64_t b = rng() % n;
    int64_t len = 1 + rng() % (n - b);
    bool any = false;
    for (int64_t i = b; i < b + len; ++i) any = any || ref[i];
    REQUIRE(c.Overlaps(b, len) == any);
    std::vector<bool> gaps(n, false);
    int64_t last_end = -1;
    c.ForEachGap(b, len, [&](int64_t gb, int64_t gl) {
      REQUIRE(gl > 0);
      REQUIRE(gb != last_end);  // maximal: gaps never touch
      last_end = gb + gl;
      for (int64_t i = gb; i < gb + gl; ++i) gaps[i] = true;
    });
    for (int64_t i = 0; i < n; ++i) {
      REQUIRE(gaps[i] == (i >= b && i < b + len && !ref[i]));
    }
  }
}

void RandomTrial(uint32_t seed, size_t min_runs) {
  std::mt19937 rng(seed);
  const int64_t rows = 1 + rng() % 40, cols = 1 + rng() % 24, n = rows * cols;
  CoverageSet c(n, cols, min_runs);
  std::vector<bool> ref(n, false);
  for (int step = 0; step < 200 && c.covered() < n; ++step) {
    int64_t b = rng() % n;
    int64_t len = 1 + rng() % std::min<int64_t>(n - b, rng() % 3 ? cols : n);
    bool any = false;
    for (int64_t i = b; i < b + len; ++i) any = any || ref[i];
    REQUIRE(c.Overlaps(b, len) == any);
    if (!any) {
      c.Add(b, len);
      for (int64_t i = b; i < b + len; ++i) ref[i] = true;
    }
    if (step % 10 == 0) Compare(c, ref, rng);
  }
  Compare(c, ref, rng);
}

}  // namespace

TEST_CASE("CoverageIntervalsMatchNaiveReference") {
  for (uint32_t s = 0; s < 60; ++s) RandomTrial(s, 1u << 30);
}

TEST_CASE("CoverageRowModeMatchesNaiveReference") {
  for (uint32_t s = 0; s < 60; ++s) RandomTrial(1000 + s, 0);
}

TEST_CASE("ScatteredRowsSwitchToOneBitPerRow") {
  const int64_t rows = 1 << 16, cols = 256;
  CoverageSet c(rows * cols, cols);
  for (int64_t r = 0; r < rows; r += 2) c.Add(r * cols, cols);
  CHECK(c.row_mode());
  // One bit per row plus constant overhead, not one interval per written row.
  CHECK(c.MemoryBytes() <= static_cast<size_t>(rows / 8 + 1024));
  int64_t gaps = 0;
  c.ForEachGap(0, rows * cols, [&](int64_t, int64_t len) {
    CHECK(len == cols);
    ++gaps;
  });
  CHECK(gaps == rows / 2);
  for (int64_t r = 1; r < rows; r += 2) c.Add(r * cols, cols);
  CHECK(c.complete());
}

TEST_CASE("WholeShardWritesCostOneInterval") {
  CoverageSet c(1000 * 64, 64);
  for (int i = 0; i < 1000; ++i) c.Add(i * 64, 64);
  CHECK(c.complete());
  CoverageSet d(1000 * 64, 64);
  for (int i = 0; i < 999; ++i) d.Add(i * 64, 64);
  CHECK_FALSE(d.row_mode());
  CHECK(d.MemoryBytes() < 256);
}

TEST_CASE("GapsDecomposeIntoBoxes") {
  std::vector<Box> out;
  FlatIntervalToBoxes({4, 5, 6}, 7, 68, &out);
  int64_t total = 0;
  for (const auto& b : out) total += NumElements(b);
  CHECK(total == 61);
  out.clear();
  FlatIntervalToBoxes({32, 16}, 256, 384, &out);
  REQUIRE(out.size() == 1);
  CHECK(out[0] == Box{{16, 24}, {0, 16}});
  std::vector<Box> rows = {{{0, 1}, {2, 5}}, {{1, 2}, {2, 5}}, {{2, 3}, {2, 5}}};
  auto merged = MergeAdjacentBoxes(rows);
  REQUIRE(merged.size() == 1);
  CHECK(merged[0] == Box{{0, 3}, {2, 5}});
}
