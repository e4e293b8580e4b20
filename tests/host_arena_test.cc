// HostArena (src/memory/host_arena.h): the one mapping behind host live memory gives each
// parameter a zeroed, 64-byte aligned region of its own.
#include <algorithm>
#include <catch2/catch.hpp>
#include <cstring>
#include <vector>

#include <nlohmann/json.hpp>

#include "src/memory/host_arena.h"
#include "wtx/live_memory.h"
#include "wtx/manifest.h"

using namespace wtx;

TEST_CASE("HostArenaRegionsAreZeroedAlignedAndDisjoint") {
  const std::vector<size_t> sizes = {
      0, 1, 63, 64, 65, 4096, 70000, size_t{3} << 20, 7, 0, size_t{2} << 20};
  HostArena arena(sizes);
  for (size_t i = 0; i < sizes.size(); ++i) {
    INFO("region " << i);
    std::span<uint8_t> r = arena.Region(i);
    CHECK(r.size() == sizes[i]);
    CHECK(reinterpret_cast<uintptr_t>(r.data()) % 64 == 0);
    CHECK(std::all_of(r.begin(), r.end(), [](uint8_t b) { return b == 0; }));
    std::memset(r.data(), static_cast<int>(i + 1), r.size());
  }
  // Filling each region left the others as they were.
  for (size_t i = 0; i < sizes.size(); ++i) {
    std::span<uint8_t> r = arena.Region(i);
    CHECK(std::all_of(r.begin(), r.end(),
                      [&](uint8_t b) { return b == static_cast<uint8_t>(i + 1); }));
  }
  HostArena empty({});
  HostArena zero({0});
  CHECK(zero.Region(0).empty());
}

TEST_CASE("DiscardedHostLiveMemoryIsZeroAgain") {
  ManifestPtr m = ParseManifest(nlohmann::json::parse(R"({
    "params": [{"name": "a", "dtype": "f32", "shape": [3000, 100], "shards": [
      {"id": "s", "source": "A", "source_shape": [3000, 100], "box": [[0, 3000], [0, 100]],
       "source_box": [[0, 3000], [0, 100]]}]},
      {"name": "b", "dtype": "bf16", "shape": [5], "shards": [
      {"id": "s", "source": "B", "source_shape": [5], "box": [[0, 5]],
       "source_box": [[0, 5]]}]}]})"))
                      .value();
  auto mem = NewHostLiveMemory(*m);
  for (uint32_t i = 0; i < 2; ++i) {
    std::span<uint8_t> p = mem->Param(i);
    CHECK(p.size() == static_cast<size_t>(m->params()[i].num_bytes()));
    std::memset(p.data(), 0xEE, p.size());
  }
  mem->Discard();
  for (uint32_t i = 0; i < 2; ++i) {
    std::span<uint8_t> p = mem->Param(i);
    CHECK(std::all_of(p.begin(), p.end(), [](uint8_t b) { return b == 0; }));
  }
}
