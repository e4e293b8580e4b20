// ParticipantImpl (participant_impl.h): storage identity (include/wtx/storage_identity.h).
// InitIdentity binds every parameter to the storage the resolver reports at Open;
// CheckIdentityLocked re-resolves the parameters a phase is about to touch and refuses, durably
// (STORAGE_MOVED), any whose storage changed; Rebind adopts the engine's current storage
// (REBIND), after which the rank serves again only once Verify proves its bytes (as Reattach)
// or a full transaction commits.
#include <algorithm>
#include <numeric>

#include "src/txn/participant_impl.h"

namespace wtx::participant_internal {

namespace {

// At most this many parameters are named in one message (the journal record names them all).
constexpr size_t kNamedInMessage = 8;

StorageEntry EntryOf(const StorageChange& c) {
  StorageEntry e;
  e.param = c.param;
  e.was_address = static_cast<int64_t>(c.was.address);
  e.was_bytes = static_cast<int64_t>(c.was.bytes);
  e.now_address = static_cast<int64_t>(c.now.address);
  e.now_bytes = static_cast<int64_t>(c.now.bytes);
  e.released = c.now.released;
  return e;
}

std::string JoinChanges(const std::vector<StorageChange>& changes) {
  std::string out;
  for (size_t i = 0; i < changes.size() && i < kNamedInMessage; ++i) {
    out += (i ? "; " : "") + DescribeStorageChange(changes[i]);
  }
  if (changes.size() > kNamedInMessage) {
    out += "; and " + std::to_string(changes.size() - kNamedInMessage) + " more";
  }
  return out;
}

}  // namespace

Status ParticipantImpl::InitIdentity() {
  resolver_ = options_.storage_resolver;
  const size_t n = manifest_->params().size();
  all_params_.resize(n);
  std::iota(all_params_.begin(), all_params_.end(), 0);
  moved_.assign(n, std::nullopt);
  if (!resolver_) return Status::OK();
  bound_.assign(n, ParamStorage{});
  WTX_RETURN_IF_ERROR(resolver_->Resolve(all_params_, bound_));
  for (uint32_t i = 0; i < n; ++i) {
    const ParamStorage& b = bound_[i];
    const std::string& name = manifest_->params()[i].name;
    if (!b.released.empty() || b.address != memory_->Address(i) || b.bytes < memory_->Size(i)) {
      return Status::InvalidArgument(
          "storage resolver: parameter '" + name + "' resolves to address " +
          std::to_string(b.address) + " (" + std::to_string(b.bytes) + " bytes" +
          (b.released.empty() ? "" : ", released: " + b.released) +
          "), but its live memory is at " + std::to_string(memory_->Address(i)) + " (" +
          std::to_string(memory_->Size(i)) + " bytes)");
    }
  }
  return Status::OK();
}

Status ParticipantImpl::MovedError(std::span<const uint32_t> params) const {
  if (moved_count_ == 0) return Status::OK();
  std::vector<StorageChange> moved;
  for (uint32_t i : params) {
    if (moved_[i]) moved.push_back({manifest_->params()[i].name, bound_[i], *moved_[i]});
  }
  if (moved.empty()) return Status::OK();
  return Err(ErrorCode::kStorageMoved,
             "rank " + Rank() + ": the engine changed the storage of " +
                 std::to_string(moved.size()) + " parameter(s) wtx is bound to; wtx does not " +
                 "touch them and the rank does not serve until rebind() adopts the new storage " +
                 "and verify() proves it or a full update commits: " + JoinChanges(moved));
}

Status ParticipantImpl::CheckIdentityLocked(std::span<const uint32_t> params) {
  if (!resolver_) return Status::OK();
  std::vector<ParamStorage> now(params.size());
  Status s = resolver_->Resolve(params, now);
  if (!s.ok()) {
    return Status(s.code(), "rank " + Rank() + ": storage resolver failed: " + s.message());
  }
  std::vector<StorageChange> fresh;  // changes not journaled yet
  for (size_t k = 0; k < params.size(); ++k) {
    const uint32_t i = params[k];
    if (now[k] == bound_[i] || (moved_[i] && *moved_[i] == now[k])) continue;
    fresh.push_back({manifest_->params()[i].name, bound_[i], now[k]});
    if (!moved_[i]) ++moved_count_;
    moved_[i] = now[k];
  }
  if (!fresh.empty()) {
    StorageMovedRecord rec;
    if (active_) {
      rec.tx = active_->req.tx;
      active_->undeclared = true;  // the transaction cannot leave the rank clean
    }
    for (const StorageChange& c : fresh) rec.params.push_back(EntryOf(c));
    rec.ts = options_.env.clock->NowMicros();
    WTX_RETURN_IF_ERROR(Log(std::move(rec), true));
  }
  return MovedError(params);
}

Status ParticipantImpl::CheckStorage() {
  MetricsScope metrics_scope(this, std::nullopt);
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckAlive());
  return CheckIdentityLocked(all_params_);
}

Result<std::vector<StorageChange>> ParticipantImpl::Rebind(std::span<const std::string> names) {
  MetricsScope metrics_scope(this, std::nullopt);
  std::lock_guard<std::mutex> l(mu_);
  WTX_RETURN_IF_ERROR(CheckAlive());
  if (active_) {
    return Err(ErrorCode::kTxActive,
               "rank " + Rank() + ": rebind: transaction '" + active_->req.tx + "' is " +
                   (active_->prepared ? "in doubt; resolve it first" : "active; abort it first"));
  }
  if (!resolver_) {
    return Status::InvalidArgument("rank " + Rank() +
                                   ": rebind: this participant has no storage resolver (its "
                                   "live memory is never moved)");
  }
  std::vector<uint32_t> params;
  for (const std::string& n : names) {
    auto pi = manifest_->FindParam(n);
    if (!pi) {
      return Err(ErrorCode::kUnknownParam,
                 "rank " + Rank() + ": rebind: unknown parameter '" + n + "'");
    }
    params.push_back(*pi);
  }
  if (names.empty()) params = all_params_;
  std::vector<ParamStorage> now(params.size());
  Status s = resolver_->Resolve(params, now);
  if (!s.ok()) {
    return Status(s.code(), "rank " + Rank() + ": storage resolver failed: " + s.message());
  }
  std::vector<StorageChange> changes;
  std::vector<uint32_t> changed;
  for (size_t k = 0; k < params.size(); ++k) {
    const uint32_t i = params[k];
    // A parameter seen moved is adopted even when its storage looks as bound again (freed and
    // reallocated at the same address): its bytes are unknown either way.
    if (now[k] == bound_[i] && !moved_[i]) continue;
    const std::string& name = manifest_->params()[i].name;
    const size_t need = memory_->Size(i);
    if (!now[k].released.empty() || now[k].address == 0 || now[k].bytes < need) {
      return Err(
          ErrorCode::kStorageMoved,
          "rank " + Rank() + ": rebind '" + name + "': its storage holds " +
              std::to_string(now[k].address == 0 || !now[k].released.empty() ? 0 : now[k].bytes) +
              " bytes, the parameter needs " + std::to_string(need) +
              (now[k].released.empty() ? "" : " (released: " + now[k].released + ")") +
              "; nothing was rebound");
    }
    changes.push_back({name, bound_[i], now[k]});
    changed.push_back(i);
  }
  if (changes.empty()) return changes;
  {
    // The storage the rank would hold after the rebind must not be shared between parameters.
    std::vector<StorageExtent> extents(all_params_.size());
    for (uint32_t i : all_params_) {
      extents[i] = {manifest_->params()[i].name, memory_->Address(i), memory_->Size(i)};
    }
    for (size_t k = 0; k < changed.size(); ++k)
      extents[changed[k]].address = changes[k].now.address;
    Status shared = CheckStorageDisjoint(extents);
    if (!shared.ok()) {
      return Err(ErrorCode::kStorageMoved,
                 "rank " + Rank() + ": rebind: " + shared.message() + "; nothing was rebound");
    }
  }
  RebindRecord rec;
  for (const StorageChange& c : changes) rec.params.push_back(EntryOf(c));
  rec.ts = options_.env.clock->NowMicros();
  WTX_RETURN_IF_ERROR(Log(std::move(rec), true));
  for (size_t k = 0; k < changed.size(); ++k) {
    const uint32_t i = changed[k];
    Status r = memory_->Rebind(i, changes[k].now.address);
    if (!r.ok()) return MemoryFailed(r);
    bound_[i] = changes[k].now;
    if (moved_[i]) --moved_count_;
    moved_[i].reset();
    // The new storage's bytes are unknown: every chunk is rehashed before it is vouched for.
    TouchBytes(i, 0, memory_->Size(i));
  }
  loaded_ = false;
  rebound_ = true;
  return changes;
}

}  // namespace wtx::participant_internal
