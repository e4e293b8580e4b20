// TcpTransport::Impl: acceptor, rank registry and the per-rank endpoint proxies.
#include "wtx/tcp_transport.h"

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>

#include "src/net/channel.h"
#include "src/net/codec.h"
#include "src/util/thread_annotations.h"

namespace wtx {

using nlohmann::json;
namespace asio = net::asio;
using net::tcp;

class TcpTransport::Impl {
 public:
  explicit Impl(const TcpTransportOptions& o);
  ~Impl();
  void Shutdown() {
    std::call_once(shutdown_once_, [this] { ShutdownOnce(); });
  }
  void ShutdownOnce() {
    net::CloseAcceptorOnLoop(loop_, acceptor_);
    std::vector<std::shared_ptr<net::Channel>> all;
    {
      std::lock_guard<std::mutex> l(mu_);
      for (auto& [r, c] : ranks_) all.push_back(c);
      for (auto& c : controls_) all.push_back(c);
      ranks_.clear();
      controls_.clear();
      stopping_ = true;
    }
    cv_.notify_all();
    for (auto& c : all) c->Close();
    loop_.Stop();
  }

  Status Listen() {
    boost::system::error_code ec;
    auto addr = asio::ip::make_address(options_.listen_host, ec);
    if (ec) {
      return Status::InvalidArgument("listen address '" + options_.listen_host +
                                     "' is not an IP address");
    }
    tcp::endpoint ep(addr, options_.port);
    acceptor_.open(ep.protocol(), ec);
    if (!ec) acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
    if (!ec) acceptor_.bind(ep, ec);
    if (!ec) acceptor_.listen(asio::socket_base::max_listen_connections, ec);
    if (ec) {
      return Status::IOError("cannot listen on " + options_.listen_host + ":" +
                             std::to_string(options_.port) + ": " + ec.message());
    }
    port_ = acceptor_.local_endpoint().port();
    auto tls = net::MakeTlsContext(true, options_.secret, options_.tls);
    if (!tls.ok()) return tls.status();
    tls_ = std::move(tls).value();
    accept_loop_ = std::make_shared<net::AcceptLoop>(
        loop_, acceptor_, options_.max_connections, options_.log_tag,
        [this](tcp::socket socket, std::shared_ptr<void> slot) {
          net::AcceptHandshake(
              loop_, std::move(socket), tls_, options_.secret, net_, options_.log_tag,
              [this](const net::PeerIdentity& p) { return Authorize(p); },
              [this](const std::shared_ptr<net::Channel>& c) { Install(c); },
              [this](const std::string& m, const json& p) { return Serve(m, p); },
              [this](net::Channel* c) { Closed(c); }, std::move(slot));
        });
    accept_loop_->Start();
    return Status::OK();
  }

  uint16_t port() const { return port_; }

  void SetEpoch(int64_t epoch) { epoch_.store(epoch); }
  int64_t epoch() const { return epoch_.load(); }
  void SetOracle(DecisionOracle* o) {
    std::lock_guard<std::mutex> l(mu_);
    oracle_ = o;
  }
  void SetControlHandler(ControlHandler h) {
    std::lock_guard<std::mutex> l(mu_);
    control_ = std::move(h);
  }
  void SetOnRegistered(std::function<void(int)> fn) {
    std::lock_guard<std::mutex> l(mu_);
    on_registered_ = std::move(fn);
  }

  std::vector<int> Connected() const {
    std::lock_guard<std::mutex> l(mu_);
    std::vector<int> v;
    for (const auto& [r, c] : ranks_) {
      if (!c->closed()) v.push_back(r);
    }
    return v;
  }

  bool WaitFor(const std::vector<int>& ranks, std::chrono::milliseconds timeout) const {
    std::unique_lock<std::mutex> l(mu_);
    bool all = false;
    cv_.wait_for(l, timeout, [&] {
      if (stopping_) return true;  // shutting down: answer now
      for (int r : ranks) {
        auto it = ranks_.find(r);
        if (it == ranks_.end() || it->second->closed()) return false;
      }
      all = true;
      return true;
    });
    return all;
  }

  ParticipantEndpoint* endpoint(int r);
  int num_ranks() const { return options_.num_ranks; }

 private:
  class Proxy;

  Status Authorize(const net::PeerIdentity& p) {
    std::lock_guard<std::mutex> l(mu_);
    if (stopping_) return Status::InvalidArgument("shutting down");
    if (p.role == "control") return Status::OK();
    if (p.rank < 0 || p.rank >= options_.num_ranks) {
      return Status::InvalidArgument("rank " + std::to_string(p.rank) + " is not in 0.." +
                                     std::to_string(options_.num_ranks - 1));
    }
    auto it = ranks_.find(p.rank);
    if (it != ranks_.end() && !it->second->closed()) {
      return Status::InvalidArgument("rank " + std::to_string(p.rank) +
                                     " is already connected from " + it->second->peer().address);
    }
    return Status::OK();
  }

  void Install(const std::shared_ptr<net::Channel>& c) {
    std::function<void(int)> cb;
    {
      std::lock_guard<std::mutex> l(mu_);
      if (c->peer().role == "control") {
        controls_.insert(c);
        return;
      }
      ranks_[c->peer().rank] = c;
      cb = on_registered_;
    }
    cv_.notify_all();
    if (cb) cb(c->peer().rank);
  }

  void Closed(net::Channel* c) {
    std::lock_guard<std::mutex> l(mu_);
    if (c->peer().role == "control") {
      for (auto it = controls_.begin(); it != controls_.end(); ++it) {
        if (it->get() == c) {
          controls_.erase(it);
          break;
        }
      }
      return;
    }
    auto it = ranks_.find(c->peer().rank);
    if (it != ranks_.end() && it->second.get() == c) ranks_.erase(it);
  }

  // Requests from ranks (and controllers). Runs on a worker.
  std::optional<Result<json>> Serve(const std::string& method, const json& p) {
    if (method == "query_decision") {
      DecisionOracle* oracle;
      {
        std::lock_guard<std::mutex> l(mu_);
        oracle = oracle_;
      }
      if (!oracle) {
        return Result<json>(Status(ErrorCode::kCrashed, "the coordinator is recovering"));
      }
      auto tx = p.find("tx");
      if (tx == p.end() || !tx->is_string()) {
        return Result<json>(Status::InvalidArgument("query_decision: missing tx"));
      }
      auto d = oracle->QueryDecision(tx->get<std::string>());
      if (!d.ok()) return Result<json>(d.status());
      return Result<json>(json{{"decision", DecisionName(d->first)},
                               {"version", d->second.version},
                               {"served_digest", d->second.served()}});
    }
    if (method == "ping") return Result<json>(json::object());
    ControlHandler h;
    {
      std::lock_guard<std::mutex> l(mu_);
      h = control_;
    }
    if (!h) return Result<json>(Status::InvalidArgument("unknown method '" + method + "'"));
    return h(method, p);
  }

  std::shared_ptr<net::Channel> ChannelOf(int r) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = ranks_.find(r);
    if (it == ranks_.end() || it->second->closed()) return nullptr;
    return it->second;
  }

  // A connection answered for another rank: refuse it.
  void Impersonation(const std::shared_ptr<net::Channel>& c, int claimed) {
    net::LogLine(options_.log_tag, "refused answer from " + c->peer().address + " (rank " +
                                       std::to_string(c->peer().rank) + "): it spoke for rank " +
                                       std::to_string(claimed) + "; connection closed");
    c->Close();
  }

  const TcpTransportOptions options_;
  net::NetOptions net_;
  net::EventLoop loop_;
  tcp::acceptor acceptor_;
  std::shared_ptr<net::AcceptLoop> accept_loop_;
  std::shared_ptr<net::ssl::context> tls_;  // server side, immutable once listening
  uint16_t port_ = 0;
  std::vector<std::unique_ptr<Proxy>> proxies_;
  std::once_flag shutdown_once_;
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::map<int, std::shared_ptr<net::Channel>> ranks_ GUARDED_BY(mu_);
  std::set<std::shared_ptr<net::Channel>> controls_ GUARDED_BY(mu_);
  DecisionOracle* oracle_ GUARDED_BY(mu_) = nullptr;
  std::atomic<int64_t> epoch_{0};  // stamped on every request (SetLeaderEpoch)
  ControlHandler control_ GUARDED_BY(mu_);
  std::function<void(int)> on_registered_ GUARDED_BY(mu_);
};

class TcpTransport::Impl::Proxy : public ParticipantEndpoint {
 public:
  Proxy(Impl* t, int rank) : t_(t), rank_(rank) {}

  Result<RankDescription> Describe() override {
    std::shared_ptr<net::Channel> c;
    WTX_ASSIGN_OR_RETURN(j, Call("describe", json::object(), t_->options_.request_timeout, &c));
    auto d = net::RankDescriptionFromJson(j);
    if (!d.ok()) return Malformed(c, d.status());
    if (d->rank != rank_) {
      t_->Impersonation(c, d->rank);
      return Down();
    }
    return d;
  }

  Status CheckBegin(const BeginRequest& req, std::vector<bool>* holds) override {
    std::shared_ptr<net::Channel> c;
    WTX_ASSIGN_OR_RETURN(j, Call("check_begin", {{"req", net::BeginRequestToJson(req)}},
                                 t_->options_.request_timeout, &c));
    auto h = j.find("holds");
    if (h == j.end() || !h->is_array() || h->size() != req.sources.size()) {
      return Malformed(c, Status::InvalidArgument("check_begin: bad holds"));
    }
    if (holds) {
      holds->clear();
      for (const auto& b : *h) holds->push_back(b.is_boolean() && b.get<bool>());
    }
    return Status::OK();
  }

  Status Begin(const BeginRequest& req) override {
    return Call("begin", {{"req", net::BeginRequestToJson(req)}}, t_->options_.request_timeout,
                nullptr)
        .status();
  }

  Result<Vote> Prepare(const std::string& tx, std::chrono::milliseconds timeout) override {
    std::shared_ptr<net::Channel> c;
    WTX_ASSIGN_OR_RETURN(j, Call("prepare", {{"tx", tx}}, timeout, &c));
    auto v = net::VoteFromJson(j);
    if (!v.ok()) return Malformed(c, v.status());
    if (v->rank != rank_) {
      t_->Impersonation(c, v->rank);
      return Down();
    }
    return v;
  }

  Status Decide(const std::string& tx, Decision d, const DecidedVersion& version) override {
    return Call("decide", net::DecideParams(tx, d, version), t_->options_.request_timeout, nullptr)
        .status();
  }

 private:
  Status Down() const {
    return Status(ErrorCode::kCrashed, "rank " + std::to_string(rank_) + " is down");
  }
  // An answer we cannot decode: the peer does not speak the protocol; drop it.
  Status Malformed(const std::shared_ptr<net::Channel>& c, const Status& s) {
    net::LogLine(t_->options_.log_tag, "refused answer from rank " + std::to_string(rank_) + ": " +
                                           s.message() + "; connection closed");
    if (c) c->Close();
    return Down();
  }

  Result<json> Call(const std::string& method, json params, std::chrono::milliseconds timeout,
                    std::shared_ptr<net::Channel>* used) {
    auto c = t_->ChannelOf(rank_);
    if (used) *used = c;
    if (!c) return Down();
    // The leader epoch: ranks refuse a request from an older one (docs/protocol.md).
    if (const int64_t epoch = t_->epoch(); epoch > 0) params["epoch"] = epoch;
    bool transport = false;
    auto r = c->Call(method, std::move(params), timeout, &transport);
    if (!r.ok() && transport) {
      if (r.status().code() == ErrorCode::kTimeout) {
        return Status(ErrorCode::kTimeout, "rank " + std::to_string(rank_) + " did not answer");
      }
      return Down();
    }
    return r;
  }

  Impl* t_;
  const int rank_;
};

TcpTransport::Impl::Impl(const TcpTransportOptions& o)
    : options_(o), loop_(o.worker_threads), acceptor_(loop_.io()) {
  net_.max_frame_bytes = o.max_frame_bytes;
  net_.handshake_timeout = o.handshake_timeout;
  net_.max_connections = o.max_connections;
  net_.tls = o.tls;
  for (int r = 0; r < o.num_ranks; ++r) proxies_.push_back(std::make_unique<Proxy>(this, r));
}

TcpTransport::Impl::~Impl() { Shutdown(); }

ParticipantEndpoint* TcpTransport::Impl::endpoint(int r) { return proxies_.at(r).get(); }

TcpTransport::TcpTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpTransport::~TcpTransport() = default;

Result<std::unique_ptr<TcpTransport>> TcpTransport::Listen(const TcpTransportOptions& options) {
  if (options.secret.empty()) return Status::InvalidArgument("TcpTransport needs a secret");
  if (options.num_ranks < 1) return Status::InvalidArgument("TcpTransport needs ranks >= 1");
  auto impl = std::make_unique<Impl>(options);
  WTX_RETURN_IF_ERROR(impl->Listen());
  return std::unique_ptr<TcpTransport>(new TcpTransport(std::move(impl)));
}

uint16_t TcpTransport::port() const { return impl_->port(); }
void TcpTransport::Shutdown() { impl_->Shutdown(); }
void TcpTransport::SetDecisionOracle(DecisionOracle* oracle) { impl_->SetOracle(oracle); }
void TcpTransport::SetControlHandler(ControlHandler h) { impl_->SetControlHandler(std::move(h)); }
void TcpTransport::SetOnRankRegistered(std::function<void(int)> fn) {
  impl_->SetOnRegistered(std::move(fn));
}
std::vector<int> TcpTransport::ConnectedRanks() const { return impl_->Connected(); }
bool TcpTransport::WaitForRanks(const std::vector<int>& ranks,
                                std::chrono::milliseconds timeout) const {
  return impl_->WaitFor(ranks, timeout);
}
void TcpTransport::SetLeaderEpoch(int64_t epoch) { impl_->SetEpoch(epoch); }
int TcpTransport::num_ranks() const { return impl_->num_ranks(); }
ParticipantEndpoint* TcpTransport::endpoint(int rank) { return impl_->endpoint(rank); }

}  // namespace wtx
