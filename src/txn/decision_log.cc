// OpenDecisionLog: picks the implementation of the decision log by the url's scheme.
#include "wtx/decision_log.h"

#include <string_view>

#include "src/txn/decision_log_etcd.h"

namespace wtx {

Result<std::shared_ptr<DecisionLog>> OpenDecisionLog(const DecisionLogOptions& options) {
  if (std::string_view(options.url).substr(0, 7) == "etcd://") {
    return OpenEtcdDecisionLog(options);
  }
  return Status::InvalidArgument("decision log url '" + options.url +
                                 "': missing scheme (etcd://HOST:PORT[,HOST:PORT...]/PREFIX)");
}

}  // namespace wtx
