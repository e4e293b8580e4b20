#include "src/net/control.h"

namespace wtx::net {

using nlohmann::json;

ControlServer::ControlServer(std::string secret, RequestHandler handler, const NetOptions& options,
                             std::string tag)
    : secret_(std::move(secret)),
      handler_(std::move(handler)),
      options_(options),
      tag_(std::move(tag)),
      loop_(2),
      acceptor_(loop_.io()) {}

Result<std::unique_ptr<ControlServer>> ControlServer::Listen(const std::string& host, uint16_t port,
                                                             const std::string& secret,
                                                             RequestHandler handler,
                                                             const NetOptions& options,
                                                             std::string tag) {
  if (secret.empty()) return Status::InvalidArgument("the control server needs a secret");
  std::unique_ptr<ControlServer> s(
      new ControlServer(secret, std::move(handler), options, std::move(tag)));
  boost::system::error_code ec;
  auto addr = asio::ip::make_address(host, ec);
  if (ec) return Status::InvalidArgument("control address '" + host + "' is not an IP address");
  tcp::endpoint ep(addr, port);
  s->acceptor_.open(ep.protocol(), ec);
  if (!ec) s->acceptor_.set_option(tcp::acceptor::reuse_address(true), ec);
  if (!ec) s->acceptor_.bind(ep, ec);
  if (!ec) s->acceptor_.listen(asio::socket_base::max_listen_connections, ec);
  if (ec) {
    return Status::IOError("cannot listen on " + host + ":" + std::to_string(port) + ": " +
                           ec.message());
  }
  s->port_ = s->acceptor_.local_endpoint().port();
  auto tls = MakeTlsContext(true, secret, options.tls);
  if (!tls.ok()) return tls.status();
  s->tls_ = std::move(tls).value();
  ControlServer* raw = s.get();
  raw->Accept();
  return s;
}

void ControlServer::Accept() {
  accept_loop_ = std::make_shared<AcceptLoop>(
      loop_, acceptor_, options_.max_connections, tag_,
      [this](tcp::socket socket, std::shared_ptr<void> slot) {
        AcceptHandshake(
            loop_, std::move(socket), tls_, secret_, options_, tag_,
            [](const PeerIdentity& p) {
              return p.role == "control" ? Status::OK()
                                         : Status::InvalidArgument("this port serves control only");
            },
            [this](const std::shared_ptr<Channel>& c) {
              std::lock_guard<std::mutex> l(mu_);
              channels_.insert(c);
            },
            handler_,
            [this](Channel* c) {
              std::lock_guard<std::mutex> l(mu_);
              for (auto it = channels_.begin(); it != channels_.end(); ++it) {
                if (it->get() == c) {
                  channels_.erase(it);
                  break;
                }
              }
            },
            std::move(slot));
      });
  accept_loop_->Start();
}

ControlServer::~ControlServer() {
  CloseAcceptorOnLoop(loop_, acceptor_);
  std::set<std::shared_ptr<Channel>> all;
  {
    std::lock_guard<std::mutex> l(mu_);
    all.swap(channels_);
  }
  for (auto& c : all) c->Close();
  loop_.Stop();
}

Result<std::unique_ptr<ControlClient>> ControlClient::Connect(const std::string& host,
                                                              uint16_t port,
                                                              const std::string& secret,
                                                              const NetOptions& options,
                                                              std::string tag) {
  std::unique_ptr<ControlClient> c(new ControlClient());
  auto ch = net::Connect(c->loop_, host, port, secret, "control", -1, options, std::move(tag),
                         nullptr, nullptr);
  if (!ch.ok()) return ch.status();
  c->channel_ = std::move(ch).value();
  return c;
}

ControlClient::~ControlClient() {
  if (channel_) channel_->Close();
  loop_.Stop();
}

Result<json> ControlClient::Call(const std::string& method, json params,
                                 std::chrono::milliseconds timeout, bool* transport_error) {
  return channel_->Call(method, std::move(params), timeout, transport_error);
}

}  // namespace wtx::net
