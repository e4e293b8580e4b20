// The main of the tests that need a real etcd: where no etcd binary is installed, the
// executable exits 77 without running anything, and CTest (SKIP_RETURN_CODE 77) reports each
// of its tests as skipped. Listing the tests (catch_discover_tests at build time) works either
// way.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string_view>

#include "tests/etcd/etcd_cluster.h"

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) {
    if (std::string_view(argv[i]).substr(0, 6) == "--list") listing = true;
  }
  if (!listing && !wtx::testing::EtcdAvailable()) {
    std::fprintf(stderr,
                 "etcd binary absent (/usr/bin/etcd or etcd on PATH): test skipped (exit 77)\n");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
