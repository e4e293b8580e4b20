#include "src/txn/event_records.h"

#include "journal/record_fields.h"

namespace wtx {

using nlohmann::json;

json Encode(const AcceptedUnverifiedRecord& r) {
  return {{"type", std::string(kAcceptedUnverifiedType)}, {"reason", r.reason}, {"ts", r.ts}};
}

Result<AcceptedUnverifiedRecord> DecodeAcceptedUnverified(const json& j) {
  RecordFields f(j, RecordSeqOf(j), std::string(kAcceptedUnverifiedType));
  AcceptedUnverifiedRecord r;
  r.reason = f.String("reason");
  r.ts = f.OptInt("ts").value_or(0);
  return FieldsResult(f, std::move(r));
}

}  // namespace wtx
