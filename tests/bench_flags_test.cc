// The benchmark executables refuse bad flags before running anything: exit 2, naming the flag
// (or positional argument) that was wrong. Built only with WTX_BUILD_BENCH.
#include <catch2/catch.hpp>

#include <cstdint>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "tests/test_util.h"

namespace {

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream(path, std::ios::binary) << text;
}

void CheckRefused(const std::string& binary,
                  const std::vector<std::pair<std::string, std::string>>& cases) {
  for (const auto& [args, named] : cases) {
    std::string cmd = "timeout 20 ";
    cmd.append(binary).append(" ").append(args);
    const wtx::testing::CommandResult r = wtx::testing::RunCommand(cmd);
    INFO(cmd << "\n" << r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains(named));
  }
}

// Every integer flag (or positional) of a bench executable refused past its range with exit 2
// naming the flag, the value and the range (tools/int_option.h): min-1, max+1, 2^63, 2^64, a
// huge value, a negative one and garbage.
void CheckIntegerBounds(const std::string& binary, const std::string& prefix,
                        const std::string& flag, int64_t min, int64_t max) {
  const std::string range = "[" + std::to_string(min) + ", " + std::to_string(max) + "]";
  for (const std::string& v :
       {std::to_string(min - 1), std::to_string(max + 1), std::string("9223372036854775808"),
        std::string("18446744073709551616"), std::string("99999999999999999999999"),
        std::string("-99999999999999999999999"), std::string("0x10"), std::string("7q")}) {
    const std::string cmd =
        "timeout 20 " + binary + " " + prefix + (flag.rfind("--", 0) == 0 ? flag + " " : "") + v;
    const wtx::testing::CommandResult r = wtx::testing::RunCommand(cmd);
    INFO(cmd << "\n" << r.out);
    CHECK(r.code == 2);
    CHECK_THAT(r.out, Catch::Contains(flag) && Catch::Contains(v) && Catch::Contains(range));
  }
}

}  // namespace

TEST_CASE("BenchIntegerFlagsAreCheckedAtTheirBoundaries") {
  CheckIntegerBounds(WTX_COMMIT_BENCH, "", "--repeats", 1, 100000);
  CheckIntegerBounds(WTX_COMMIT_BENCH, "", "--sync-delay-ms", 0, 10000);
  CheckIntegerBounds(WTX_COMMIT_BENCH, "", "--fan-out-threads", 1, 4096);
#ifdef WTX_GPU_BENCH
  CheckIntegerBounds(WTX_GPU_BENCH, "", "HASH_MIB", 1, int64_t{1} << 20);
  CheckIntegerBounds(WTX_GPU_BENCH, "64 ", "SCATTER_N", 1, 1000000000);
#endif
}

TEST_CASE("CommitBenchRefusesBadFlagsNamingTheFlag") {
  CheckRefused(WTX_COMMIT_BENCH, {
                                     {"--inproc a,4", "--inproc: 'a' is not a rank count"},
                                     {"--inproc 0", "--inproc: '0'"},
                                     {"--inproc 4097", "--inproc: '4097'"},
                                     {"--inproc 4,,8", "--inproc: ''"},
                                     {"--inproc 4,", "--inproc: a trailing ','"},
                                     {"--inproc 4x", "--inproc: '4x'"},
                                     {"--tcp 257", "--tcp: '257'"},
                                     {"--tcp -1", "--tcp"},
                                     {"--repeats 0", "--repeats"},
                                     {"--repeats abc", "--repeats"},
                                     {"--repeats", "--repeats"},
                                     {"--sync-delay-ms -1", "--sync-delay-ms"},
                                     {"--sync-delay-ms 10001", "--sync-delay-ms"},
                                     {"--fan-out-threads 0", "--fan-out-threads"},
                                     {"--dir /nonexistent-wtx-bench-dir", "--dir"},
                                     {"--wtx /nonexistent-wtx-binary", "--wtx"},
                                     {"--no-such-flag 1", "--no-such-flag"},
                                 });
}

TEST_CASE("CommitBenchRunsWithAnEmptyListSkippingThatTransport") {
  wtx::testing::TempDir d;
  const wtx::testing::CommandResult r =
      wtx::testing::RunCommand(std::string("timeout 60 ") + WTX_COMMIT_BENCH +
                               " --inproc 2 --tcp '' --repeats 2 --dir " + d.path());
  INFO(r.out);
  CHECK(r.code == 0);
  CHECK_THAT(r.out, Catch::Contains("| inproc | 2 |"));
  CHECK_THAT(r.out, !Catch::Contains("| tcp |"));
}

// `wtx bench --compare OLD.json`: each figure both runs have, old and new, with a verdict
// that follows the figure's goal; a file that is not a bench output is refused before running.
TEST_CASE("BenchCompareReportsEachFigureAgainstAnEarlierRun") {
  wtx::testing::TempDir d;
  const std::string bench = std::string("timeout 120 ") + WTX_BINARY +
                            " bench --quick --only hash --shared-dir " WTX_CONFORMANCE_DIR;
  // An earlier run, hand-made so that the verdicts are known: hash_vs_xxh3 (goal >= 0.95) was
  // 100x better, synced_writes_per_tx (goal <= 2) was 0.5 (the new 2 is 4x worse).
  WriteText(d.sub("old.json"), R"({"hash_vs_xxh3": 100.0, "synced_writes_per_tx": 0.5})");
  wtx::testing::CommandResult r =
      wtx::testing::RunCommand(bench + " --json --compare " + d.sub("old.json"), false);
  INFO(r.out);
  REQUIRE(r.code == 0);
  const nlohmann::json out = nlohmann::json::parse(r.out);
  const nlohmann::json& f = out.at("compare").at("figures");
  CHECK(f.at("hash_vs_xxh3").at("old") == 100.0);
  CHECK(f.at("hash_vs_xxh3").at("new") == out.at("hash_vs_xxh3"));
  CHECK(f.at("hash_vs_xxh3").at("verdict") == "worse");
  CHECK_FALSE(f.contains("update_vs_memcpy"));  // not measured by --only hash
  r = wtx::testing::RunCommand(bench + " --compare " + d.sub("old.json"));
  CHECK_THAT(r.out, Catch::Contains("against " + d.sub("old.json")));
  CHECK_THAT(r.out, Catch::Contains("worse"));
  // Refused before measuring, naming the flag.
  WriteText(d.sub("other.json"), R"({"ranks": 4})");
  CheckRefused(WTX_BINARY, {{"bench --quick --compare " + d.sub("other.json"), "--compare"},
                            {"bench --quick --compare " + d.sub("missing.json"), "--compare"}});
}

#ifdef WTX_GPU_BENCH
TEST_CASE("GpuBenchRefusesBadArgumentsNamingThem") {
  CheckRefused(WTX_GPU_BENCH, {
                                  {"0", "HASH_MIB"},
                                  {"abc", "HASH_MIB"},
                                  {"1048577", "HASH_MIB"},
                                  {"64 0", "SCATTER_N"},
                                  {"64 x", "SCATTER_N"},
                                  {"64 10 3", "not expected: 3"},
                              });
}
#endif
