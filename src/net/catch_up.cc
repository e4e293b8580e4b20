#include "src/net/catch_up.h"

#include <algorithm>
#include <optional>
#include <utility>
#include <vector>

#include "src/net/control.h"
#include "src/net/control_codec.h"
#include "src/util/json_number.h"

namespace wtx::net {

namespace {

using nlohmann::json;

// Why the rank does not serve exactly `version` with nothing open; nullopt when it does.
std::optional<std::string> NotServing(const RankStatus& st, const std::string& version) {
  if (st.active_tx) return "transaction '" + *st.active_tx + "' is open on it";
  if (!st.version) return "it has committed no version";
  if (*st.version != version) return "it serves version " + *st.version + ", not " + version;
  if (!st.serving) return "it does not serve (" + st.held.value_or("dirty or not loaded") + ")";
  return std::nullopt;
}

// The largest piece one read_live answer carries: well under the frame limit.
size_t PieceBytes(const NetOptions& net) {
  return std::max<size_t>(4096, std::min<size_t>(size_t{8} << 20, net.max_frame_bytes / 2));
}

}  // namespace

Result<json> ReadLive(Participant& p, const json& q) {
  WTX_ASSIGN_OR_RETURN(param, StringParam(q, "read_live", "param"));
  WTX_ASSIGN_OR_RETURN(version, StringParam(q, "read_live", "version"));
  const auto index = p.manifest().FindParam(param);
  if (!index) {
    return Status::Error(ErrorCode::kUnknownParam,
                         "read_live.param: '" + param + "' is no parameter of this rank");
  }
  const int64_t size = static_cast<int64_t>(p.memory().Size(*index));
  WTX_ASSIGN_OR_RETURN(offset, JsonInt(Param(q, "offset"), "read_live.offset", 0, size));
  WTX_ASSIGN_OR_RETURN(length, JsonInt(Param(q, "length"), "read_live.length", 0, size - offset));
  const RankStatus before = p.status();
  const std::string rank = "rank " + std::to_string(before.rank);
  if (auto why = NotServing(before, version)) {
    return Status::Error(ErrorCode::kVersionMismatch, rank + " cannot be copied from: " + *why);
  }
  std::vector<uint8_t> bytes(static_cast<size_t>(length));
  WTX_RETURN_IF_ERROR(
      p.memory().Load(*index, static_cast<size_t>(offset), bytes.data(), bytes.size()));
  // The bytes count only if the same version was served, with nothing open, all along.
  const RankStatus after = p.status();
  if (auto why = NotServing(after, version); why || after.committed_tx != before.committed_tx) {
    return Status::Error(ErrorCode::kVersionMismatch,
                         rank + " changed its version while '" + param +
                             "' was read: " + why.value_or("another transaction committed"));
  }
  json out = {{"fingerprint", p.Describe().fingerprint},
              {"version", version},
              {"served_digest", after.served_digest.value_or(version)},
              {"lineage", after.lineage},
              {"step", after.step ? json(*after.step) : json()},
              {"data", json::binary(std::move(bytes))}};
  if (p.manifest().params()[*index].served) {
    const auto digest = p.CommittedCheckpointDigest(*index);
    if (!digest) {
      return Status::Error(ErrorCode::kVersionMismatch,
                           rank +
                               " cannot be copied from: it does not know the checkpoint digest "
                               "of processed parameter '" +
                               param + "' (reattach it first)");
    }
    out["checkpoint_digest"] = *digest;
  }
  return out;
}

Result<CatchUpCopy> CatchUpFromPeer(Participant& p, const json& q, const CatchUpOptions& options) {
  WTX_ASSIGN_OR_RETURN(peer, StringParam(q, "catch_up", "peer"));
  WTX_ASSIGN_OR_RETURN(version, StringParam(q, "catch_up", "version"));
  WTX_ASSIGN_OR_RETURN(hp, ParseHostPort(peer));
  const std::string who = "peer " + peer;
  auto client = ControlClient::Connect(hp.first, hp.second, options.secret, options.net,
                                       "catch-up-from-" + peer);
  if (!client.ok()) {
    return Status(client.status().code(), who + ": " + client.status().message());
  }
  const std::string fingerprint = p.Describe().fingerprint;
  const size_t piece = PieceBytes(options.net);
  CatchUpCopy copied;
  const auto& params = p.manifest().params();
  for (uint32_t i = 0; i < params.size(); ++i) {
    const std::string& name = params[i].name;
    const size_t size = p.memory().Size(i);
    std::vector<uint8_t> bytes(size);
    std::optional<uint64_t> checkpoint;  // a processed parameter's, from the peer
    for (size_t offset = 0; offset < size || (size == 0 && offset == 0); offset += piece) {
      const size_t length = std::min(piece, size - offset);
      auto answer = client.value()->Call(
          "read_live",
          json{{"param", name}, {"offset", offset}, {"length", length}, {"version", version}},
          options.request_timeout);
      if (!answer.ok()) {
        return Status(answer.status().code(),
                      who + " (reading '" + name + "'): " + answer.status().message());
      }
      const json& a = answer.value();
      if (!a.is_object() || a.value("fingerprint", std::string()) != fingerprint) {
        return Status::Error(ErrorCode::kManifestMismatch,
                             who + " has another layout (fingerprint " +
                                 (a.is_object() ? a.value("fingerprint", std::string("?")) : "?") +
                                 ", this rank's " + fingerprint + ")");
      }
      const auto data = a.find("data");
      if (data == a.end() || !data->is_binary() || data->get_binary().size() != length) {
        return Status::InvalidArgument(who + " answered '" + name + "' at " +
                                       std::to_string(offset) + " without its " +
                                       std::to_string(length) + " bytes");
      }
      std::copy(data->get_binary().begin(), data->get_binary().end(), bytes.begin() + offset);
      copied.bytes += static_cast<int64_t>(length);
      copied.served_digest = a.value("served_digest", version);
      if (auto c = a.find("checkpoint_digest"); c != a.end() && c->is_number_unsigned()) {
        checkpoint = c->get<uint64_t>();
      }
      if (size == 0) break;
    }
    if (params[i].served) {
      if (!checkpoint) {
        return Status::Error(
            ErrorCode::kVersionMismatch,
            who + " sent processed parameter '" + name + "' without its checkpoint digest");
      }
      WTX_RETURN_IF_ERROR(p.AdoptServed(name, bytes.data(), bytes.size(), *checkpoint));
      continue;
    }
    WritePiece w;
    w.param = name;
    w.data = bytes.data();
    w.bytes = bytes.size();
    WTX_RETURN_IF_ERROR(p.Write(std::span<const WritePiece>(&w, 1)));
  }
  if (!p.manifest().derived().empty()) WTX_RETURN_IF_ERROR(p.Refresh("*").status());
  return copied;
}

}  // namespace wtx::net
