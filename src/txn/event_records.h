// Event records that both journals (a participant's and the coordinator's) can hold: facts an
// operator must be able to find later that change no state. One struct per record type, with
// exactly one Encode (the JSON object stored as CBOR; the journal adds "seq" and "prev") and
// one Decode (kJournalCorrupt naming the record's seq, type and field). The participant and
// coordinator codecs list the type among theirs and call these.
//
// Thread-safety: plain values and pure functions.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "wtx/status.h"

namespace wtx {

// The stored type name (the only place it is spelled).
inline constexpr std::string_view kAcceptedUnverifiedType = "ACCEPTED_UNVERIFIED";

// The process was started on a journal that had records but no valid sync watermark, because
// the operator accepted it (--accept-unverified-journal): records synced before may have been
// lost without a trace. `reason` says what was missing.
struct AcceptedUnverifiedRecord {
  std::string reason;
  int64_t ts = 0;
};

nlohmann::json Encode(const AcceptedUnverifiedRecord& r);
Result<AcceptedUnverifiedRecord> DecodeAcceptedUnverified(const nlohmann::json& r);

}  // namespace wtx
