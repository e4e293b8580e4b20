#include "src/etcd/etcd_url.h"

#include <charconv>

namespace wtx::etcd {

namespace {

constexpr std::string_view kEtcdScheme = "etcd://";

Status BadUrl(std::string_view url, const std::string& what) {
  return Status::InvalidArgument("decision log url '" + std::string(url) + "': " + what);
}

bool IsHostChar(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
         c == '.' || c == '_';
}

Result<Endpoint> ParseMember(std::string_view url, std::string_view member) {
  const std::string quoted = "member '" + std::string(member) + "'";
  Endpoint ep;
  std::string_view rest;
  if (!member.empty() && member.front() == '[') {
    const size_t close = member.find(']');
    if (close == std::string_view::npos) return BadUrl(url, quoted + ": unclosed '['");
    ep.host = std::string(member.substr(1, close - 1));
    for (char c : ep.host) {
      const bool hex = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
      if (!hex && c != ':' && c != '.') {
        return BadUrl(url, quoted + ": bad IPv6 address '" + ep.host + "'");
      }
    }
    rest = member.substr(close + 1);
  } else {
    const size_t colon = member.rfind(':');
    ep.host =
        std::string(member.substr(0, colon == std::string_view::npos ? member.size() : colon));
    rest = colon == std::string_view::npos ? std::string_view() : member.substr(colon);
    for (char c : ep.host) {
      if (!IsHostChar(c)) return BadUrl(url, quoted + ": bad host '" + ep.host + "'");
    }
  }
  if (ep.host.empty()) return BadUrl(url, quoted + ": empty host");
  if (rest.empty() || rest.front() != ':') {
    return BadUrl(url, quoted + ": missing port (HOST:PORT)");
  }
  const std::string_view port = rest.substr(1);
  unsigned value = 0;
  const auto [end, ec] = std::from_chars(port.data(), port.data() + port.size(), value);
  if (port.empty() || ec != std::errc() || end != port.data() + port.size() || value == 0 ||
      value > 65535) {
    return BadUrl(url, quoted + ": bad port '" + std::string(port) + "' (1..65535)");
  }
  ep.port = static_cast<uint16_t>(value);
  return ep;
}

}  // namespace

std::string Endpoint::ToString() const {
  const bool v6 = host.find(':') != std::string::npos;
  return (v6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
}

std::string EndpointList(const std::vector<Endpoint>& endpoints) {
  std::string out;
  for (const Endpoint& ep : endpoints) {
    if (!out.empty()) out += ',';
    out += ep.ToString();
  }
  return out;
}

std::string EtcdUrl::ToString() const {
  return std::string(kEtcdScheme) + EndpointList(endpoints) + "/" + prefix;
}

Result<EtcdUrl> ParseEtcdUrl(std::string_view url) {
  if (url.substr(0, kEtcdScheme.size()) != kEtcdScheme) {
    return BadUrl(url, "missing scheme (etcd://HOST:PORT[,HOST:PORT...]/PREFIX)");
  }
  const std::string_view rest = url.substr(kEtcdScheme.size());
  const size_t slash = rest.find('/');
  if (slash == std::string_view::npos) return BadUrl(url, "missing /PREFIX after the members");
  const std::string_view members = rest.substr(0, slash);
  EtcdUrl out;
  out.prefix = std::string(rest.substr(slash + 1));
  if (members.empty()) return BadUrl(url, "no member (empty host)");
  size_t start = 0;
  while (true) {
    const size_t comma = members.find(',', start);
    const std::string_view member = members.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    WTX_ASSIGN_OR_RETURN(ep, ParseMember(url, member));
    out.endpoints.push_back(std::move(ep));
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (out.prefix.empty()) return BadUrl(url, "empty prefix (etcd://.../PREFIX)");
  if (out.prefix.front() == '/') {
    return BadUrl(url, "prefix '" + out.prefix + "' starts with '/'");
  }
  if (out.prefix.back() == '/') return BadUrl(url, "prefix '" + out.prefix + "' ends with '/'");
  if (out.prefix.find("//") != std::string::npos) {
    return BadUrl(url, "prefix '" + out.prefix + "' has an empty segment ('//')");
  }
  return out;
}

}  // namespace wtx::etcd
