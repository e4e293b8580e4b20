// MessageTransport: a Transport whose calls travel as opaque encoded messages through a carrier
// the embedder supplies — how the Python module runs two-phase commit over the engine's own
// torch.distributed process group (wtx.torch_dist) without a second implementation of the
// protocol. The coordinator side encodes each endpoint call as a request message; the carrier
// delivers it to the rank and returns the rank's reply message; the rank side answers requests
// with ServeEncodedRequest, i.e. the TCP rank agent's dispatch (rank_service.h).
//
// Messages are CBOR maps: a request {"m": method, "p": params} (params as in docs/protocol.md,
// "Transport"), a reply {"ok": result} or {"err": {"code", "message"}}.
//
// Contract: the carrier returns the reply bytes, or kCrashed (the rank is gone) / kTimeout (no
// answer in time); any other carrier error is treated as kCrashed. An undecodable reply, or an
// answer naming another rank, is kCrashed. ServeEncodedRequest never fails: malformed requests
// get an error reply.
//
// Thread-safety: endpoint calls to distinct ranks may run concurrently if the carrier allows it;
// the coordinator calls one at a time.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "wtx/participant.h"
#include "wtx/transport.h"

namespace wtx::net {

using MessageCarrier = std::function<Result<std::string>(int rank, const std::string& request,
                                                         std::chrono::milliseconds timeout)>;

class MessageTransport : public Transport {
 public:
  // `request_timeout` bounds every call but prepare (which uses the coordinator's timeout).
  MessageTransport(int num_ranks, MessageCarrier carrier,
                   std::chrono::milliseconds request_timeout = std::chrono::seconds(30));
  ~MessageTransport() override;

  int num_ranks() const override { return static_cast<int>(endpoints_.size()); }
  ParticipantEndpoint* endpoint(int rank) override;

 private:
  class Endpoint;
  MessageCarrier carrier_;
  std::vector<std::unique_ptr<Endpoint>> endpoints_;
};

// The rank side: decodes `request`, serves it against `participant` (ServeRankRequest) and
// returns the encoded reply.
std::string ServeEncodedRequest(Participant& participant, std::string_view request);

}  // namespace wtx::net
