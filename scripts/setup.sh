#!/usr/bin/env bash
# Installs the Debian packages wtx needs (idempotent). Run as root or with sudo available.
set -euo pipefail
pkgs=(build-essential cmake librocksdb-dev libboost-dev nlohmann-json3-dev catch2 libxxhash-dev libcli11-dev pkg-config
      libssl-dev openssl  # TLS (src/net/tls.cc); the openssl CLI makes test certificates
      clang libclang-rt-14-dev  # clang: scripts/sanitize.sh (sanitizers, libFuzzer)
      etcd-server etcd-client  # the replicated decision log (docs/protocol.md) and its tests
      prometheus-cpp-dev python3-prometheus-client  # metrics (docs/observability.md)
      prometheus  # its server and promtool: tests/prometheus (rules, dashboard, a real scrape)
      pybind11-dev python3-dev python3-torch python3-numpy python3-pytest  # the Python module
      python3-pip python3-setuptools python3-wheel python3-venv mypy)  # pip install ., stubs
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}"
fi
