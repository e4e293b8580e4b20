#include "journal/verify.h"

#include <algorithm>
#include <cassert>
#include <filesystem>

namespace wtx {

namespace {

namespace fs = std::filesystem;

std::string Describe(const JournalIdentity& id) {
  if (id.role == "participant") return "participant rank " + std::to_string(id.rank);
  return id.role.empty() ? "(unknown)" : id.role;
}

bool EndsWith(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

struct Inventory {
  bool current = false;
  std::vector<std::string> logs, tables, manifests;
  std::string Files() const {
    std::string out;
    auto add = [&](const std::vector<std::string>& v) {
      for (const auto& f : v) out += (out.empty() ? "" : ", ") + f;
    };
    add(manifests);
    add(tables);
    add(logs);
    return out.empty() ? "(none)" : out;
  }
};

Inventory Scan(const std::string& dir) {
  Inventory inv;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    std::error_code sec;
    const std::string sized =
        name + " (" + std::to_string(fs::file_size(e.path(), sec)) + " bytes)";
    if (name == "CURRENT") inv.current = true;
    if (EndsWith(name, ".log")) inv.logs.push_back(sized);
    if (EndsWith(name, ".sst")) inv.tables.push_back(sized);
    if (name.rfind("MANIFEST-", 0) == 0) inv.manifests.push_back(sized);
  }
  std::sort(inv.logs.begin(), inv.logs.end());
  std::sort(inv.tables.begin(), inv.tables.end());
  std::sort(inv.manifests.begin(), inv.manifests.end());
  return inv;
}

// Names the damaged part from what RocksDB reported while opening.
Status OpenFailure(const std::string& dir, const Status& s, const Inventory& inv) {
  const std::string& m = s.message();
  std::string what;
  if (m.find("No such file") != std::string::npos || m.find("not found") != std::string::npos ||
      m.find("non-existent") != std::string::npos) {
    what = "a file the journal needs is missing";
  } else if (m.find(".sst") != std::string::npos) {
    what = "table (SST) file damaged";
  } else if (m.find("MANIFEST") != std::string::npos || m.find("CURRENT") != std::string::npos) {
    what = "database manifest damaged";
  } else if (s.code() == ErrorCode::kJournalCorrupt) {
    what = "write-ahead log corrupt (a record fails its checksum or is cut short inside the log)";
  } else {
    return Status::IOError(dir + ": cannot open the journal: " + m);
  }
  return Status::Corruption(dir + ": " + what + ": " + m + " [files: " + inv.Files() + "]");
}

}  // namespace

Result<std::unique_ptr<Journal>> OpenTrustedJournalStore(const std::string& dir,
                                                         const JournalOptions& options,
                                                         const JournalContentCheck& content_check,
                                                         std::vector<std::string>* warnings) {
  assert(!options.read_only &&
         "OpenTrustedJournalStore opens for writing; read-only needs no gate");
  std::error_code ec;
  const bool exists = fs::exists(dir, ec);
  if (exists && !fs::is_directory(dir, ec)) {
    return Status::InvalidArgument("journal " + dir + " exists and is not a directory");
  }
  if (!exists || fs::is_empty(dir, ec)) {
    // A new journal; nothing is there to lose.
    if (!options.create_if_missing) return Status(ErrorCode::kNotFound, "no journal at " + dir);
    return Journal::Open(dir, options);
  }
  VerifyOptions vo;
  vo.fs = options.env.fs;
  vo.accept_unverified = options.accept_unverified;
  vo.content_check = content_check;
  if (!options.identity.role.empty()) vo.expect = options.identity;
  JournalCheckReport rep = VerifyJournalStore(dir, vo);
  if (rep.status.code() == ErrorCode::kNotFound) {
    std::string names;
    size_t n = 0;
    for (const auto& e : fs::directory_iterator(dir, ec)) {
      if (n++ < 5) names += (names.empty() ? "" : ", ") + e.path().filename().string();
    }
    return Status::InvalidArgument(
        "journal directory " + dir + " is not empty but holds no journal (" + names +
        (n > 5 ? ", ..." : "") +
        "): refusing to initialise a new journal over it; give an empty or absent directory");
  }
  if (!rep.status.ok()) {
    const bool unverified =
        rep.status.message().find("no valid sync watermark") != std::string::npos;
    return Status(
        rep.status.code(),
        rep.status.message() + " (refusing to open it; `wtx check " + dir + "` reports the same" +
            (unverified ? "; start with --accept-unverified-journal to accept it" : "") + ")");
  }
  if (warnings) warnings->insert(warnings->end(), rep.warnings.begin(), rep.warnings.end());
  JournalOptions o = options;
  o.create_if_missing = false;  // verified: it exists, and must not be created anew
  return Journal::Open(dir, o);
}

Result<std::unique_ptr<Journal>> OpenVerifiedJournalStore(const std::string& dir,
                                                          const JournalContentCheck& content_check,
                                                          std::vector<std::string>* warnings) {
  VerifyOptions vo;
  vo.content_check = content_check;
  JournalCheckReport rep = VerifyJournalStore(dir, vo);
  if (!rep.status.ok()) return rep.status;
  if (warnings) warnings->insert(warnings->end(), rep.warnings.begin(), rep.warnings.end());
  JournalOptions o;
  o.read_only = true;
  o.create_if_missing = false;
  WTX_ASSIGN_OR_RETURN(j, Journal::Open(dir, o));
  if (content_check) WTX_RETURN_IF_ERROR(content_check(*j));
  return j;
}

std::optional<JournalIdentity> IdentityFromDirName(const std::string& dir) {
  std::string d = dir;
  while (d.size() > 1 && d.back() == '/') d.pop_back();
  const std::string base = fs::path(d).filename().string();
  if (base == "coordinator") return JournalIdentity{"coordinator", -1};
  if (base.rfind("rank-", 0) == 0 && base.size() > 5 && base.size() < 15 &&
      std::all_of(base.begin() + 5, base.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return JournalIdentity{"participant", std::stoi(base.substr(5))};
  }
  return std::nullopt;
}

JournalCheckReport VerifyJournalStore(const std::string& dir, const VerifyOptions& options) {
  JournalCheckReport rep;
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    rep.status = Status(ErrorCode::kNotFound, "no journal directory " + dir);
    return rep;
  }
  const Inventory inv = Scan(dir);
  if (!inv.current) {
    if (!inv.logs.empty() || !inv.tables.empty() || !inv.manifests.empty()) {
      rep.status = Status::Corruption(dir +
                                      ": CURRENT is missing (deleted?) but the directory "
                                      "holds journal files: " +
                                      inv.Files());
    } else {
      rep.status = Status(ErrorCode::kNotFound, "no journal at " + dir);
    }
    return rep;
  }

  JournalOptions o;
  o.read_only = true;
  o.create_if_missing = false;
  o.env.fs = options.fs;
  o.wal_recovery = WalRecovery::kStrict;
  auto opened = Journal::Open(dir, o);
  if (!opened.ok()) {
    const Status strict = opened.status();
    if (strict.code() == ErrorCode::kNotFound) {
      rep.status = strict;
      return rep;
    }
    // A torn tail (incomplete last record) opens under the crash policy; anything else fails
    // both ways. The crash policy also re-checks the sync watermark.
    o.wal_recovery = WalRecovery::kTolerateTornTail;
    opened = Journal::Open(dir, o);
    if (!opened.ok()) {
      const Status& s = opened.status();
      if (s.message().find(kWatermarkFile) != std::string::npos) {
        rep.status = s;
      } else if (s.message().find("journal has no identity") != std::string::npos) {
        rep.status = Status::Corruption(s.message() + " (its write-ahead log deleted or cut?) " +
                                        "[files: " + inv.Files() + "]");
      } else {
        rep.status = OpenFailure(dir, s, inv);
      }
      return rep;
    }
    rep.torn_tail = true;
    rep.warnings.push_back(
        "the write-ahead log ends in an incomplete record (a crash during an unsynced append; " +
        strict.message() + "); every synced record is present, the next open drops it");
  }
  const Journal& j = *opened.value();
  rep.identity = j.identity();
  rep.records = j.last_seq();
  rep.watermark = j.watermark_at_open();

  const std::optional<JournalIdentity> expect =
      options.expect ? options.expect : IdentityFromDirName(dir);
  if (expect) {
    rep.identity_checked = true;
    if (!(j.identity() == *expect)) {
      rep.status = Status::Corruption(dir + ": journal of " + Describe(j.identity()) +
                                      " where the journal of " + Describe(*expect) +
                                      " belongs (files copied from another participant?)");
      return rep;
    }
  }
  if (Status s = j.VerifyStorage(); !s.ok()) {
    rep.status = s.code() == ErrorCode::kJournalCorrupt
                     ? Status::Corruption(s.message() + " [files: " + inv.Files() + "]")
                     : s;
    return rep;
  }
  if (options.content_check) {
    j.set_walk_progress(options.on_record);
    if (Status s = options.content_check(j); !s.ok()) {
      rep.status = s;
      return rep;
    }
  }
  const WatermarkReading& w = j.watermark_reading();
  if (!rep.watermark && j.last_seq() > 0) {
    // Nothing says how many records were synced: a write-ahead log cut at a record boundary
    // looks exactly like this. Corruption (the daemons refuse it) unless the operator accepts.
    const std::string what = UnverifiedJournalMessage(dir, j.last_seq(), w);
    if (!options.accept_unverified) {
      rep.status = Status::Corruption(what);
      return rep;
    }
    rep.warnings.push_back(what + " (accepted: --accept-unverified-journal)");
  } else if (rep.watermark && !w.problems.empty() && !w.LegacyFormat()) {
    // One copy lost or damaged (not a journal of the older single-file format, which has no
    // copies yet): verified against the other; the next read-write open recreates it.
    rep.warnings.push_back("sync watermark damaged: " + w.Problems() + "; verified against " +
                           rep.watermark->file + " (record " + std::to_string(rep.watermark->seq) +
                           ")");
  }
  if (options.strict && !rep.warnings.empty()) {
    rep.status = Status::Corruption(dir + ": " + rep.warnings.front() + " (--strict)");
  }
  return rep;
}

}  // namespace wtx
