// The url of a decision log in etcd: "etcd://HOST:PORT[,HOST:PORT...]/PREFIX". Each HOST:PORT
// is one member's client url (its v3 JSON gateway); HOST is a name, an IPv4 address or a
// bracketed IPv6 address ("[::1]:2379"). PREFIX (non-empty, no leading or trailing '/', no
// empty segment) is where every key of the log lives: PREFIX/meta, PREFIX/tx/<tx>, ...
//
// Thread-safety: pure functions and values.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "wtx/status.h"

namespace wtx::etcd {

struct Endpoint {
  std::string host;  // without brackets
  uint16_t port = 0;

  // "host:port" ("[::1]:2379" for IPv6).
  std::string ToString() const;
  bool operator==(const Endpoint&) const = default;
};

struct EtcdUrl {
  std::vector<Endpoint> endpoints;  // non-empty, in the order written
  std::string prefix;

  // "etcd://h:p,h:p/prefix": the url this one was parsed from, normalized.
  std::string ToString() const;
};

// "h:p,h:p" for messages.
std::string EndpointList(const std::vector<Endpoint>& endpoints);

// kInvalidArgument naming what is wrong: the scheme ("etcd://" missing), a member (empty host,
// missing or bad port), the prefix (missing, empty, a trailing '/', an empty segment).
Result<EtcdUrl> ParseEtcdUrl(std::string_view url);

}  // namespace wtx::etcd
