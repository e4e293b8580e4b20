// The fleet registry's reads and writes in etcd (keys and values: fleet_records.h). Every write
// of a shared key is guarded by a compare, so concurrent members never lower a step: RaiseMark
// writes only over the value it read, and reads again when another writer came first.
//
// Thread-safety: every method is safe from any thread (the etcd client is).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "src/etcd/etcd_client.h"
#include "src/fleet/fleet_records.h"
#include "src/fleet/fleet_view.h"
#include "wtx/fleet.h"
#include "wtx/status.h"

namespace wtx::fleet {

class Registry {
 public:
  // kInvalidArgument for a malformed url or fleet name, or unusable TLS files.
  static Result<std::unique_ptr<Registry>> Open(const FleetOptions& options);

  // Everything under the fleet's keys, in one read. A rank record that does not decode stands
  // for its rank as held, naming the key and what is wrong; a policy or step mark that does not
  // decode is kJournalCorrupt naming the key.
  Result<RegistryContents> Read();
  // The policy and the newest and published steps only (no rank records), in one request: what
  // a member needs to judge its own step.
  Result<RegistryContents> ReadMarks();
  // Writes `record` under its rank's key, attached to `lease`.
  Status PutRank(const RankRecord& record, int64_t lease);
  // Raises the mark under `key` (keys().newest() or keys().published()) to `mark`: written when
  // none is stored, the stored one names another lineage than `fleet_lineage`, or its step is
  // smaller. Returns whether it wrote.
  Result<bool> RaiseMark(const std::string& key, const StepMark& mark,
                         const std::string& fleet_lineage);
  Status PutPolicy(const FleetPolicy& policy);

  etcd::Client& client() { return *client_; }
  const FleetKeys& keys() const { return keys_; }
  const std::string& fleet() const { return fleet_; }
  // "fleet 'NAME' (etcd://...)" for messages.
  const std::string& name() const { return name_; }

 private:
  Registry(std::unique_ptr<etcd::Client> client, FleetKeys keys, std::string fleet,
           std::string name);
  // Adds what `kvs` hold to *c (see Read for records that do not decode).
  Status Decode(const std::vector<etcd::KeyValue>& kvs, RegistryContents* c) const;

  const std::unique_ptr<etcd::Client> client_;
  const FleetKeys keys_;
  const std::string fleet_;
  const std::string name_;
};

}  // namespace wtx::fleet
