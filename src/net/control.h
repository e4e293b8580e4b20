// Control connections: the authenticated side channel through which a driver (the
// `wtx sim --transport tcp` controller, a test, a trainer) tells a rank or coordinator process
// what to do. Same framing and handshake as the transport (channel.h), role "control".
//
//  * ControlServer: listens (127.0.0.1 unless told otherwise) and serves requests with a
//    handler; used by `wtx rank --control`. (The coordinator serves control connections on its
//    transport port, see TcpTransport::SetControlHandler.)
//  * ControlClient: one connection to such a server; Call() blocks up to its timeout.
//
// Thread-safety: both are safe from any thread.
#pragma once

#include <chrono>
#include <memory>
#include <mutex>
#include <set>
#include <string>

#include "src/net/channel.h"
#include "src/util/thread_annotations.h"

namespace wtx::net {

class ControlServer {
 public:
  static Result<std::unique_ptr<ControlServer>> Listen(const std::string& host, uint16_t port,
                                                       const std::string& secret,
                                                       RequestHandler handler,
                                                       const NetOptions& options, std::string tag);
  ~ControlServer();
  uint16_t port() const { return port_; }

 private:
  ControlServer(std::string secret, RequestHandler handler, const NetOptions& options,
                std::string tag);
  void Accept();

  std::string secret_;
  RequestHandler handler_;
  NetOptions options_;
  std::string tag_;
  EventLoop loop_;
  tcp::acceptor acceptor_;
  std::shared_ptr<AcceptLoop> accept_loop_;
  std::shared_ptr<ssl::context> tls_;
  uint16_t port_ = 0;
  std::mutex mu_;
  std::set<std::shared_ptr<Channel>> channels_ GUARDED_BY(mu_);
};

class ControlClient {
 public:
  static Result<std::unique_ptr<ControlClient>> Connect(const std::string& host, uint16_t port,
                                                        const std::string& secret,
                                                        const NetOptions& options, std::string tag);
  ~ControlClient();
  // Transport failures are kCrashed / kTimeout; errors answered by the server come back as
  // they were sent.
  Result<nlohmann::json> Call(const std::string& method, nlohmann::json params,
                              std::chrono::milliseconds timeout, bool* transport_error = nullptr);
  bool closed() const { return channel_->closed(); }

 private:
  ControlClient() : loop_(1) {}
  EventLoop loop_;
  std::shared_ptr<Channel> channel_;
};

}  // namespace wtx::net
