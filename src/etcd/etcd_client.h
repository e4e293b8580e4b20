// Client: a small etcd v3 client over the members' JSON gateway (POST /v3/kv/range, /v3/kv/txn,
// /v3/kv/put, /v3/kv/deleterange, /v3/lease/grant, /v3/lease/keepalive, /v3/lease/revoke),
// enough for the decision log: transactions with compares, ranges, puts, deletes and leases.
// Keys and values are bytes (base64 on the wire); int64 fields travel as JSON strings.
//
// Contract:
//  * Every call is one request, sent to one member at a time: first the member that answered
//    last, then the others in turn, for options.rounds rounds (100 ms apart). A member that cannot
//    be reached (refused, timed out after options.request_timeout, TLS failure), answers HTTP 5xx,
//    answers a retryable gRPC error
//    ({"error":"etcdserver: no leader","code":14}), a 4xx the client did not cause, or a body
//    that is not the JSON the call expects is skipped. When every member was skipped the call
//    is kDecisionLogUnavailable naming the operation and each member with its last error.
//  * A definitive error from a member (a gRPC NotFound, such as an unknown lease:
//    kNotFound; a gRPC InvalidArgument, FailedPrecondition, OutOfRange, ...: kInvalidArgument)
//    names the member and the operation and is not retried elsewhere.
//  * A request that timed out on one member may still have been applied there; retrying it on
//    the next member is safe for the decision log because each of its writes is guarded by a
//    compare (a second apply fails the compare and reads what the first wrote).
//  * No exception leaves the client: whatever a member sends back is an error, never a crash.
//
// Thread-safety: every method is safe from any thread; each request has its own connection
// and io_context, and the only shared state (which member answered last) is under a mutex.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "src/etcd/etcd_url.h"
#include "src/etcd/http_post.h"
#include "src/util/thread_annotations.h"
#include "wtx/status.h"
#include "wtx/tls_files.h"

namespace wtx::etcd {

struct ClientOptions {
  std::vector<Endpoint> endpoints;                  // REQUIRES: non-empty
  TlsFiles tls;                                     // all empty: plain HTTP (see HttpPoster::Make)
  std::chrono::milliseconds request_timeout{2000};  // each request to one member
  // How many times each member is asked before a call is unavailable: a second round rides out
  // a leader election (a member without a leader times out) after a member died.
  int rounds = 2;
};

// One key as etcd holds it (mvccpb.KeyValue).
struct KeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;
  int64_t version = 0;
  int64_t lease = 0;
};

// One compare of a transaction (etcdserverpb.Compare): the key's `target` against a number
// (CREATE, MOD, VERSION, LEASE) or `value` (VALUE). A key that does not exist has create
// revision, mod revision, version and lease 0.
struct Compare {
  enum class Target { kCreate, kMod, kVersion, kLease, kValue };
  enum class Result { kEqual, kNotEqual, kGreater, kLess };

  std::string key;
  Target target = Target::kCreate;
  Result result = Result::kEqual;
  int64_t number = 0;
  std::string value;

  static Compare CreateRevision(std::string key, Result result, int64_t revision);
  static Compare Value(std::string key, Result result, std::string value);
};

// One operation of a transaction, or a request of its own.
struct Op {
  enum class Kind { kPut, kRange, kDelete };

  Kind kind = Kind::kRange;
  std::string key;
  std::string value;       // kPut
  int64_t lease = 0;       // kPut: 0 for none
  bool prefix = false;     // kRange, kDelete: every key starting with `key`
  bool by_create = false;  // kRange: sorted by create revision (else by key), ascending

  static Op Put(std::string key, std::string value, int64_t lease = 0);
  static Op Get(std::string key);
  static Op GetPrefix(std::string prefix, bool by_create);
  static Op Delete(std::string key);
  static Op DeletePrefix(std::string prefix);
};

// The answer to one Op: the keys a range found, how many keys a delete removed.
struct OpResponse {
  Op::Kind kind = Op::Kind::kRange;
  std::vector<KeyValue> kvs;  // kRange
  int64_t deleted = 0;        // kDelete
};

struct TxnResponse {
  bool succeeded = false;  // every compare held: `success` ran, else `failure`
  int64_t revision = 0;    // the store's revision after the transaction (a put's revision)
  std::vector<OpResponse> responses;  // one per op of the branch that ran, in order
  std::string endpoint;               // the member that answered ("host:port")
};

struct RangeResponse {
  std::vector<KeyValue> kvs;
  int64_t revision = 0;
  std::string endpoint;
};

class Client;

// A client of the members `url` names (ClientOptions' defaults otherwise): what the decision
// log and the fleet registry open. kInvalidArgument for unusable TLS files.
Result<std::unique_ptr<Client>> OpenClientFor(const EtcdUrl& url, const TlsFiles& tls,
                                              std::chrono::milliseconds request_timeout);

// A lease TTL as etcd takes it: whole seconds, at least `ttl` and at least 1.
inline int64_t LeaseSeconds(std::chrono::milliseconds ttl) {
  return std::max<int64_t>(1, (ttl.count() + 999) / 1000);
}

// The range end that makes [prefix, end) every key starting with `prefix` ("\0" for "").
std::string PrefixRangeEnd(std::string_view prefix);

class Client {
 public:
  // kInvalidArgument for no endpoint or unusable TLS files (HttpPoster::Make).
  static Result<std::unique_ptr<Client>> Open(ClientOptions options);

  // `what` names the operation in errors ("decide tx 'a' (key wtx/tx/a)").
  Result<TxnResponse> Txn(const std::vector<Compare>& compares, const std::vector<Op>& success,
                          const std::vector<Op>& failure, std::string_view what);
  // REQUIRES: op.kind == kRange.
  Result<RangeResponse> Range(const Op& op, std::string_view what);
  // The revision of the put.
  Result<int64_t> Put(const std::string& key, const std::string& value, int64_t lease,
                      std::string_view what);
  // How many keys were deleted. REQUIRES: op.kind == kDelete.
  Result<int64_t> DeleteRange(const Op& op, std::string_view what);

  // A new lease of `ttl_seconds` (>= 1); returns its id.
  Result<int64_t> LeaseGrant(int64_t ttl_seconds, std::string_view what);
  // Renews lease `id`; returns its remaining TTL in seconds, 0 when the lease is gone
  // (expired or revoked). `member_timeout` (when positive) replaces the request timeout for
  // each member, so that a member stalled by an election is left for the next one in time.
  Result<int64_t> LeaseKeepAlive(int64_t id, std::string_view what,
                                 std::chrono::milliseconds member_timeout = {});
  // Revokes lease `id` and deletes the keys attached to it. kNotFound when it is gone already.
  Status LeaseRevoke(int64_t id, std::string_view what);

  const std::vector<Endpoint>& endpoints() const { return options_.endpoints; }
  std::chrono::milliseconds request_timeout() const { return options_.request_timeout; }

  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

 private:
  // Reads a member's JSON answer into the caller's result; an error makes it that member's
  // failure (a malformed answer), and the next member is asked.
  using Decoder = std::function<Status(const nlohmann::json&)>;

  Client(ClientOptions options, std::unique_ptr<HttpPoster> poster);

  // POSTs `body` to `target` on each member in turn until one gives an answer that `decode`
  // accepts; returns that member ("host:port"). Each member gets `timeout`, or the request
  // timeout when it is not positive.
  Result<std::string> Call(std::string_view target, const std::string& body, std::string_view what,
                           const Decoder& decode, std::chrono::milliseconds timeout = {});

  const ClientOptions options_;
  const std::unique_ptr<HttpPoster> poster_;
  std::mutex mu_;
  size_t preferred_ GUARDED_BY(mu_) = 0;  // the member that answered last
};

}  // namespace wtx::etcd
