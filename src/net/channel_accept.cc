// The server's accept loop (AcceptLoop, channel.h): accepts connections up to a limit of live
// slots, refuses the rest, and backs off on accept errors; and CloseAcceptorOnLoop, which stops
// it.
//
// Thread-safety: AcceptLoop's handlers run on the loop's I/O thread; live() is safe from any
// thread. CloseAcceptorOnLoop is safe from any thread but the loop's I/O thread (it waits for it).
#include "src/net/channel.h"

#include "src/net/channel_internal.h"

namespace wtx::net {

void CloseAcceptorOnLoop(EventLoop& loop, asio::ip::tcp::acceptor& acceptor) {
  auto done = std::make_shared<std::promise<void>>();
  std::future<void> closed = done->get_future();
  asio::post(loop.io(), [&acceptor, done] {
    boost::system::error_code ec;
    acceptor.close(ec);
    done->set_value();
  });
  closed.wait_for(std::chrono::seconds(5));
}

AcceptLoop::AcceptLoop(EventLoop& loop, tcp::acceptor& acceptor, int max_connections,
                       std::string tag, OnSocket on_socket)
    : loop_(loop),
      acceptor_(acceptor),
      max_connections_(max_connections < 1 ? 1 : max_connections),
      tag_(std::move(tag)),
      on_socket_(std::move(on_socket)),
      timer_(loop.io()) {}

void AcceptLoop::Start() {
  asio::post(loop_.io(), [self = shared_from_this()] { self->Accept(); });
}

void AcceptLoop::Accept() {
  if (!acceptor_.is_open()) return;
  acceptor_.async_accept(
      [self = shared_from_this()](const boost::system::error_code& ec, tcp::socket socket) {
        if (ec == asio::error::operation_aborted || !self->acceptor_.is_open()) return;
        if (ec) {
          // Out of descriptors (or another transient failure): wait before trying again, instead
          // of spinning on an accept that fails at once.
          LogLineLimited(self->tag_, "accept",
                         "accept failed: " + ec.message() + "; retrying in " +
                             std::to_string(self->backoff_.count()) + " ms");
          self->timer_.expires_after(self->backoff_);
          self->backoff_ = std::min(self->backoff_ * 2, std::chrono::milliseconds(1000));
          self->timer_.async_wait([self](const boost::system::error_code& tec) {
            if (!tec) self->Accept();
          });
          return;
        }
        self->backoff_ = std::chrono::milliseconds(10);
        if (self->live_->load() >= self->max_connections_) {
          LogLineLimited(self->tag_, "limit",
                         "refused connection from " + channel_internal::Address(socket) + ": " +
                             std::to_string(self->max_connections_) +
                             " connections open (the limit, --max-connections)");
          boost::system::error_code cec;
          socket.close(cec);
        } else {
          auto live = self->live_;
          ++*live;
          std::shared_ptr<void> slot(nullptr, [live](void*) { --*live; });
          self->on_socket_(std::move(socket), std::move(slot));
        }
        self->Accept();
      });
}

}  // namespace wtx::net
