// The benchmark executables refuse bad flags before running anything: exit 2, naming the flag
// (or positional argument) that was wrong. Built only with WTX_BUILD_BENCH.
#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

#include "tests/test_util.h"

namespace {

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

}  // namespace

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
