// The framed connection (channel.h): frame encoding and decoding, the event loop, and
// Channel's I/O: reading frames, dispatching requests and responses, writing, calls and close.
// The handshakes that make a Channel are in channel_handshake.cc, the accept loop in
// channel_accept.cc, logging, secret files and HOST:PORT in channel_util.cc.
//
// Thread-safety: as channel.h says: Call/Close/closed from any thread; the reads, writes and
// close run on the loop's I/O thread; requests run on the worker pool, on the channel's strand.
#include "src/net/channel.h"

#include <cstring>
#include <map>
#include <vector>

#include "src/net/channel_internal.h"
#include "src/net/codec.h"
#include "src/util/cbor.h"

namespace wtx::net {

using nlohmann::json;

struct Channel::Reply {
  Result<json> result;
  bool transport = false;
};

// ---------------------------------------------------------------------------------------------
// Frames

std::string EncodeFrame(const json& message) {
  std::vector<uint8_t> cbor = json::to_cbor(message);
  std::string f(4 + cbor.size(), '\0');
  const uint32_t n = static_cast<uint32_t>(cbor.size());
  f[0] = static_cast<char>(n >> 24);
  f[1] = static_cast<char>(n >> 16);
  f[2] = static_cast<char>(n >> 8);
  f[3] = static_cast<char>(n);
  std::memcpy(f.data() + 4, cbor.data(), cbor.size());
  return f;
}

Result<json> DecodePayload(const uint8_t* data, size_t size) {
  std::optional<json> j = ParseCbor(data, size);
  if (!j) {
    return Status::InvalidArgument(
        "malformed frame: not one well-formed CBOR item (or nested "
        "deeper than " +
        std::to_string(kMaxCborDepth) + ")");
  }
  if (!j->is_object()) {
    return Status::InvalidArgument("malformed frame: the payload is not a CBOR map");
  }
  return std::move(*j);
}

// ---------------------------------------------------------------------------------------------
// EventLoop

EventLoop::EventLoop(int workers)
    : pool_(workers), guard_(asio::make_work_guard(io_)), thread_([this] { io_.run(); }) {}

EventLoop::~EventLoop() { Stop(); }

void EventLoop::Stop() {
  std::call_once(stopped_, [this] {
    // No more I/O handlers, hence no new requests for the pool; then drain the pool.
    guard_.reset();
    io_.stop();
    if (thread_.joinable()) thread_.join();
    pool_.join();
  });
}

// ---------------------------------------------------------------------------------------------
// Channel

Channel::Channel(EventLoop& loop, std::unique_ptr<TlsStream> stream, PeerIdentity peer,
                 int self_rank, const NetOptions& options, std::string tag)
    : loop_(loop),
      stream_(std::move(stream)),
      peer_(std::move(peer)),
      self_rank_(self_rank),
      options_(options),
      tag_(std::move(tag)),
      strand_(asio::make_strand(loop.pool().get_executor())) {}

Channel::~Channel() {
  boost::system::error_code ec;
  stream_->lowest_layer().close(ec);
}

void Channel::StartOnIo(RequestHandler handler, std::function<void()> on_close) {
  handler_ = std::move(handler);
  on_close_ = std::move(on_close);
  ReadHeader();
  if (!writing_) WriteNext();
}

void Channel::ReadHeader() {
  auto self = shared_from_this();
  asio::async_read(*stream_, asio::buffer(header_, 4),
                   [self](const boost::system::error_code& ec, size_t) {
                     if (ec) return self->CloseOnIo(ec.message());
                     const uint32_t size = channel_internal::ReadBe32(self->header_);
                     if (size == 0 || size > self->options_.max_frame_bytes) {
                       return self->Refuse("frame of " + std::to_string(size) + " bytes (limit " +
                                           std::to_string(self->options_.max_frame_bytes) + ")");
                     }
                     self->ReadBody(size);
                   });
}

void Channel::ReadBody(uint32_t size) {
  auto self = shared_from_this();
  body_.resize(size);
  asio::async_read(*stream_, asio::buffer(body_.data(), size),
                   [self](const boost::system::error_code& ec, size_t) {
                     if (ec) return self->CloseOnIo(ec.message());
                     auto m = DecodePayload(reinterpret_cast<const uint8_t*>(self->body_.data()),
                                            self->body_.size());
                     std::string().swap(self->body_);
                     if (!m.ok()) return self->Refuse(m.status().message());
                     self->Dispatch(std::move(m).value());
                     if (!self->closed_) self->ReadHeader();
                   });
}

void Channel::Refuse(const std::string& why) {
  LogLine(tag_, "refused frame from " + peer_.address +
                    (peer_.role == "rank" ? " (rank " + std::to_string(peer_.rank) + ")" : "") +
                    ": " + why + "; connection closed");
  CloseOnIo(why);
}

void Channel::Dispatch(json m) {
  if (peer_.role == "rank") {
    auto f = m.find("from");
    if (f == m.end() || !f->is_number_integer() || f->get<int64_t>() != peer_.rank) {
      return Refuse("rank " + std::to_string(peer_.rank) + "'s connection spoke for rank " +
                    (f == m.end() ? std::string("(none)") : f->dump()));
    }
  }
  if (auto re = m.find("re"); re != m.end()) {
    if (!re->is_number_unsigned()) return Refuse("malformed response id");
    std::shared_ptr<std::promise<Reply>> p;
    {
      std::lock_guard<std::mutex> l(mu_);
      auto it = pending_.find(re->get<uint64_t>());
      if (it == pending_.end()) return;  // answered after its caller gave up
      p = std::move(it->second);
      pending_.erase(it);
    }
    if (auto ok = m.find("ok"); ok != m.end()) {
      p->set_value(Reply{std::move(*ok), false});
    } else {
      p->set_value(Reply{StatusFromJson(m.value("err", json())), false});
    }
    return;
  }
  auto id = m.find("id");
  auto method = m.find("m");
  if (id == m.end() || !id->is_number_unsigned() || method == m.end() || !method->is_string()) {
    return Refuse("malformed message: neither a request nor a response");
  }
  json params = m.value("p", json::object());
  auto self = shared_from_this();
  asio::post(strand_, [self, id = id->get<uint64_t>(), method = method->get<std::string>(),
                       params = std::move(params)] {
    std::optional<Result<json>> r;
    try {
      if (self->handler_) {
        r = self->handler_(method, params);
      } else {
        r = Result<json>(Status::InvalidArgument("this end serves no requests"));
      }
    } catch (const std::exception& e) {
      r = Result<json>(Status::InvalidArgument("bad '" + method + "' request: " + e.what()));
    }
    if (!r) return;  // deliberately unanswered
    json resp = {{"re", id}};
    if (r->ok()) {
      resp["ok"] = std::move(r->value());
    } else {
      resp["err"] = StatusToJson(r->status());
    }
    self->Send(std::move(resp));
  });
}

void Channel::QueueOnIo(const json& message) {
  json m = message;
  if (self_rank_ >= 0) m["from"] = self_rank_;
  out_.push_back(EncodeFrame(m));
}

void Channel::Send(json message) {
  if (self_rank_ >= 0) message["from"] = self_rank_;
  std::string frame = EncodeFrame(message);
  if (frame.size() - 4 > options_.max_frame_bytes && message.contains("re")) {
    json err = {{"re", message["re"]},
                {"err", StatusToJson(Status::InvalidArgument("answer of " +
                                                             std::to_string(frame.size() - 4) +
                                                             " bytes exceeds the frame limit"))}};
    if (self_rank_ >= 0) err["from"] = self_rank_;
    frame = EncodeFrame(err);
  }
  auto self = shared_from_this();
  asio::post(loop_.io(), [self, frame = std::move(frame)]() mutable {
    if (self->closed_) return;
    self->out_.push_back(std::move(frame));
    if (!self->writing_) self->WriteNext();
  });
}

void Channel::WriteNext() {
  if (out_.empty() || closed_) {
    writing_ = false;
    return;
  }
  writing_ = true;
  auto self = shared_from_this();
  asio::async_write(*stream_, asio::buffer(out_.front()),
                    [self](const boost::system::error_code& ec, size_t) {
                      if (ec) return self->CloseOnIo(ec.message());
                      self->out_.pop_front();
                      self->WriteNext();
                    });
}

void Channel::CloseOnIo(const std::string& why) {
  closed_ = true;
  boost::system::error_code ec;
  stream_->lowest_layer().close(ec);
  // out_ stays: a write in flight still owns its front buffer, and its completion pops it.
  FailPending();
  if (!on_close_ran_) {
    on_close_ran_ = true;
    if (on_close_) on_close_();
  }
}

void Channel::FailPending() {
  std::map<uint64_t, std::shared_ptr<std::promise<Reply>>> pending;
  {
    std::lock_guard<std::mutex> l(mu_);
    pending.swap(pending_);
  }
  for (auto& [id, p] : pending) {
    p->set_value(
        Reply{Status(ErrorCode::kCrashed, "connection to " + peer_.address + " closed"), true});
  }
}

void Channel::Close() {
  {
    std::lock_guard<std::mutex> l(mu_);
    closed_ = true;
  }
  FailPending();  // at once: the I/O thread may already be stopped
  auto self = shared_from_this();
  asio::post(loop_.io(), [self] { self->CloseOnIo("closed by this end"); });
}

Result<json> Channel::Call(const std::string& method, json params,
                           std::chrono::milliseconds timeout, bool* transport_error) {
  if (transport_error) *transport_error = false;
  auto fail = [&](Status s) -> Result<json> {
    if (transport_error) *transport_error = true;
    return s;
  };
  auto p = std::make_shared<std::promise<Reply>>();
  auto fut = p->get_future();
  uint64_t id;
  {
    std::lock_guard<std::mutex> l(mu_);
    if (closed_) {
      return fail(Status(ErrorCode::kCrashed, "connection to " + peer_.address + " is closed"));
    }
    id = next_id_++;
    pending_[id] = p;
  }
  json m = {{"id", id}, {"m", method}, {"p", std::move(params)}};
  if (self_rank_ >= 0) m["from"] = self_rank_;
  std::string frame = EncodeFrame(m);
  if (frame.size() - 4 > options_.max_frame_bytes) {
    std::lock_guard<std::mutex> l(mu_);
    pending_.erase(id);
    return Status::InvalidArgument("'" + method + "' request of " +
                                   std::to_string(frame.size() - 4) +
                                   " bytes exceeds the frame limit");
  }
  auto self = shared_from_this();
  asio::post(loop_.io(), [self, frame = std::move(frame)]() mutable {
    if (self->closed_) return;
    self->out_.push_back(std::move(frame));
    if (!self->writing_) self->WriteNext();
  });
  if (fut.wait_for(timeout) != std::future_status::ready) {
    std::lock_guard<std::mutex> l(mu_);
    if (pending_.erase(id)) {
      return fail(Status(ErrorCode::kTimeout,
                         "no answer to '" + method + "' within " + channel_internal::Ms(timeout)));
    }
  }
  Reply r = fut.get();
  if (transport_error) *transport_error = r.transport;
  return std::move(r.result);
}

}  // namespace wtx::net
