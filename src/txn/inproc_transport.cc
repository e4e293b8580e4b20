#include "wtx/inproc_transport.h"
#include "src/util/thread_annotations.h"

namespace wtx {

class InProcTransport::Endpoint : public ParticipantEndpoint {
 public:
  explicit Endpoint(int rank) : rank_(rank) {}

  void Set(Participant* p) {
    std::lock_guard<std::mutex> l(mu_);
    p_ = p;
  }
  void SetSilent(bool s) {
    std::lock_guard<std::mutex> l(mu_);
    silent_ = s;
  }

  Result<RankDescription> Describe() override {
    Participant* p = Get();
    if (!p) return Dead();
    return p->Describe();
  }
  Status CheckBegin(const BeginRequest& req, std::vector<bool>* holds) override {
    Participant* p = Get();
    if (!p) return Dead();
    if (holds) {
      holds->clear();
      for (const auto& s : req.sources) holds->push_back(p->manifest().HoldsSource(s));
    }
    return p->CheckBegin(req);
  }
  Status Begin(const BeginRequest& req) override {
    Participant* p = Get();
    if (!p) return Dead();
    return p->Begin(req);
  }
  Result<Vote> Prepare(const std::string& tx, std::chrono::milliseconds) override {
    Participant* p = Get();
    if (!p) return Dead();
    if (silent()) {
      return Status(ErrorCode::kTimeout, "rank " + std::to_string(rank_) + " did not answer");
    }
    return p->Prepare(tx);
  }
  Status Decide(const std::string& tx, Decision d, const DecidedVersion& version) override {
    Participant* p = Get();
    if (!p) return Dead();
    return p->Decide(tx, d, version);
  }

 private:
  Participant* Get() {
    std::lock_guard<std::mutex> l(mu_);
    return p_;
  }
  bool silent() {
    std::lock_guard<std::mutex> l(mu_);
    return silent_;
  }
  Status Dead() const {
    return Status(ErrorCode::kCrashed, "rank " + std::to_string(rank_) + " is down");
  }

  const int rank_;
  std::mutex mu_;
  Participant* p_ GUARDED_BY(mu_) = nullptr;
  bool silent_ GUARDED_BY(mu_) = false;
};

InProcTransport::InProcTransport(int num_ranks) {
  for (int r = 0; r < num_ranks; ++r) endpoints_.push_back(std::make_unique<Endpoint>(r));
}

InProcTransport::~InProcTransport() = default;

void InProcTransport::SetParticipant(int rank, Participant* p) { endpoints_.at(rank)->Set(p); }

void InProcTransport::SetSilent(const std::set<int>& ranks) {
  for (int r = 0; r < num_ranks(); ++r) endpoints_[r]->SetSilent(ranks.count(r) > 0);
}

ParticipantEndpoint* InProcTransport::endpoint(int rank) { return endpoints_.at(rank).get(); }

}  // namespace wtx
