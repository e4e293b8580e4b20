// TcpRankAgent::Impl: connect/register/resolve/serve loop of one rank.
#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <random>
#include <thread>

#include "src/net/channel.h"
#include "src/net/codec.h"
#include "src/net/rank_agent_hooks.h"
#include "src/net/rank_service.h"
#include "src/net/tls.h"
#include "src/txn/resolve_from_log.h"
#include "src/util/thread_annotations.h"
#include "wtx/tcp_rank_agent.h"

namespace wtx {

using nlohmann::json;

class TcpRankAgent::Impl : public DecisionOracle {
 public:
  Impl(const RankAgentOptions& o, Participant* p, RankAgentHooks* hooks)
      : options_(o), p_(p), hooks_(hooks), loop_(1) {
    if (options_.log_tag.empty()) options_.log_tag = "rank-" + std::to_string(o.rank);
    net_.max_frame_bytes = o.max_frame_bytes;
    net_.connect_timeout = o.connect_timeout;
    net_.handshake_timeout = o.handshake_timeout;
    net_.tls = o.tls;
    coordinators_.emplace_back(o.coordinator_host, o.coordinator_port);
    for (const auto& c : o.more_coordinators) coordinators_.push_back(c);
    for (const auto& [host, port] : coordinators_) {
      addresses_.push_back(host + ":" + std::to_string(port));
    }
    watch_ = options_.decision_log || !options_.more_coordinators.empty();
    if (watch_) {
      // Each attempt is bounded by the heartbeat budget: a paused coordinator's kernel still
      // accepts the connection, and a handshake it never answers must not hold the rank longer
      // than a missed ping would.
      net_.connect_timeout = std::min(net_.connect_timeout, Budget());
      net_.handshake_timeout = std::min(net_.handshake_timeout, Budget());
    }
  }

  // Three heartbeats: how long a coordinator may take to answer before it is left.
  std::chrono::milliseconds Budget() const {
    return std::max(3 * options_.heartbeat, std::chrono::milliseconds(100));
  }

  ~Impl() override {
    {
      std::lock_guard<std::mutex> l(mu_);
      stopping_ = true;
    }
    cv_.notify_all();
    std::shared_ptr<net::Channel> c;
    {
      std::lock_guard<std::mutex> l(mu_);
      c = channel_;
    }
    if (c) c->Close();  // fails an in-flight QueryDecision at once
    if (thread_.joinable()) thread_.join();
    if (log_thread_.joinable()) log_thread_.join();
    {
      std::lock_guard<std::mutex> l(mu_);
      c = std::move(channel_);
    }
    if (c) c->Close();
    loop_.Stop();
  }

  void Start() {
    thread_ = std::thread([this] { Run(); });
    if (options_.decision_log) log_thread_ = std::thread([this] { WatchLog(); });
  }

  RankAgentState state() const {
    std::lock_guard<std::mutex> l(mu_);
    RankAgentState s = state_;
    s.epoch = fence_.seen();
    return s;
  }

  bool WaitResolved(std::chrono::milliseconds timeout, RankAgentState* out) const {
    std::unique_lock<std::mutex> l(mu_);
    bool ok = cv_.wait_for(l, timeout, [&] { return state_.connected && state_.resolved; });
    if (out) *out = state_;
    return ok;
  }

  // DecisionOracle over the current connection. Any failure (no connection, the coordinator
  // not ready, a malformed answer) marks the attempt for a retry.
  Result<std::pair<Decision, DecidedVersion>> QueryDecision(const std::string& tx) override {
    std::shared_ptr<net::Channel> c;
    {
      std::lock_guard<std::mutex> l(mu_);
      c = channel_;
    }
    oracle_failed_ = true;
    if (!c) return Status(ErrorCode::kCrashed, "not connected to the coordinator");
    const auto timeout =
        watch_ ? std::min(options_.request_timeout, Budget()) : options_.request_timeout;
    Awaiting awaiting(this);
    auto r = c->Call("query_decision", {{"tx", tx}}, timeout);
    oracle_timed_out_ = !r.ok() && r.status().code() == ErrorCode::kTimeout;
    if (!r.ok()) return r.status();
    const json& j = r.value();
    auto d = j.find("decision");
    auto v = j.find("version");
    if (d == j.end() || !d->is_string() || v == j.end() || !v->is_string()) {
      return Status::InvalidArgument("malformed query_decision answer");
    }
    auto decision = DecisionFromName(d->get<std::string>());
    if (!decision) return Status::InvalidArgument("unknown decision " + d->dump());
    DecidedVersion version{v->get<std::string>(), ""};
    if (auto s = j.find("served_digest"); s != j.end()) {  // absent from older coordinators
      if (!s->is_string()) return Status::InvalidArgument("malformed query_decision answer");
      version.served_digest = s->get<std::string>();
    }
    oracle_failed_ = false;
    return std::make_pair(*decision, std::move(version));
  }

 private:
  std::optional<Result<json>> Serve(const std::string& m, const json& p) {
    if (m == "prepare" && hooks_ && hooks_->silent.load()) return std::nullopt;
    return net::ServeRankRequest(*p_, m, p, &fence_);
  }

  // No coordinator answers: resolve the transaction this rank holds from the shared decision
  // log (see wtx/tcp_rank_agent.h). Runs on the supervisor thread between connection attempts,
  // when no connection serves requests.
  void ResolveFromLog() {
    // Nothing active: nullopt without a request. Errors name the transaction.
    auto resolved = ResolveFromDecisionLog(*p_, *options_.decision_log, options_.rank);
    const Status outcome = resolved.status();
    if (resolved.ok() && resolved.value()) {
      const LoggedDecision& won = *resolved.value();
      net::LogLine(options_.log_tag, "transaction '" + won.tx + "' resolved from decision log " +
                                         options_.decision_log->Describe() + ": " +
                                         std::string(DecisionName(won.decision)) + " (written by " +
                                         won.writer + ")");
    }
    std::lock_guard<std::mutex> l(mu_);
    if (resolved.ok() && resolved.value()) ++state_.resolved_from_log;
    if (!outcome.ok() && outcome.message() != state_.log_resolution.message() &&
        outcome.code() != ErrorCode::kTxActive) {
      net::LogLine(options_.log_tag,
                   "cannot resolve from the decision log yet: " + outcome.ToString());
    }
    state_.log_resolution = outcome;
  }

  // Marks a call to the coordinator in flight (the log watcher's "suspect" clock).
  class Awaiting {
   public:
    explicit Awaiting(Impl* impl) : impl_(impl) {
      impl_->awaiting_since_.store(Clock::now().time_since_epoch().count());
    }
    ~Awaiting() { impl_->awaiting_since_.store(0); }
    Awaiting(const Awaiting&) = delete;
    Awaiting& operator=(const Awaiting&) = delete;

   private:
    Impl* impl_;
  };

  // Whether no coordinator serves this rank now: not connected, or a call in flight for longer
  // than a heartbeat (the coordinator paused, or its host gone without closing).
  bool CoordinatorSuspect() {
    {
      std::lock_guard<std::mutex> l(mu_);
      if (!channel_) return true;
    }
    const int64_t since = awaiting_since_.load();
    return since != 0 &&
           Clock::now() - Clock::time_point(Clock::duration(since)) > options_.heartbeat;
  }

  // The decision log watcher, beside the supervisor so that no connection attempt or
  // unanswered call delays it: while no coordinator serves this rank, it reads who leads the
  // log (a new leader is dialed next) and resolves the transaction the rank holds from the log,
  // every half heartbeat.
  void WatchLog() {
    const auto poll = std::clamp(options_.heartbeat / 2, std::chrono::milliseconds(20),
                                 std::chrono::milliseconds(500));
    int64_t leader_epoch = 0;
    while (Sleep(poll)) {
      if (!CoordinatorSuspect()) continue;
      auto leader = options_.decision_log->CurrentLeader();
      if (leader.ok() && leader.value() && leader.value()->first != leader_epoch) {
        leader_epoch = leader.value()->first;
        const int i = CoordinatorOfHolder(leader.value()->second);
        if (i >= 0) leader_hint_.store(i);
      }
      if (p_->status().active_tx) ResolveFromLog();
    }
  }

  // The index in the coordinator list of the one a leader record's holder names (`wtx
  // coordinator` holds as "... listening on HOST:PORT"), or -1.
  int CoordinatorOfHolder(const std::string& holder) const {
    for (size_t i = 0; i < addresses_.size(); ++i) {
      const std::string& a = addresses_[i];
      if (holder.size() >= a.size() && holder.compare(holder.size() - a.size(), a.size(), a) == 0 &&
          (holder.size() == a.size() || holder[holder.size() - a.size() - 1] == ' ')) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }

  // Sleeps up to d; false when stopping.
  bool Sleep(std::chrono::milliseconds d) {
    std::unique_lock<std::mutex> l(mu_);
    return !cv_.wait_for(l, d, [&] { return stopping_; });
  }

  void Run() {
    std::mt19937_64 rng(std::random_device{}());
    std::chrono::milliseconds backoff = options_.backoff_initial;
    std::string last_logged;
    auto next_backoff = [&] {
      // Full jitter in [backoff/2, backoff], then double.
      const auto lo = backoff.count() / 2;
      std::uniform_int_distribution<int64_t> u(lo, std::max<int64_t>(lo, backoff.count()));
      const auto d = std::chrono::milliseconds(u(rng));
      backoff = std::min(backoff * 2, options_.backoff_max);
      return d;
    };
    for (;;) {
      {
        std::lock_guard<std::mutex> l(mu_);
        if (stopping_) return;
      }
      if (const int hint = leader_hint_.exchange(-1); hint >= 0) {
        next_coordinator_ = static_cast<size_t>(hint);  // the log names the new leader: it first
      }
      const auto& [host, port] = coordinators_[next_coordinator_ % coordinators_.size()];
      auto c = net::Connect(
          loop_, host, port, options_.secret, "rank", options_.rank, net_, options_.log_tag,
          [this](const std::string& m, const json& p) { return Serve(m, p); },
          [this] {
            { std::lock_guard<std::mutex> l(mu_); }
            cv_.notify_all();
          },
          [this] {
            std::lock_guard<std::mutex> l(mu_);
            return stopping_;
          });
      if (!c.ok()) {
        {
          std::lock_guard<std::mutex> l(mu_);
          state_.last_error = c.status();
        }
        // Refusals (wrong secret, rank taken) are worth a line; a coordinator that is not up
        // yet is not.
        if (c.status().code() == ErrorCode::kInvalidArgument &&
            c.status().message() != last_logged) {
          net::LogLine(options_.log_tag, c.status().message() + "; retrying");
          last_logged = c.status().message();
        }
        // The next coordinator is tried at once; a full round that failed backs off and, with
        // a shared decision log, resolves from it.
        ++next_coordinator_;
        if (next_coordinator_ % coordinators_.size() != 0) continue;
        // (The log watcher resolves from the decision log meanwhile.)
        if (!Sleep(next_backoff())) return;
        continue;
      }
      backoff = options_.backoff_initial;
      last_logged.clear();
      std::shared_ptr<net::Channel> ch = std::move(c).value();
      {
        std::lock_guard<std::mutex> l(mu_);
        channel_ = ch;
        state_.coordinator = host + ":" + std::to_string(port);
        state_.connected = true;
        state_.resolved = false;
        ++state_.connections;
      }
      cv_.notify_all();
      // In-doubt resolution, retried while the coordinator cannot answer. With standbys or a
      // shared log, a coordinator that does not answer at all (paused, its host gone) is left
      // for the next one rather than waited for.
      const bool watch = watch_;
      std::chrono::milliseconds retry = options_.backoff_initial;
      while (!ch->closed()) {
        oracle_failed_ = false;
        oracle_timed_out_ = false;
        Status s = p_->ResolveInDoubt(*this);
        if (watch && oracle_timed_out_) {
          net::LogLine(options_.log_tag,
                       "coordinator " + state().coordinator +
                           " did not answer an in-doubt query; trying the next one");
          ch->Close();
          break;
        }
        if (!oracle_failed_) {
          {
            std::lock_guard<std::mutex> l(mu_);
            state_.resolved = true;
            state_.resolution = s;
          }
          cv_.notify_all();
          break;
        }
        if (!Sleep(retry)) return;
        retry = std::min(retry * 2, options_.backoff_max);
      }
      // Connected and resolved. With standbys or a shared log the agent also watches the
      // coordinator: one that stops answering pings (paused, or its host gone without closing
      // the connection) is left for the next one; and a transaction still in doubt (its
      // decision could not be logged: no quorum) is asked about again after a few heartbeats.
      std::optional<std::string> last_doubt;
      int in_doubt_beats = 0;
      while (watch) {
        {
          std::unique_lock<std::mutex> l(mu_);
          if (cv_.wait_for(l, options_.heartbeat, [&] { return stopping_ || ch->closed(); })) {
            break;
          }
        }
        auto ping = [&] {
          Awaiting awaiting(this);
          return ch->Call("ping", json::object(), Budget());
        };
        auto pong = ping();
        if (!pong.ok() && pong.status().code() == ErrorCode::kTimeout) {
          net::LogLine(options_.log_tag,
                       "coordinator " + state().coordinator + " did not answer a ping in " +
                           std::to_string(Budget().count()) + " ms; trying the next one");
          ch->Close();
          break;
        }
        // A commit in progress holds its ranks in doubt for milliseconds: only a transaction
        // still in doubt after a few heartbeats (its decision could not be logged) is asked
        // about again, so that in-doubt queries never crowd a busy coordinator.
        const std::optional<std::string> doubt = p_->status().in_doubt;
        in_doubt_beats = doubt && doubt == last_doubt ? in_doubt_beats + 1 : 0;
        last_doubt = doubt;
        if (doubt && in_doubt_beats >= kInDoubtBeatsBeforeAsking) {
          in_doubt_beats = 0;
          oracle_failed_ = false;
          oracle_timed_out_ = false;
          p_->ResolveInDoubt(*this).ok();
          if (oracle_timed_out_) {
            ch->Close();  // no answer: the next coordinator, or the log, decides
            break;
          }
        }
      }
      {
        std::unique_lock<std::mutex> l(mu_);
        cv_.wait(l, [&] { return stopping_ || ch->closed(); });
        if (!stopping_) ++next_coordinator_;  // a closed connection: the next one first
        channel_.reset();
        state_.connected = false;
        state_.resolved = false;
        if (stopping_) return;
      }
      cv_.notify_all();
    }
  }

  using Clock = std::chrono::steady_clock;

  RankAgentOptions options_;
  Participant* p_;
  RankAgentHooks* hooks_;  // src/net/rank_agent_hooks.h; may be null
  net::NetOptions net_;
  net::EventLoop loop_;
  std::atomic<bool> oracle_failed_{false};
  bool oracle_timed_out_ = false;  // supervisor thread only: the last query had no answer
  static constexpr int kInDoubtBeatsBeforeAsking = 3;
  net::EpochFence fence_;
  std::vector<std::pair<std::string, uint16_t>> coordinators_;  // supervisor thread only
  size_t next_coordinator_ = 0;                                 // supervisor thread only
  std::vector<std::string> addresses_;  // "HOST:PORT" of each coordinator; set before threads
  bool watch_ = false;                  // standbys or a decision log; set before threads
  std::atomic<int> leader_hint_{-1};    // a coordinator the log says leads, dialed next
  std::atomic<Clock::rep> awaiting_since_{0};  // a call to the coordinator in flight since
  std::thread log_thread_;                     // WatchLog, with a decision log
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool stopping_ GUARDED_BY(mu_) = false;
  std::shared_ptr<net::Channel> channel_ GUARDED_BY(mu_);
  RankAgentState state_ GUARDED_BY(mu_);
  std::thread thread_;
};

TcpRankAgent::TcpRankAgent(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
TcpRankAgent::~TcpRankAgent() = default;

Result<std::unique_ptr<TcpRankAgent>> TcpRankAgent::Start(const RankAgentOptions& options,
                                                          Participant* participant) {
  return StartRankAgentWithHooks(options, participant, nullptr);
}

Result<std::unique_ptr<TcpRankAgent>> StartRankAgentWithHooks(const RankAgentOptions& options,
                                                              Participant* participant,
                                                              RankAgentHooks* hooks) {
  if (options.secret.empty()) return Status::InvalidArgument("TcpRankAgent needs a secret");
  if (!participant) return Status::InvalidArgument("TcpRankAgent needs a participant");
  if (options.coordinator_port == 0) {
    return Status::InvalidArgument("TcpRankAgent needs the coordinator's port");
  }
  for (const auto& [host, port] : options.more_coordinators) {
    if (port == 0) {
      return Status::InvalidArgument("TcpRankAgent: more_coordinators entry '" + host +
                                     "' has no port");
    }
  }
  // The TLS files are read and checked now, not by the connection thread: a bad one fails the
  // start instead of every reconnection (and the rank never reports itself ready on it).
  WTX_RETURN_IF_ERROR(net::MakeTlsContext(false, options.secret, options.tls).status());
  auto impl = std::make_unique<TcpRankAgent::Impl>(options, participant, hooks);
  impl->Start();
  return std::make_unique<TcpRankAgent>(std::move(impl));
}

RankAgentState TcpRankAgent::state() const { return impl_->state(); }
bool TcpRankAgent::WaitResolved(std::chrono::milliseconds timeout, RankAgentState* state) const {
  return impl_->WaitResolved(timeout, state);
}

}  // namespace wtx
