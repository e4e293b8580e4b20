#include "src/net/message_transport.h"

#include "src/net/codec.h"
#include "src/net/rank_service.h"

namespace wtx::net {

using nlohmann::json;

namespace {

std::string EncodeReply(const Result<json>& r) {
  json reply;
  if (r.ok()) {
    reply["ok"] = r.value();
  } else {
    reply["err"] = StatusToJson(r.status());
  }
  const std::vector<uint8_t> bytes = json::to_cbor(reply);
  return std::string(bytes.begin(), bytes.end());
}

json DecodeCbor(std::string_view bytes) {
  return json::from_cbor(bytes.begin(), bytes.end(), /*strict=*/true, /*allow_exceptions=*/false);
}

}  // namespace

class MessageTransport::Endpoint : public ParticipantEndpoint {
 public:
  Endpoint(int rank, MessageCarrier* carrier, std::chrono::milliseconds timeout)
      : rank_(rank), carrier_(carrier), timeout_(timeout) {}

  Result<RankDescription> Describe() override {
    WTX_ASSIGN_OR_RETURN(j, Call("describe", json::object(), timeout_));
    auto d = RankDescriptionFromJson(j);
    if (!d.ok()) return Malformed(d.status().message());
    if (d->rank != rank_) return Malformed("it answered for rank " + std::to_string(d->rank));
    return d;
  }

  Status CheckBegin(const BeginRequest& req, std::vector<bool>* holds) override {
    WTX_ASSIGN_OR_RETURN(j, Call("check_begin", {{"req", BeginRequestToJson(req)}}, timeout_));
    auto h = j.is_object() ? j.find("holds") : j.end();
    if (!j.is_object() || h == j.end() || !h->is_array() || h->size() != req.sources.size()) {
      return Malformed("check_begin: bad holds");
    }
    if (holds) {
      holds->clear();
      for (const auto& b : *h) holds->push_back(b.is_boolean() && b.get<bool>());
    }
    return Status::OK();
  }

  Status Begin(const BeginRequest& req) override {
    return Call("begin", {{"req", BeginRequestToJson(req)}}, timeout_).status();
  }

  Result<Vote> Prepare(const std::string& tx, std::chrono::milliseconds timeout) override {
    WTX_ASSIGN_OR_RETURN(j, Call("prepare", {{"tx", tx}}, timeout));
    auto v = VoteFromJson(j);
    if (!v.ok()) return Malformed(v.status().message());
    if (v->rank != rank_) return Malformed("it voted for rank " + std::to_string(v->rank));
    return v;
  }

  Status Decide(const std::string& tx, Decision d, const DecidedVersion& version) override {
    return Call("decide", DecideParams(tx, d, version), timeout_).status();
  }

 private:
  Status Malformed(const std::string& why) const {
    return Status(ErrorCode::kCrashed,
                  "rank " + std::to_string(rank_) + " sent a malformed answer: " + why);
  }

  Result<json> Call(const std::string& method, json params, std::chrono::milliseconds timeout) {
    const std::vector<uint8_t> req = json::to_cbor(json{{"m", method}, {"p", std::move(params)}});
    auto r = (*carrier_)(rank_, std::string(req.begin(), req.end()), timeout);
    if (!r.ok()) {
      if (r.status().code() == ErrorCode::kTimeout) {
        return Status(ErrorCode::kTimeout,
                      "rank " + std::to_string(rank_) + " did not answer '" + method + "' in time");
      }
      return Status(ErrorCode::kCrashed,
                    "rank " + std::to_string(rank_) + " is down: " + r.status().message());
    }
    const json reply = DecodeCbor(r.value());
    if (!reply.is_object()) return Malformed("not a CBOR map");
    if (auto ok = reply.find("ok"); ok != reply.end()) return *ok;
    if (auto err = reply.find("err"); err != reply.end() && err->is_object()) {
      Status s = StatusFromJson(*err);
      if (s.ok()) return Malformed("an error reply without an error");
      return s;
    }
    return Malformed("neither 'ok' nor 'err'");
  }

  const int rank_;
  MessageCarrier* carrier_;
  const std::chrono::milliseconds timeout_;
};

MessageTransport::MessageTransport(int num_ranks, MessageCarrier carrier,
                                   std::chrono::milliseconds request_timeout)
    : carrier_(std::move(carrier)) {
  for (int r = 0; r < num_ranks; ++r) {
    endpoints_.push_back(std::make_unique<Endpoint>(r, &carrier_, request_timeout));
  }
}

MessageTransport::~MessageTransport() = default;

ParticipantEndpoint* MessageTransport::endpoint(int rank) { return endpoints_.at(rank).get(); }

std::string ServeEncodedRequest(Participant& participant, std::string_view request) {
  const json req = DecodeCbor(request);
  auto m = req.is_object() ? req.find("m") : req.end();
  if (!req.is_object() || m == req.end() || !m->is_string()) {
    return EncodeReply(Status::InvalidArgument("malformed request: not a CBOR map with 'm'"));
  }
  return EncodeReply(
      ServeRankRequest(participant, m->get<std::string>(), req.value("p", json::object())));
}

}  // namespace wtx::net
