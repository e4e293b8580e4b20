#include "journal/journal.h"

#include <algorithm>
#include <cassert>
#include <filesystem>
#include <map>
#include <mutex>

#include <rocksdb/db.h>
#include <rocksdb/env.h>
#include <rocksdb/file_system.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "journal/record.h"
#include "src/util/cbor.h"
#include "src/util/hash_util.h"

namespace wtx {

using nlohmann::json;

namespace {

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::OK();
  if (s.IsCorruption()) return Status::Corruption(what + ": " + s.ToString());
  return Status::IOError(what + ": " + s.ToString());
}

std::string DescribeIdentity(const JournalIdentity& id) {
  if (id.role == "participant") return "participant rank " + std::to_string(id.rank);
  return id.role;
}

std::shared_ptr<rocksdb::FileSystem> FsOf(const std::shared_ptr<rocksdb::FileSystem>& fs) {
  return fs ? fs : rocksdb::FileSystem::Default();
}

}  // namespace

void ConfigureJournalOptions(rocksdb::Options* o) {
  o->create_if_missing = true;
  o->paranoid_checks = true;
  o->wal_recovery_mode = rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  o->avoid_flush_during_shutdown = true;
  o->write_buffer_size = 8 << 20;
  o->max_write_buffer_number = 2;
  o->keep_log_file_num = 2;
  o->max_log_file_size = 1 << 20;
  o->info_log_level = rocksdb::InfoLogLevel::WARN_LEVEL;
  o->max_background_jobs = 1;
  o->compression = rocksdb::kNoCompression;
}

namespace {

// The journals this process has open for writing, by canonical directory, with their holder.
// RocksDB's own lock answers a second open in the same process with an unhelpful "lock hold by
// current process"; this names the holder and the fix instead.
std::mutex& HeldMutex() {
  static std::mutex mu;
  return mu;
}
std::map<std::string, std::string>& HeldJournals() {
  static std::map<std::string, std::string> held;  // guarded by HeldMutex()
  return held;
}

}  // namespace

Journal::~Journal() {
  if (!held_as_.empty()) {
    std::lock_guard<std::mutex> l(HeldMutex());
    HeldJournals().erase(held_as_);
  }
  if (db_) {
    // Close without flushing memtables (avoid_flush_during_shutdown): the WAL holds the data.
    // A clean close syncs the WAL first, so the watermark can name the last record; a dead
    // process (its filesystem refuses writes) or a failed append leaves the watermark as is.
    if (!options_.read_only && !append_failed_ && last_seq_ > 0 &&
        db_->FlushWAL(/*sync=*/true).ok()) {
      WriteWatermark(/*sync=*/true).ok();  // best effort: a stale watermark only says less
    }
    CloseWatermark();
    db_->Close().PermitUncheckedError();
  }
}

Result<std::unique_ptr<Journal>> Journal::Open(const std::string& dir,
                                               const JournalOptions& options) {
  std::unique_ptr<Journal> j(new Journal());
  j->dir_ = dir;
  j->options_ = options;
  rocksdb::Options o;
  ConfigureJournalOptions(&o);
  o.create_if_missing = options.create_if_missing && !options.read_only;
  // Deliberate (see journal.h): a torn last record is a crash, any other damage is corruption.
  o.wal_recovery_mode = options.wal_recovery == WalRecovery::kStrict
                            ? rocksdb::WALRecoveryMode::kAbsoluteConsistency
                            : rocksdb::WALRecoveryMode::kTolerateCorruptedTailRecords;
  if (options.env.fs) {
    j->rocks_env_ = rocksdb::NewCompositeEnv(options.env.fs);
    o.env = j->rocks_env_.get();
  }
  if (!options.read_only && options.create_if_missing) {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
  } else if (!std::filesystem::exists(std::filesystem::path(dir) / "CURRENT")) {
    return Status(ErrorCode::kNotFound, "no journal at " + dir);
  }
  if (!options.read_only) {
    std::error_code ec;
    std::string key = std::filesystem::weakly_canonical(dir, ec).string();
    if (ec) key = dir;
    std::lock_guard<std::mutex> l(HeldMutex());
    auto [it, fresh] = HeldJournals().emplace(key, DescribeIdentity(options.identity));
    if (!fresh) {
      return Status(ErrorCode::kInvalidArgument,
                    "journal " + dir + " is already open in this process (by the " + it->second +
                        "); close that one first (Participant.close() / Coordinator.close(), or "
                        "leave its `with` block) or use another directory");
    }
    j->held_as_ = key;
  }
  // Read before the database: a writer beside a read-only reader only moves it forward.
  j->watermark_at_open_ = ReadWatermark(dir, options.env.fs);
  rocksdb::DB* raw = nullptr;
  rocksdb::Status s = options.read_only ? rocksdb::DB::OpenForReadOnly(o, dir, &raw)
                                        : rocksdb::DB::Open(o, dir, &raw);
  if (!s.ok()) return FromRocks(s, "opening journal " + dir);
  j->db_.reset(raw);

  std::string meta_value;
  s = j->db_->Get(rocksdb::ReadOptions(), std::string(kMetaKey), &meta_value);
  if (s.IsNotFound()) {
    // Only a journal created by this very open may lack its identity: an existing one without it
    // lost records (its write-ahead log deleted or cut) and must not be re-initialised.
    if (options.read_only || !options.create_if_missing) {
      return Status::Corruption(dir + ": journal has no identity record");
    }
    if (options.identity.role.empty()) {
      return Status::InvalidArgument("creating journal " + dir + " requires an identity");
    }
    json meta = {{"format", 1}, {"role", options.identity.role}, {"rank", options.identity.rank}};
    rocksdb::WriteOptions wo;
    wo.sync = true;
    s = j->db_->Put(wo, std::string(kMetaKey), EncodeValue(meta));
    if (!s.ok()) return FromRocks(s, "writing journal identity");
    j->identity_ = options.identity;
  } else if (!s.ok()) {
    return FromRocks(s, "reading journal identity");
  } else {
    auto meta = DecodeValue(meta_value, dir + ": identity record");
    if (!meta.ok()) return meta.status();
    const json& m = meta.value();
    if (!m.is_object() || !m.contains("role") || !m["role"].is_string() || !m.contains("rank") ||
        !m["rank"].is_number_integer()) {
      return Status::Corruption(dir + ": identity record lacks role/rank");
    }
    j->identity_.role = m["role"].get<std::string>();
    j->identity_.rank = m["rank"].get<int>();
    if (!options.identity.role.empty() && !(j->identity_ == options.identity)) {
      return Status::Corruption(dir + ": journal belongs to " + DescribeIdentity(j->identity_) +
                                ", opened as " + DescribeIdentity(options.identity));
    }
  }
  WTX_RETURN_IF_ERROR(j->LoadTail());
  WTX_RETURN_IF_ERROR(j->CheckWatermark());
  if (!options.read_only) {
    if (j->last_seq_ > 0 && !j->watermark_at_open_.newest) {
      // Records, but nothing says how many were synced: a write-ahead log cut at a record
      // boundary would look exactly like this journal. Only the operator can accept it.
      const std::string what = UnverifiedJournalMessage(dir, j->last_seq_, j->watermark_at_open_);
      if (!options.accept_unverified) {
        return Status::Corruption(what +
                                  "; refusing to open it without --accept-unverified-journal");
      }
      j->unverified_at_open_ = what;
    }
    WTX_RETURN_IF_ERROR(j->OpenWatermarkCopies());
  }
  return j;
}

std::string UnverifiedJournalMessage(const std::string& dir, uint64_t records,
                                     const WatermarkReading& w) {
  return dir + ": the journal has " + std::to_string(records) +
         " records but no valid sync watermark (" + w.Problems() +
         "): synced records lost at a record boundary cannot be ruled out";
}

Status Journal::CheckWatermark() const {
  // Every valid copy is checked (each names a record that was durable when it was written),
  // the newest first: it is the one that can name the most records.
  std::vector<const SyncWatermark*> order;
  if (watermark_at_open_.newest) order.push_back(&*watermark_at_open_.newest);
  for (const auto& w : watermark_at_open_.valid) order.push_back(&w);
  for (const SyncWatermark* w : order) {
    if (w->seq > last_seq_) {
      return Status::Corruption(dir_ + ": synced records lost: the journal ends at record " +
                                std::to_string(last_seq_) + " but record " +
                                std::to_string(w->seq) + " was synced (" + w->file + ")");
    }
    if (w->seq == 0) continue;
    std::string v;
    rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), RecordKey(w->seq), &v);
    if (!s.ok()) return FromRocks(s, dir_ + ": reading synced record " + std::to_string(w->seq));
    if (Hex64(ValueChecksum(v)) != w->head) {
      return Status::Corruption(dir_ + ": record " + std::to_string(w->seq) +
                                " differs from the record that was synced (" + w->file +
                                " names checksum " + w->head + "): history rewritten or foreign");
    }
  }
  return Status::OK();
}

Status Journal::OpenWatermarkCopies() {
  auto fs = FsOf(options_.env.fs);
  const rocksdb::IOOptions io;
  const WatermarkReading& r = watermark_at_open_;
  watermark_generation_ = 0;
  for (const auto& w : r.valid)
    watermark_generation_ = std::max(watermark_generation_, w.generation);
  auto failed = [&](const std::string& what, const rocksdb::IOStatus& s) {
    CloseWatermark();
    return Status::IOError(dir_ + ": " + what + ": " + s.ToString());
  };
  if (!r.copy_valid[0] || !r.copy_valid[1]) {
    // Created once per journal (or again after a copy was lost), and durably: a copy that a
    // power loss could take would leave a journal with records and no watermark, which is
    // refused. Every record present is made durable first, so the new copies name the last.
    if (last_seq_ > 0) {
      rocksdb::Status s = db_->FlushWAL(/*sync=*/true);
      if (!s.ok()) return FromRocks(s, dir_ + ": syncing the write-ahead log");
    }
    for (int i = 0; i < 2; ++i) {
      if (r.copy_valid[i]) continue;
      const std::string path = dir_ + "/" + kWatermarkCopies[i];
      const std::string tmp = path + ".tmp";
      const std::string data =
          EncodeWatermarkCopy(++watermark_generation_, last_seq_, last_checksum_);
      std::unique_ptr<rocksdb::FSWritableFile> f;
      rocksdb::FileOptions fo;
      fo.allow_fallocate = false;
      rocksdb::IOStatus s = fs->NewWritableFile(tmp, fo, &f, nullptr);
      if (s.ok()) s = f->Append(data, io, nullptr);
      if (s.ok()) s = f->Sync(io, nullptr);
      if (s.ok()) s = f->Close(io, nullptr);
      if (s.ok()) s = fs->RenameFile(tmp, path, io, nullptr);
      if (!s.ok()) return failed(std::string("creating ") + kWatermarkCopies[i], s);
    }
    std::unique_ptr<rocksdb::FSDirectory> d;
    rocksdb::IOStatus s = fs->NewDirectory(dir_, io, &d, nullptr);
    if (s.ok()) s = d->FsyncWithDirOptions(io, nullptr, rocksdb::DirFsyncOptions());
    if (s.ok()) s = d->Close(io, nullptr);
    if (!s.ok()) return failed("syncing the directory", s);
    if (r.legacy_present) {
      // Both copies exist now and name at least what the single file of older journals did.
      s = fs->DeleteFile(dir_ + "/" + kWatermarkFile, io, nullptr);
      if (!s.ok()) return failed(std::string("removing ") + kWatermarkFile, s);
    }
    next_copy_ = 0;  // both name the last record; either may be rewritten first
  } else {
    // Rewrite the older copy first, so that the newest survives a torn rewrite.
    const auto& newest = *r.newest;
    next_copy_ = newest.file == kWatermarkCopies[0] ? 1 : 0;
  }
  for (int i = 0; i < 2; ++i) {
    rocksdb::FileOptions fo;
    rocksdb::IOStatus s =
        fs->NewRandomRWFile(dir_ + "/" + kWatermarkCopies[i], fo, &watermark_copies_[i], nullptr);
    if (!s.ok()) return failed(std::string("opening ") + kWatermarkCopies[i], s);
  }
  return Status::OK();
}

Status Journal::WriteWatermark(bool sync) {
  // Rewritten in place (one pwrite of a fixed-size value, never a create or a rename): a synced
  // append is the journal's hot path, and at hundreds of ranks per process a create + rename
  // cost more than the append. The content is written after the records it names are durable
  // and is not itself synced, so after a power loss a copy is older or (torn) invalid, never
  // newer; the copy not rewritten holds the previous watermark meanwhile.
  auto& f = watermark_copies_[next_copy_];
  if (!f) return Status::IOError(dir_ + ": sync watermark not open");
  const std::string data =
      EncodeWatermarkCopy(watermark_generation_ + 1, last_seq_, last_checksum_);
  const rocksdb::IOOptions io;
  rocksdb::IOStatus s = f->Write(0, data, io, nullptr);
  if (s.ok() && sync) s = f->Sync(io, nullptr);
  if (!s.ok()) {
    // The copy may be torn; the other still holds the newest watermark, and the next attempt
    // rewrites this one again.
    return Status::IOError(dir_ + ": writing " + kWatermarkCopies[next_copy_] + ": " +
                           s.ToString());
  }
  ++watermark_generation_;
  next_copy_ ^= 1;
  return Status::OK();
}

void Journal::CloseWatermark() {
  for (auto& f : watermark_copies_) {
    if (!f) continue;
    f->Close(rocksdb::IOOptions(), nullptr).PermitUncheckedError();
    f.reset();
  }
}

Status Journal::LoadTail() {
  std::string sv;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), std::string(kStateKey), &sv);
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(rocksdb::ReadOptions()));
  it->SeekForPrev(RecordKey(~uint64_t{0}));
  uint64_t tail_seq = 0;
  uint64_t tail_sum = 0;
  if (it->Valid() && RecordSeq(it->key().ToStringView()) != 0) {
    tail_seq = RecordSeq(it->key().ToStringView());
    tail_sum = ValueChecksum(it->value().ToStringView());
  }
  if (!it->status().ok()) return FromRocks(it->status(), dir_ + ": reading last record");
  if (s.IsNotFound()) {
    if (tail_seq != 0) return Status::Corruption(dir_ + ": records present but no state");
    state_ = json();
    return Status::OK();
  }
  if (!s.ok()) return FromRocks(s, dir_ + ": reading state");
  auto st = DecodeValue(sv, dir_ + ": state");
  if (!st.ok()) return st.status();
  state_ = std::move(st).value();
  if (!state_.is_object() || !state_.contains("seq") || !state_["seq"].is_number_unsigned() ||
      !state_.contains("head") || !state_["head"].is_string()) {
    return Status::Corruption(dir_ + ": state lacks seq/head");
  }
  uint64_t seq = state_["seq"].get<uint64_t>();
  std::string head = state_["head"].get<std::string>();
  if (seq != tail_seq || head != Hex64(tail_sum)) {
    return Status::Corruption(dir_ + ": state names record " + std::to_string(seq) +
                              " but the last record is " + std::to_string(tail_seq));
  }
  last_seq_ = tail_seq;
  last_checksum_ = tail_sum;
  return Status::OK();
}

Status Journal::Append(std::vector<JournalRecord> records, json state, bool sync) {
  return AppendImpl(std::move(records), &state, nullptr, sync);
}

Status Journal::Append(std::vector<JournalRecord> records, CborMap state, bool sync) {
  return AppendImpl(std::move(records), nullptr, &state, sync);
}

void Journal::DecodeState() const {
  std::optional<json> s =
      ParseCbor(reinterpret_cast<const uint8_t*>(state_cbor_.data()), state_cbor_.size());
  assert(s && "a state this journal encoded decodes");
  state_ = s ? std::move(*s) : json();
  state_cbor_.clear();
  state_stale_ = false;
}

Status Journal::AppendImpl(std::vector<JournalRecord> records, json* json_state,
                           CborMap* cbor_state, bool sync) {
  assert(!options_.read_only && "append to a read-only journal");
  assert((json_state == nullptr) != (cbor_state == nullptr) && "one state form");
  rocksdb::WriteBatch batch;
  uint64_t seq = last_seq_;
  uint64_t sum = last_checksum_;
  std::string v;        // reused: the batch copies each value
  std::string payload;  // reused: a CborMap record's CBOR
  for (auto& record : records) {
    ++seq;
    if (auto* w = std::get_if<WriteRecord>(&record)) {
      EncodeWriteRecordTo(*w, seq, sum, &v);
    } else if (auto* m = std::get_if<CborMap>(&record)) {
      m->Uint("seq", seq).Text("prev", Hex64(sum));
      payload.clear();
      m->EncodeTo(&payload);
      v = EncodeCborValue(payload);
    } else {
      json& r = std::get<json>(record);
      r["seq"] = seq;
      r["prev"] = Hex64(sum);
      v = EncodeValue(r);
    }
    sum = ValueChecksum(v);
    batch.Put(RecordKey(seq), v);
  }
  std::string state_payload;
  if (json_state) {
    (*json_state)["seq"] = seq;
    (*json_state)["head"] = Hex64(sum);
    batch.Put(std::string(kStateKey), EncodeValue(*json_state));
  } else {
    cbor_state->Uint("seq", seq).Text("head", Hex64(sum));
    cbor_state->EncodeTo(&state_payload);
    batch.Put(std::string(kStateKey), EncodeCborValue(state_payload));
  }
  rocksdb::WriteOptions wo;
  wo.sync = sync;
  rocksdb::Status s = db_->Write(wo, &batch);
  if (!s.ok()) {
    append_failed_ = true;
    return FromRocks(s, dir_ + ": append");
  }
  if (sync) ++synced_appends_;
  last_seq_ = seq;
  last_checksum_ = sum;
  if (json_state) {
    state_ = std::move(*json_state);
    state_cbor_.clear();
    state_stale_ = false;
  } else {
    state_cbor_ = std::move(state_payload);
    state_stale_ = true;
  }
  if (sync) {
    // The records are durable; if the watermark cannot say so, the owner must still treat the
    // append as failed (its journal no longer behaves as specified).
    Status ws = WriteWatermark(/*sync=*/false);
    if (!ws.ok()) {
      append_failed_ = true;
      return ws;
    }
  }
  return Status::OK();
}

Status Journal::ForEachRecord(const std::function<Status(const json&)>& fn) const {
  return ForEachRecordRef([&](const RecordRef& r) -> Status {
    if (r.json) return fn(*r.json);
    return fn(r.write->ToJson());
  });
}

Status Journal::ForEachRecordRef(const std::function<Status(const RecordRef&)>& fn) const {
  // A sequential scan of values read once: no block-cache churn, large readahead.
  rocksdb::ReadOptions ro;
  ro.fill_cache = false;
  ro.readahead_size = 4 << 20;
  const std::string upper = RecordKey(~uint64_t{0});
  const rocksdb::Slice upper_slice(upper);
  ro.iterate_upper_bound = &upper_slice;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  uint64_t expect = 1;
  uint64_t prev = 0;
  // Built only when a record is reported on: the walk does not allocate per record.
  auto what = [&](uint64_t seq) { return dir_ + ": record " + std::to_string(seq); };
  for (it->Seek(RecordKey(0)); it->Valid(); it->Next()) {
    const uint64_t seq = RecordSeq(it->key().ToStringView());
    if (seq == 0) break;  // past the record key range
    if (seq != expect) {
      return Status::Corruption(what(seq) + ": expected record " + std::to_string(expect) +
                                " (records missing or out of order)");
    }
    const std::string_view value = it->value().ToStringView();
    RecordRef ref;
    ref.seq = seq;
    WriteRecordView write;
    json decoded;
    uint64_t stored_seq = 0;
    bool shaped = true;
    bool chained = true;
    if (IsWriteRecordValue(value)) {
      auto w = DecodeWriteRecord(value, what(seq));
      if (!w.ok()) return w.status();
      write = w.value();
      ref.write = &write;
      stored_seq = write.seq;
      chained = write.prev == prev;
    } else {
      auto rec = DecodeValue(value, what(seq));
      if (!rec.ok()) return rec.status();
      decoded = std::move(rec).value();
      ref.json = &decoded;
      const json& r = decoded;
      shaped = r.is_object() && r.contains("seq") && r["seq"].is_number_unsigned();
      if (shaped) stored_seq = r["seq"].get<uint64_t>();
      // The chain link, compared as hex text exactly as written.
      chained = shaped && r.contains("prev") && r["prev"].is_string() &&
                r["prev"].get<std::string>() == Hex64(prev);
    }
    if (!shaped || stored_seq != seq) {
      return Status::Corruption(what(seq) + ": stored under the wrong sequence number");
    }
    if (!chained) {
      return Status::Corruption(what(seq) + ": chain broken (does not follow record " +
                                std::to_string(seq - 1) + ")");
    }
    prev = ValueChecksum(value);
    // Readers index records by field; a malformed record (valid checksum, wrong shape) is
    // corruption, not an exception escaping into `wtx check` or a recovering process.
    Status s;
    try {
      s = fn(ref);
    } catch (const json::exception& e) {
      s = Status::Corruption(what(seq) + ": malformed record: " + e.what());
    }
    WTX_RETURN_IF_ERROR(s);
    if (walk_progress_ && expect % 4096 == 0) walk_progress_(expect, last_seq_);
    ++expect;
  }
  if (!it->status().ok()) return FromRocks(it->status(), dir_ + ": scanning records");
  if (walk_progress_) walk_progress_(expect - 1, last_seq_);
  if (expect - 1 != last_seq_) {
    return Status::Corruption(dir_ + ": state names record " + std::to_string(last_seq_) +
                              " but the chain ends at " + std::to_string(expect - 1));
  }
  return Status::OK();
}

Status Journal::Verify() const {
  return ForEachRecord([](const json&) { return Status::OK(); });
}

Status Journal::VerifyStorage() const {
  rocksdb::Status s = db_->VerifyChecksum();
  if (!s.ok()) return FromRocks(s, dir_ + ": table file checksums");
  rocksdb::ReadOptions ro;
  ro.verify_checksums = true;
  ro.fill_cache = false;
  std::unique_ptr<rocksdb::Iterator> it(db_->NewIterator(ro));
  for (it->SeekToFirst(); it->Valid(); it->Next()) {
    const std::string_view key = it->key().ToStringView();
    if (key != kMetaKey && key != kStateKey && RecordSeq(key) == 0) {
      std::string hex;
      for (char c : key.substr(0, 16)) hex += Hex64(static_cast<uint8_t>(c)).substr(14);
      return Status::Corruption(dir_ + ": unexpected key 0x" + hex + " (" +
                                std::to_string(key.size()) + " bytes; not a journal key)");
    }
    // Every value's own checksum and encoding. A binary WRITE record is decoded as a view, not
    // converted to JSON: the same checks, without an allocation per field (a daemon verifies
    // its whole journal this way at every start).
    const std::string_view value = it->value().ToStringView();
    auto what = [&] {
      return dir_ + ": value of key " +
             (RecordSeq(key) ? "record " + std::to_string(RecordSeq(key)) : std::string(key));
    };
    if (IsWriteRecordValue(value)) {
      if (auto w = DecodeWriteRecord(value, "value"); !w.ok()) {
        return DecodeWriteRecord(value, what()).status();
      }
    } else if (auto v = DecodeValue(value, "value"); !v.ok()) {
      return DecodeValue(value, what()).status();
    }
  }
  if (!it->status().ok()) return FromRocks(it->status(), dir_ + ": scanning keys");
  return CheckWatermark();
}

}  // namespace wtx
