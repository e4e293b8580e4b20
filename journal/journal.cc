#include "journal/journal.h"

#include <cassert>
#include <filesystem>

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

std::optional<SyncWatermark> ReadWatermark(const std::string& dir,
                                           const std::shared_ptr<rocksdb::FileSystem>& fs,
                                           std::string* problem) {
  problem->clear();
  const std::string path = dir + "/" + kWatermarkFile;
  auto f = FsOf(fs);
  if (!f->FileExists(path, rocksdb::IOOptions(), nullptr).ok()) return std::nullopt;
  std::string data;
  rocksdb::IOStatus s = rocksdb::ReadFileToString(f.get(), path, &data);
  if (!s.ok()) {
    *problem = std::string(kWatermarkFile) + " unreadable: " + s.ToString();
    return std::nullopt;
  }
  auto v = DecodeValue(data, kWatermarkFile);
  if (!v.ok()) {
    *problem = v.status().message();
    return std::nullopt;
  }
  const json& w = v.value();
  if (!w.is_object() || !w.contains("seq") || !w["seq"].is_number_unsigned() ||
      !w.contains("head") || !w["head"].is_string()) {
    *problem = std::string(kWatermarkFile) + " lacks seq/head";
    return std::nullopt;
  }
  return SyncWatermark{w["seq"].get<uint64_t>(), w["head"].get<std::string>()};
}

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

Journal::~Journal() {
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
  // Read before the database: a writer beside a read-only reader only moves it forward.
  j->watermark_at_open_ = ReadWatermark(dir, options.env.fs, &j->watermark_problem_);
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
  return j;
}

Status Journal::CheckWatermark() const {
  if (!watermark_at_open_) return Status::OK();
  const SyncWatermark& w = *watermark_at_open_;
  if (w.seq > last_seq_) {
    return Status::Corruption(dir_ + ": synced records lost: the journal ends at record " +
                              std::to_string(last_seq_) + " but record " + std::to_string(w.seq) +
                              " was synced (" + kWatermarkFile + ")");
  }
  if (w.seq == 0) return Status::OK();
  std::string v;
  rocksdb::Status s = db_->Get(rocksdb::ReadOptions(), RecordKey(w.seq), &v);
  if (!s.ok()) return FromRocks(s, dir_ + ": reading synced record " + std::to_string(w.seq));
  if (Hex64(ValueChecksum(v)) != w.head) {
    return Status::Corruption(dir_ + ": record " + std::to_string(w.seq) +
                              " differs from the record that was synced (" + kWatermarkFile +
                              " names checksum " + w.head + "): history rewritten or foreign");
  }
  return Status::OK();
}

Status Journal::WriteWatermark(bool sync) {
  // Rewritten in place (one pwrite) after the first write rather than written to a new file and
  // renamed over the old one every time: a synced append is the journal's hot path, and at
  // hundreds of ranks per process the create + rename cost more than the append. Either way
  // the content is written after the records it names are durable and is not itself synced,
  // so after a power loss it is older, missing or (torn) unreadable, never newer: the same
  // three cases Open and VerifyJournalDir already handle.
  auto fs = FsOf(options_.env.fs);
  const std::string path = dir_ + "/" + kWatermarkFile;
  // The bytes of EncodeValue({"seq": ..., "head": ...}) without building the JSON.
  CborMap w;
  w.Uint("seq", last_seq_).Text("head", Hex64(last_checksum_));
  const std::string data = EncodeCborValue(w.Encode());
  auto failed = [&](const rocksdb::IOStatus& s) {
    return Status::IOError(dir_ + ": writing " + kWatermarkFile + ": " + s.ToString());
  };
  const rocksdb::IOOptions io;
  rocksdb::IOStatus s;
  if (!watermark_file_) {
    // The first write of this journal: a new file renamed over the old one (atomic: a crash
    // leaves the old content or the new), whose descriptor is then kept for the rewrites. A
    // plain (not append-mode) descriptor, so that a write at offset 0 lands at offset 0.
    const std::string tmp = path + ".tmp";
    rocksdb::FileOptions fo;
    fo.allow_fallocate = false;
    s = fs->NewWritableFile(tmp, fo, &watermark_file_, nullptr);
    if (s.ok()) s = watermark_file_->PositionedAppend(data, 0, io, nullptr);
    if (s.ok() && sync) s = watermark_file_->Sync(io, nullptr);
    if (s.ok()) s = fs->RenameFile(tmp, path, io, nullptr);
  } else {
    s = watermark_file_->PositionedAppend(data, 0, io, nullptr);
    // The encoding only grows with the sequence number; cut anything beyond the new content
    // should it ever get shorter.
    if (s.ok() && data.size() < watermark_bytes_) {
      s = watermark_file_->Truncate(data.size(), io, nullptr);
    }
    if (s.ok() && sync) s = watermark_file_->Sync(io, nullptr);
  }
  if (!s.ok()) {
    CloseWatermark();  // the next attempt starts over with a new file
    return failed(s);
  }
  watermark_bytes_ = data.size();
  return Status::OK();
}

void Journal::CloseWatermark() {
  if (!watermark_file_) return;
  watermark_file_->Close(rocksdb::IOOptions(), nullptr).PermitUncheckedError();
  watermark_file_.reset();
  watermark_bytes_ = 0;
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
    ++expect;
  }
  if (!it->status().ok()) return FromRocks(it->status(), dir_ + ": scanning records");
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
