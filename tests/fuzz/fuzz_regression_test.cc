// Replays every fuzzer input kept under tests/fuzz/regressions/<target>/ (crashes the fuzzers
// found, fixed since) and every seed of tests/fuzz/corpus/<target>/ through the fuzz targets,
// in the normal build: none may crash, throw or break a property.
#include <catch2/catch.hpp>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "tests/fuzz/fuzz_targets.h"

namespace fs = std::filesystem;

namespace {

size_t Replay(const std::string& target, void (*fn)(const uint8_t*, size_t)) {
  size_t n = 0;
  for (const char* kind : {"regressions", "corpus"}) {
    const fs::path dir = fs::path(WTX_SOURCE_DIR) / "tests/fuzz" / kind / target;
    if (!fs::is_directory(dir)) continue;
    for (const auto& e : fs::directory_iterator(dir)) {
      if (!e.is_regular_file()) continue;
      std::ifstream in(e.path(), std::ios::binary);
      std::stringstream ss;
      ss << in.rdbuf();
      const std::string bytes = ss.str();
      INFO(e.path().string());
      fn(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ++n;
    }
  }
  return n;
}

}  // namespace

TEST_CASE("FuzzRegressionsOfTheScenarioParserStayFixed") {
  CHECK(Replay("scenario", wtx::fuzz::FuzzScenario) > 0);
}

TEST_CASE("FuzzRegressionsOfTheManifestParserStayFixed") {
  CHECK(Replay("manifest", wtx::fuzz::FuzzManifest) > 0);
}

TEST_CASE("FuzzRegressionsOfTheSafetensorsHeaderParserStayFixed") {
  CHECK(Replay("safetensors", wtx::fuzz::FuzzSafetensors) > 0);
}

TEST_CASE("FuzzRegressionsOfTheRecordDecoderStayFixed") {
  CHECK(Replay("record", wtx::fuzz::FuzzRecord) > 0);
}
