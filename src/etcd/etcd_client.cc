#include "src/etcd/etcd_client.h"

#include <nlohmann/json.hpp>

#include <charconv>
#include <functional>
#include <thread>
#include <utility>

#include "src/etcd/base64.h"

namespace wtx::etcd {

namespace {

using nlohmann::json;

// Reads an int64 field of etcd's JSON: a decimal string ("create_revision":"2") or a number;
// an absent field is 0. False for any other type or text.
bool ReadInt64(const json& obj, const char* name, int64_t* out) {
  *out = 0;
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return true;
  if (it->is_number_integer()) {
    *out = it->get<int64_t>();
    return true;
  }
  if (!it->is_string()) return false;
  const std::string& s = it->get_ref<const std::string&>();
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return !s.empty() && ec == std::errc() && end == s.data() + s.size();
}

bool ReadBool(const json& obj, const char* name, bool* out) {
  *out = false;  // proto3 JSON omits a false bool
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return true;
  if (!it->is_boolean()) return false;
  *out = it->get<bool>();
  return true;
}

// A base64 bytes field; absent is empty.
bool ReadBytes(const json& obj, const char* name, std::string* out) {
  out->clear();
  const auto it = obj.find(name);
  if (it == obj.end() || it->is_null()) return true;
  if (!it->is_string()) return false;
  auto bytes = Base64Decode(it->get_ref<const std::string&>());
  if (!bytes) return false;
  *out = std::move(*bytes);
  return true;
}

Status Garbage(const std::string& what) {
  return Status::InvalidArgument("the answer is not etcd's: " + what);
}

Status ReadRevision(const json& answer, int64_t* revision) {
  *revision = 0;
  const auto it = answer.find("header");
  if (it == answer.end()) return Status::OK();
  if (!it->is_object() || !ReadInt64(*it, "revision", revision)) {
    return Garbage("bad header.revision");
  }
  return Status::OK();
}

Status ReadKvs(const json& obj, std::vector<KeyValue>* kvs) {
  kvs->clear();
  const auto it = obj.find("kvs");
  if (it == obj.end() || it->is_null()) return Status::OK();
  if (!it->is_array()) return Garbage("'kvs' is not an array");
  for (const json& j : *it) {
    KeyValue kv;
    if (!j.is_object() || !ReadBytes(j, "key", &kv.key) || !ReadBytes(j, "value", &kv.value) ||
        !ReadInt64(j, "create_revision", &kv.create_revision) ||
        !ReadInt64(j, "mod_revision", &kv.mod_revision) || !ReadInt64(j, "version", &kv.version) ||
        !ReadInt64(j, "lease", &kv.lease)) {
      return Garbage("a key-value in 'kvs' does not decode");
    }
    kvs->push_back(std::move(kv));
  }
  return Status::OK();
}

std::string Num(int64_t v) { return std::to_string(v); }

json RangeRequest(const Op& op) {
  json j = {{"key", Base64Encode(op.key)}};
  if (op.prefix) j["range_end"] = Base64Encode(PrefixRangeEnd(op.key));
  if (op.by_create) {
    j["sort_order"] = "ASCEND";
    j["sort_target"] = "CREATE";
  }
  return j;
}

json PutRequest(const Op& op) {
  json j = {{"key", Base64Encode(op.key)}, {"value", Base64Encode(op.value)}};
  if (op.lease != 0) j["lease"] = Num(op.lease);
  return j;
}

json DeleteRequest(const Op& op) {
  json j = {{"key", Base64Encode(op.key)}};
  if (op.prefix) j["range_end"] = Base64Encode(PrefixRangeEnd(op.key));
  return j;
}

json RequestOp(const Op& op) {
  switch (op.kind) {
    case Op::Kind::kPut:
      return {{"request_put", PutRequest(op)}};
    case Op::Kind::kRange:
      return {{"request_range", RangeRequest(op)}};
    case Op::Kind::kDelete:
      return {{"request_delete_range", DeleteRequest(op)}};
  }
  return json::object();
}

json CompareJson(const Compare& c) {
  static const char* const kTargets[] = {"CREATE", "MOD", "VERSION", "LEASE", "VALUE"};
  static const char* const kResults[] = {"EQUAL", "NOT_EQUAL", "GREATER", "LESS"};
  json j = {{"key", Base64Encode(c.key)},
            {"target", kTargets[static_cast<int>(c.target)]},
            {"result", kResults[static_cast<int>(c.result)]}};
  switch (c.target) {
    case Compare::Target::kCreate:
      j["create_revision"] = Num(c.number);
      break;
    case Compare::Target::kMod:
      j["mod_revision"] = Num(c.number);
      break;
    case Compare::Target::kVersion:
      j["version"] = Num(c.number);
      break;
    case Compare::Target::kLease:
      j["lease"] = Num(c.number);
      break;
    case Compare::Target::kValue:
      j["value"] = Base64Encode(c.value);
      break;
  }
  return j;
}

Status ReadOpResponse(const json& j, const Op& op, OpResponse* out) {
  out->kind = op.kind;
  static const char* const kNames[] = {"response_put", "response_range", "response_delete_range"};
  const char* name = kNames[static_cast<int>(op.kind)];
  if (!j.is_object() || j.size() != 1 || !j.contains(name) || !j[name].is_object()) {
    return Garbage(std::string("a transaction response is not the '") + name + "' expected");
  }
  const json& r = j[name];
  if (op.kind == Op::Kind::kRange) return ReadKvs(r, &out->kvs);
  if (op.kind == Op::Kind::kDelete && !ReadInt64(r, "deleted", &out->deleted)) {
    return Garbage("bad 'deleted'");
  }
  return Status::OK();
}

// gRPC codes that say "this member cannot answer now; another may" (the rest are answers).
bool RetryableGrpcCode(int64_t code) {
  switch (code) {
    case 1:   // Cancelled
    case 2:   // Unknown
    case 4:   // DeadlineExceeded ("etcdserver: request timed out")
    case 8:   // ResourceExhausted ("etcdserver: too many requests")
    case 10:  // Aborted
    case 13:  // Internal
    case 14:  // Unavailable ("etcdserver: no leader", "leader changed")
      return true;
    default:
      return false;
  }
}

// A short, printable quote of what a member sent.
std::string Snippet(std::string_view body) {
  std::string out;
  for (char c : body.substr(0, 120)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (body.size() > 120) out += "...";
  return "'" + out + "'";
}

// The error a gRPC error body carries: {"error":"...","code":14} (unary calls) or
// {"error":{"grpc_code":14,"message":"..."}} (streaming calls such as the keepalive).
bool GrpcError(const json& j, int64_t* code, std::string* message) {
  if (!j.is_object()) return false;
  const auto it = j.find("error");
  if (it == j.end()) return false;
  *code = 2;
  if (it->is_string()) {
    *message = it->get<std::string>();
    const auto c = j.find("code");
    if (c != j.end() && c->is_number_integer()) *code = c->get<int64_t>();
    return true;
  }
  if (it->is_object()) {
    const auto c = it->find("grpc_code");
    if (c != it->end() && c->is_number_integer()) *code = c->get<int64_t>();
    const auto m = it->find("message");
    *message = (m != it->end() && m->is_string()) ? m->get<std::string>() : it->dump();
    return true;
  }
  return false;
}

}  // namespace

Result<std::unique_ptr<Client>> OpenClientFor(const EtcdUrl& url, const TlsFiles& tls,
                                              std::chrono::milliseconds request_timeout) {
  ClientOptions options;
  options.endpoints = url.endpoints;
  options.tls = tls;
  options.request_timeout = request_timeout;
  return Client::Open(std::move(options));
}

Compare Compare::CreateRevision(std::string key, Result result, int64_t revision) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kCreate;
  c.result = result;
  c.number = revision;
  return c;
}

Compare Compare::Value(std::string key, Result result, std::string value) {
  Compare c;
  c.key = std::move(key);
  c.target = Target::kValue;
  c.result = result;
  c.value = std::move(value);
  return c;
}

Op Op::Put(std::string key, std::string value, int64_t lease) {
  Op op;
  op.kind = Kind::kPut;
  op.key = std::move(key);
  op.value = std::move(value);
  op.lease = lease;
  return op;
}

Op Op::Get(std::string key) {
  Op op;
  op.key = std::move(key);
  return op;
}

Op Op::GetPrefix(std::string prefix, bool by_create) {
  Op op;
  op.key = std::move(prefix);
  op.prefix = true;
  op.by_create = by_create;
  return op;
}

Op Op::Delete(std::string key) {
  Op op;
  op.kind = Kind::kDelete;
  op.key = std::move(key);
  return op;
}

Op Op::DeletePrefix(std::string prefix) {
  Op op = Delete(std::move(prefix));
  op.prefix = true;
  return op;
}

std::string PrefixRangeEnd(std::string_view prefix) {
  std::string end(prefix);
  while (!end.empty()) {
    unsigned char& last = reinterpret_cast<unsigned char&>(end.back());
    if (last < 0xff) {
      ++last;
      return end;
    }
    end.pop_back();  // "ab\xff" -> "ac"
  }
  return std::string(1, '\0');  // every key
}

Client::Client(ClientOptions options, std::unique_ptr<HttpPoster> poster)
    : options_(std::move(options)), poster_(std::move(poster)) {}

Result<std::unique_ptr<Client>> Client::Open(ClientOptions options) {
  if (options.endpoints.empty()) return Status::InvalidArgument("etcd: no member to ask");
  if (options.rounds < 1) return Status::InvalidArgument("etcd: rounds must be at least 1");
  if (options.request_timeout.count() <= 0) {
    return Status::InvalidArgument("etcd: the request timeout must be positive");
  }
  WTX_ASSIGN_OR_RETURN(poster, HttpPoster::Make(options.tls));
  return std::unique_ptr<Client>(new Client(std::move(options), std::move(poster)));
}

Result<std::string> Client::Call(std::string_view target, const std::string& body,
                                 std::string_view what, const Decoder& decode,
                                 std::chrono::milliseconds timeout) {
  const size_t n = options_.endpoints.size();
  const std::chrono::milliseconds per_member =
      timeout.count() > 0 ? timeout : options_.request_timeout;
  size_t start;
  {
    std::lock_guard<std::mutex> lock(mu_);
    start = preferred_;
  }
  std::vector<std::string> errors(n);
  for (size_t i = 0; i < n * static_cast<size_t>(options_.rounds); ++i) {
    if (i > 0 && i % n == 0) std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const size_t index = (start + i) % n;
    const Endpoint& ep = options_.endpoints[index];
    const std::string name = ep.ToString();
    std::string error;
    auto reply = poster_->Post(ep, target, body, per_member);
    if (!reply.ok()) {
      error = reply.status().message();
    } else {
      const json j = json::parse(reply->body, nullptr, /*allow_exceptions=*/false);
      int64_t code = 0;
      std::string message;
      const bool ok_status = reply->status >= 200 && reply->status < 300;
      if (GrpcError(j, &code, &message)) {
        if (!RetryableGrpcCode(code)) {
          const ErrorCode ec = code == 5 ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument;
          return Status(ec, "etcd member " + name + " refused to " + std::string(what) + ": " +
                                message + " (gRPC code " + std::to_string(code) + ")");
        }
        error = message + " (gRPC code " + std::to_string(code) + ")";
      } else if (!ok_status) {
        error = "HTTP " + std::to_string(reply->status) + ": " + Snippet(reply->body);
      } else if (!j.is_object()) {
        error = "the answer is not JSON: " + Snippet(reply->body);
      } else {
        Status decoded;
        try {
          decoded = decode(j);
        } catch (const std::exception& e) {  // a JSON type the decoder did not expect
          decoded = Garbage(e.what());
        }
        if (decoded.ok()) {
          std::lock_guard<std::mutex> lock(mu_);
          preferred_ = index;
          return name;
        }
        error = decoded.message() + ": " + Snippet(reply->body);
      }
    }
    errors[index] = name + " (" + error + ")";
  }
  std::string all;
  for (size_t i = 0; i < n; ++i) {  // in the order they were asked
    if (!all.empty()) all += "; ";
    all += errors[(start + i) % n];
  }
  return Status(ErrorCode::kDecisionLogUnavailable,
                "etcd unavailable: could not " + std::string(what) + " on any member: " + all);
}

Result<TxnResponse> Client::Txn(const std::vector<Compare>& compares,
                                const std::vector<Op>& success, const std::vector<Op>& failure,
                                std::string_view what) {
  json req = {{"compare", json::array()}, {"success", json::array()}, {"failure", json::array()}};
  for (const Compare& c : compares) req["compare"].push_back(CompareJson(c));
  for (const Op& op : success) req["success"].push_back(RequestOp(op));
  for (const Op& op : failure) req["failure"].push_back(RequestOp(op));
  TxnResponse out;
  auto decode = [&](const json& body) -> Status {
    out = TxnResponse();
    WTX_RETURN_IF_ERROR(ReadRevision(body, &out.revision));
    if (!ReadBool(body, "succeeded", &out.succeeded)) return Garbage("bad 'succeeded'");
    const std::vector<Op>& ops = out.succeeded ? success : failure;
    const auto it = body.find("responses");
    const json empty = json::array();
    const json& responses = it == body.end() || it->is_null() ? empty : *it;
    if (!responses.is_array() || responses.size() != ops.size()) {
      return Garbage("'responses' does not answer the transaction's " + std::to_string(ops.size()) +
                     " operations");
    }
    for (size_t i = 0; i < ops.size(); ++i) {
      OpResponse r;
      WTX_RETURN_IF_ERROR(ReadOpResponse(responses[i], ops[i], &r));
      out.responses.push_back(std::move(r));
    }
    return Status::OK();
  };
  WTX_ASSIGN_OR_RETURN(endpoint, Call("/v3/kv/txn", req.dump(), what, decode));
  out.endpoint = std::move(endpoint);
  return out;
}

Result<RangeResponse> Client::Range(const Op& op, std::string_view what) {
  RangeResponse out;
  auto decode = [&](const json& body) -> Status {
    WTX_RETURN_IF_ERROR(ReadRevision(body, &out.revision));
    return ReadKvs(body, &out.kvs);
  };
  WTX_ASSIGN_OR_RETURN(endpoint, Call("/v3/kv/range", RangeRequest(op).dump(), what, decode));
  out.endpoint = std::move(endpoint);
  return out;
}

Result<int64_t> Client::Put(const std::string& key, const std::string& value, int64_t lease,
                            std::string_view what) {
  int64_t revision = 0;
  auto decode = [&](const json& body) { return ReadRevision(body, &revision); };
  WTX_RETURN_IF_ERROR(
      Call("/v3/kv/put", PutRequest(Op::Put(key, value, lease)).dump(), what, decode).status());
  return revision;
}

Result<int64_t> Client::DeleteRange(const Op& op, std::string_view what) {
  int64_t deleted = 0;
  auto decode = [&](const json& body) {
    return ReadInt64(body, "deleted", &deleted) ? Status::OK() : Garbage("bad 'deleted'");
  };
  WTX_RETURN_IF_ERROR(Call("/v3/kv/deleterange", DeleteRequest(op).dump(), what, decode).status());
  return deleted;
}

Result<int64_t> Client::LeaseGrant(int64_t ttl_seconds, std::string_view what) {
  const json req = {{"TTL", Num(ttl_seconds)}};
  int64_t id = 0;
  auto decode = [&](const json& body) {
    return ReadInt64(body, "ID", &id) && id != 0 ? Status::OK() : Garbage("no lease 'ID'");
  };
  WTX_RETURN_IF_ERROR(Call("/v3/lease/grant", req.dump(), what, decode).status());
  return id;
}

Result<int64_t> Client::LeaseKeepAlive(int64_t id, std::string_view what,
                                       std::chrono::milliseconds member_timeout) {
  const json req = {{"ID", Num(id)}};
  int64_t ttl = 0;
  auto decode = [&](const json& body) {
    const auto it = body.find("result");
    return it != body.end() && it->is_object() && ReadInt64(*it, "TTL", &ttl)
               ? Status::OK()
               : Garbage("no keepalive 'result'");
  };
  WTX_RETURN_IF_ERROR(
      Call("/v3/lease/keepalive", req.dump(), what, decode, member_timeout).status());
  return ttl < 0 ? 0 : ttl;
}

Status Client::LeaseRevoke(int64_t id, std::string_view what) {
  const json req = {{"ID", Num(id)}};
  auto decode = [](const json&) { return Status::OK(); };
  return Call("/v3/lease/revoke", req.dump(), what, decode).status();
}

}  // namespace wtx::etcd
