// Helpers the channel's source files share (channel.cc, channel_handshake.cc,
// channel_accept.cc): the length in a frame header, a socket's peer address and a duration for
// log lines and errors. Not an interface: only src/net/channel*.cc include it.
//
// Thread-safety: pure functions, safe from any thread (Address reads the socket it is given).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

#include "src/net/channel.h"

namespace wtx::net::channel_internal {

inline uint32_t ReadBe32(const uint8_t* p) {
  return (uint32_t{p[0]} << 24) | (uint32_t{p[1]} << 16) | (uint32_t{p[2]} << 8) | uint32_t{p[3]};
}

inline std::string Address(const tcp::socket& s) {
  boost::system::error_code ec;
  auto ep = s.remote_endpoint(ec);
  if (ec) return "(unknown peer)";
  return ep.address().to_string() + ":" + std::to_string(ep.port());
}

inline std::string Ms(std::chrono::milliseconds d) { return std::to_string(d.count()) + " ms"; }

}  // namespace wtx::net::channel_internal
