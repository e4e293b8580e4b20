// ServedAtTime (wtx/journal_reader.h): the serving intervals of a rank's journal, replayed from
// its history entries up to one moment.
#include "wtx/journal_reader.h"

namespace wtx {

namespace {

// The end of an entry's transaction (its outcome's time); nullopt while it has none.
std::optional<int64_t> EndOf(const HistoryEntry& e) {
  if (e.outcome == "active" || e.outcome == "prepared") return std::nullopt;
  const auto total = e.timings_us.find("total");
  return e.time_micros + (total == e.timings_us.end() ? 0 : total->second);
}

}  // namespace

Result<ServedAt> ServedAtTime(const JournalHistory& h, int64_t at) {
  if (h.owner.role != "participant") {
    return Status::InvalidArgument("a " + h.owner.role +
                                   " journal serves nothing: give a rank's journal");
  }
  ServedAt s;
  s.at_micros = at;
  s.reason = "no version committed yet";
  for (const HistoryEntry& e : h.entries) {
    if (at < e.time_micros) {
      s.until_micros = e.time_micros;
      return s;
    }
    const std::optional<int64_t> end = EndOf(e);
    if (!end || at < *end) {  // the update is open at `at`: the rank holds
      s.serving = false;
      s.reason = e.outcome == "prepared" && !end
                     ? "transaction '" + e.tx + "' prepared, its outcome not in the journal"
                     : "update '" + e.tx + "' in progress";
      s.since_micros = e.time_micros;
      s.until_micros = end;
      return s;
    }
    s.since_micros = *end;
    if (e.outcome == "committed") {
      s.version = e.version;
      s.served_digest = e.served_digest;
      s.committed_tx = e.tx;
      s.lineage = e.lineage;
      s.step = e.step;
      s.serving = true;
      s.reason.clear();
    } else if (e.dirty_after.value_or(false)) {
      s.serving = false;
      s.reason = "dirty: '" + e.tx + "' " + e.outcome + " (" + e.reason + ")";
    } else if (s.version) {  // a noop or a clean abort: the committed version serves again
      s.serving = true;
      s.reason.clear();
    }
  }
  return s;
}

}  // namespace wtx
