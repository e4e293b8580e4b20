// TlsFiles: certificate-based mutual TLS for the TCP transport (`--tls-cert`, `--tls-key`,
// `--tls-ca`). All empty (the default): TLS 1.3 with a pre-shared key derived from the shared
// secret. All set: each end presents `cert` (PEM chain, with its PEM private `key`) and
// requires the peer's certificate to chain to `ca` (PEM). Half-set is refused.
#pragma once

#include <string>

namespace wtx {

struct TlsFiles {
  std::string cert;
  std::string key;
  std::string ca;
};

}  // namespace wtx
