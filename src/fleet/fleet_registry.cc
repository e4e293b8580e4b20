#include "src/fleet/fleet_registry.h"

#include <charconv>

#include "src/etcd/etcd_url.h"

namespace wtx::fleet {

namespace {

// A decoder's error with the key it came from.
Status AtKey(const Status& s, const std::string& key) {
  return Status(s.code(), "etcd key '" + key + "': " + s.message());
}

// The rank a record that did not decode stands for: replica and rank from its key
// ("<ranks>/<replica>/<rank>"); nullopt when the key says neither.
std::optional<RankRecord> UndecodedRank(const std::string& key, const std::string& ranks_prefix,
                                        const Status& why) {
  const std::string rest = key.substr(ranks_prefix.size());
  const size_t slash = rest.rfind('/');
  if (slash == std::string::npos || slash == 0) return std::nullopt;
  int rank = -1;
  const char* first = rest.data() + slash + 1;
  const char* last = rest.data() + rest.size();
  auto [end, ec] = std::from_chars(first, last, rank);
  if (ec != std::errc() || end != last || rank < 0) return std::nullopt;
  RankRecord r;
  r.replica = rest.substr(0, slash);
  r.rank = rank;
  r.state = ReplicaState::kHeld;
  r.reason = AtKey(why, key).message();
  return r;
}

}  // namespace

Registry::Registry(std::unique_ptr<etcd::Client> client, FleetKeys keys, std::string fleet,
                   std::string name)
    : client_(std::move(client)),
      keys_(std::move(keys)),
      fleet_(std::move(fleet)),
      name_(std::move(name)) {}

Result<std::unique_ptr<Registry>> Registry::Open(const FleetOptions& options) {
  WTX_RETURN_IF_ERROR(CheckFleetName("fleet", options.fleet));
  WTX_ASSIGN_OR_RETURN(url, etcd::ParseEtcdUrl(options.url));
  WTX_ASSIGN_OR_RETURN(client, etcd::OpenClientFor(url, options.tls, options.request_timeout));
  std::string name = "fleet '" + options.fleet + "' (" + url.ToString() + ")";
  return std::unique_ptr<Registry>(new Registry(
      std::move(client), FleetKeys(url.prefix, options.fleet), options.fleet, std::move(name)));
}

Status Registry::Decode(const std::vector<etcd::KeyValue>& kvs, RegistryContents* c) const {
  for (const etcd::KeyValue& kv : kvs) {
    if (kv.key == keys_.policy()) {
      auto policy = DecodePolicy(kv.value);
      if (!policy.ok()) return AtKey(policy.status(), kv.key);
      c->policy = std::move(policy).value();
    } else if (kv.key == keys_.newest() || kv.key == keys_.published()) {
      auto mark = DecodeStepMark(kv.value);
      if (!mark.ok()) return AtKey(mark.status(), kv.key);
      (kv.key == keys_.newest() ? c->newest : c->published) = std::move(mark).value();
    } else if (kv.key.rfind(keys_.ranks(), 0) == 0) {
      auto record = DecodeRankRecord(kv.value);
      if (record.ok() && keys_.rank(record->replica, record->rank) != kv.key) {
        record = Status::Corruption("the record names replica '" + record->replica + "' rank " +
                                    std::to_string(record->rank) + ", not its key's");
      }
      if (record.ok()) {
        c->ranks.push_back(std::move(record).value());
      } else if (auto undecoded = UndecodedRank(kv.key, keys_.ranks(), record.status())) {
        c->ranks.push_back(std::move(*undecoded));
      }
    }
  }
  return Status::OK();
}

Result<RegistryContents> Registry::Read() {
  WTX_ASSIGN_OR_RETURN(
      range, client_->Range(etcd::Op::GetPrefix(keys_.base, /*by_create=*/false), "read " + name_));
  RegistryContents c;
  WTX_RETURN_IF_ERROR(Decode(range.kvs, &c));
  return c;
}

Result<RegistryContents> Registry::ReadMarks() {
  WTX_ASSIGN_OR_RETURN(txn,
                       client_->Txn({},
                                    {etcd::Op::Get(keys_.policy()), etcd::Op::Get(keys_.newest()),
                                     etcd::Op::Get(keys_.published())},
                                    {}, "read the steps of " + name_));
  RegistryContents c;
  for (const etcd::OpResponse& r : txn.responses) WTX_RETURN_IF_ERROR(Decode(r.kvs, &c));
  return c;
}

Status Registry::PutRank(const RankRecord& record, int64_t lease) {
  WTX_ASSIGN_OR_RETURN(value, EncodeRankRecord(record));
  const std::string key = keys_.rank(record.replica, record.rank);
  return client_->Put(key, value, lease, "register in " + name_ + " (key " + key + ")").status();
}

Result<bool> Registry::RaiseMark(const std::string& key, const StepMark& mark,
                                 const std::string& fleet_lineage) {
  WTX_ASSIGN_OR_RETURN(value, EncodeStepMark(mark));
  const std::string what =
      "raise " + key + " of " + name_ + " to step " + std::to_string(mark.step);
  // Another writer between the read and the write fails the compare: read again. Each round
  // either writes or finds a mark that needs none; a handful is plenty for one fleet.
  for (int attempt = 0; attempt < 16; ++attempt) {
    WTX_ASSIGN_OR_RETURN(range, client_->Range(etcd::Op::Get(key), what));
    etcd::Compare guard;
    guard.key = key;
    guard.result = etcd::Compare::Result::kEqual;
    if (range.kvs.empty()) {
      guard.target = etcd::Compare::Target::kCreate;
      guard.number = 0;
    } else {
      auto stored = DecodeStepMark(range.kvs.front().value);
      // A stored mark that does not decode is replaced: it protects nothing.
      if (stored.ok() && stored->lineage == fleet_lineage && stored->step >= mark.step) {
        return false;
      }
      if (stored.ok() && stored->lineage != fleet_lineage && mark.lineage != fleet_lineage) {
        return false;
      }
      guard.target = etcd::Compare::Target::kMod;
      guard.number = range.kvs.front().mod_revision;
    }
    WTX_ASSIGN_OR_RETURN(txn, client_->Txn({guard}, {etcd::Op::Put(key, value)}, {}, what));
    if (txn.succeeded) return true;
  }
  return Status::Error(ErrorCode::kDecisionLogUnavailable,
                       what + ": other writers kept changing it; trying again later");
}

Status Registry::PutPolicy(const FleetPolicy& policy) {
  WTX_ASSIGN_OR_RETURN(value, EncodePolicy(policy));
  return client_->Put(keys_.policy(), value, 0, "set the policy of " + name_).status();
}

}  // namespace wtx::fleet
