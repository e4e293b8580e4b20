// Measurements of the durability path: synced_writes_per_tx, replay_records_per_s,
// journal_vs_rocksdb.
#include <algorithm>
#include <memory>

#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <rocksdb/write_batch.h>

#include "journal/journal.h"
#include "journal/record.h"
#include "src/testing/fault_injection_fs.h"
#include "src/txn/journal_check.h"
#include "src/util/hash_util.h"
#include "tools/bench/bench.h"
#include "tools/bench/bench_util.h"
#include "wtx/content_hash.h"
#include "wtx/coordinator.h"
#include "wtx/inproc_transport.h"
#include "wtx/participant.h"

namespace wtx::bench {

using nlohmann::json;

namespace {

// A one-parameter manifest: `rows` x `cols` bf16, one shard.
Result<ManifestPtr> OneParamManifest(int64_t rows, int64_t cols) {
  ShardSpec s;
  s.id = "0";
  s.source = "w";
  s.source_shape = {rows, cols};
  s.box = {{0, rows}, {0, cols}};
  s.source_box = s.box;
  ParamSpec p;
  p.name = "w";
  p.dtype = DType::kBF16;
  p.shape = {rows, cols};
  p.shards = {s};
  return Manifest::Build({p}, {}, {});
}

rocksdb::Options JournalLikeOptions() {
  rocksdb::Options o;
  ConfigureJournalOptions(&o);
  return o;
}

Status FromRocks(const rocksdb::Status& s, const std::string& what) {
  if (s.ok()) return Status::OK();
  return Status::IOError(what + ": " + s.ToString());
}

}  // namespace

// ---- synced_writes_per_tx ------------------------------------------------------------------

Result<json> BenchSyncs(const BenchOptions& o) {
  constexpr int kRanks = 2;
  const int txs = o.quick ? 5 : 50;
  WTX_ASSIGN_OR_RETURN(manifest, OneParamManifest(64, 64));
  WTX_ASSIGN_OR_RETURN(dir, ScratchDir::Make(o.scratch_dir, "syncs"));
  std::vector<std::shared_ptr<FaultInjectionFileSystem>> fs;
  std::vector<std::unique_ptr<Participant>> ranks;
  InProcTransport transport(kRanks);
  for (int r = 0; r < kRanks; ++r) {
    fs.push_back(std::make_shared<FaultInjectionFileSystem>());
    ParticipantOptions po;
    po.rank = r;
    po.journal_dir = dir.path() + "/rank" + std::to_string(r);
    po.env.fs = fs.back();
    po.kernel_identity = "bench";
    WTX_ASSIGN_OR_RETURN(p, Participant::Open(po, manifest));
    transport.SetParticipant(r, p.get());
    ranks.push_back(std::move(p));
  }
  auto coord_fs = std::make_shared<FaultInjectionFileSystem>();
  CoordinatorOptions co;
  co.journal_dir = dir.path() + "/coordinator";
  co.env.fs = coord_fs;
  WTX_ASSIGN_OR_RETURN(coordinator, Coordinator::Open(co, &transport));

  std::vector<uint8_t> bytes(64 * 64 * 2);
  FillPattern(bytes.data(), bytes.size(), 3);
  auto run_tx = [&](int n) -> Status {
    BeginRequest req;
    req.tx = "sync-" + std::to_string(n);
    BeginOutcome b = coordinator->Begin(req);
    if (!b.status.ok()) return b.status;
    for (auto& p : ranks) {
      WritePiece w{"w", "", std::nullopt, bytes.data(), bytes.size()};
      WTX_RETURN_IF_ERROR(p->Write(std::span<const WritePiece>(&w, 1)));
    }
    CommitOutcome c = coordinator->Commit(req.tx);
    if (!c.status.ok()) return c.status;
    if (c.decision != Decision::kCommit) {
      return Status::Error(ErrorCode::kVoteNo, "bench transaction " + req.tx + " did not commit");
    }
    return Status::OK();
  };
  WTX_RETURN_IF_ERROR(run_tx(0));  // opening syncs (identity, CREATE, MANIFEST) not counted
  for (auto& f : fs) f->ResetCounters();
  coord_fs->ResetCounters();
  for (int n = 1; n <= txs; ++n) WTX_RETURN_IF_ERROR(run_tx(n));

  double worst = 0, worst_all = 0;
  json per_rank = json::array();
  for (int r = 0; r < kRanks; ++r) {
    const double wal = static_cast<double>(fs[r]->wal_syncs()) / txs;
    const double all = static_cast<double>(fs[r]->syncs()) / txs;
    worst = std::max(worst, wal);
    worst_all = std::max(worst_all, all);
    per_rank.push_back({{"rank", r}, {"wal_syncs_per_tx", wal}, {"all_syncs_per_tx", all}});
  }
  const double coord_wal = static_cast<double>(coord_fs->wal_syncs()) / txs;
  const double coord_all = static_cast<double>(coord_fs->syncs()) / txs;
  Progress(o, "syncs: per transaction " + std::to_string(worst) + " (rank), " +
                  std::to_string(coord_wal) + " (coordinator) over " + std::to_string(txs));
  return json{{"synced_writes_per_tx", worst},
              {"synced_writes_per_tx_coordinator", coord_wal},
              {"details",
               {{"transactions", txs},
                {"ranks", per_rank},
                {"participant_all_file_syncs_per_tx", worst_all},
                {"coordinator_all_file_syncs_per_tx", coord_all},
                {"method",
                 "full transactions on 2 ranks through Coordinator + InProcTransport, each "
                 "journal on its own FaultInjectionFileSystem; synced writes = write-ahead-log "
                 "syncs (every synced WriteBatch costs one), all-file syncs also count SST, "
                 "MANIFEST and directory syncs"}}}};
}

// ---- replay_records_per_s ------------------------------------------------------------------

Result<json> BenchReplay(const BenchOptions& o) {
  const int64_t rows = o.quick ? 10000 : 1000000;
  constexpr int64_t kCols = 4;
  constexpr size_t kPiecesPerCall = 1024;
  WTX_ASSIGN_OR_RETURN(manifest, OneParamManifest(rows, kCols));
  WTX_ASSIGN_OR_RETURN(dir, ScratchDir::Make(o.scratch_dir, "replay"));
  const std::string jdir = dir.path() + "/rank0";
  std::vector<uint8_t> bytes(static_cast<size_t>(rows * kCols * 2));
  FillPattern(bytes.data(), bytes.size(), 5);

  // One transaction of `rows` one-row writes, committed.
  double t_build = 0;
  {
    ParticipantOptions po;
    po.journal_dir = jdir;
    po.kernel_identity = "bench";
    WTX_ASSIGN_OR_RETURN(p, Participant::Open(po, manifest));
    BeginRequest req;
    req.tx = "replay";
    WTX_RETURN_IF_ERROR(p->Begin(req));
    const double t0 = NowSeconds();
    std::vector<WritePiece> pieces;
    for (int64_t i = 0; i < rows; ++i) {
      pieces.push_back({"w", "0", Box{{i, i + 1}, {0, kCols}},
                        bytes.data() + static_cast<size_t>(i * kCols * 2), kCols * 2});
      if (pieces.size() == kPiecesPerCall || i + 1 == rows) {
        WTX_RETURN_IF_ERROR(p->Write(pieces));
        pieces.clear();
      }
    }
    auto vote = p->Prepare(req.tx);
    if (!vote.ok()) return vote.status();
    if (!vote->yes) return Status::Error(ErrorCode::kVoteNo, vote->message);
    WTX_RETURN_IF_ERROR(p->Decide(req.tx, Decision::kCommit,
                                  CombineRankDigests(std::vector<std::string>{vote->digest})));
    t_build = NowSeconds() - t0;
  }
  Progress(o, "replay: journal of " + std::to_string(rows) + " write records built in " +
                  std::to_string(t_build) + " s");

  const int rounds = o.quick ? 2 : 3;
  std::vector<double> t_replay, t_scan;
  uint64_t records = 0, scanned = 0, scanned_bytes = 0;
  for (int r = 0; r < rounds; ++r) {
    for (int k = 0; k < 2; ++k) {
      if ((r + k) % 2 == 0) {
        JournalOptions jo;
        jo.read_only = true;
        jo.create_if_missing = false;
        WTX_ASSIGN_OR_RETURN(j, Journal::Open(jdir, jo));
        const double t0 = NowSeconds();
        auto state = ReplayState(*j);
        t_replay.push_back(NowSeconds() - t0);
        if (!state.ok()) return state.status();
        records = j->last_seq();
      } else {
        rocksdb::Options ro = JournalLikeOptions();
        ro.create_if_missing = false;
        rocksdb::DB* raw = nullptr;
        WTX_RETURN_IF_ERROR(FromRocks(rocksdb::DB::OpenForReadOnly(ro, jdir, &raw), jdir));
        std::unique_ptr<rocksdb::DB> db(raw);
        const double t0 = NowSeconds();
        std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
        scanned = scanned_bytes = 0;
        // The same key range ForEachRecord visits.
        for (it->Seek(RecordKey(0)); it->Valid() && RecordSeq(it->key().ToStringView()) != 0;
             it->Next()) {
          ++scanned;
          scanned_bytes += it->value().size();
        }
        t_scan.push_back(NowSeconds() - t0);
        WTX_RETURN_IF_ERROR(FromRocks(it->status(), jdir));
      }
    }
  }
  // What a daemon's open costs since it verifies first (OpenTrustedJournal): the `wtx check`
  // verification alone, and a plain read-write Journal::Open without it, on the same journal.
  double t_verify = 0, t_plain_open = 0;
  {
    const double t0 = NowSeconds();
    JournalCheckReport v = VerifyJournalDir(jdir);
    t_verify = NowSeconds() - t0;
    WTX_RETURN_IF_ERROR(v.status);
    JournalOptions jo;
    jo.identity = {"participant", 0};
    jo.create_if_missing = false;
    const double t1 = NowSeconds();
    WTX_ASSIGN_OR_RETURN(j, Journal::Open(jdir, jo));
    t_plain_open = NowSeconds() - t1;
  }
  // Recovery proper: a restarted participant verifies the journal, then loads the materialized
  // state (one read), not the records; timed last because it appends a RESTART record.
  double t_reopen = 0;
  {
    ParticipantOptions po;
    po.journal_dir = jdir;
    po.kernel_identity = "bench";
    const double t0 = NowSeconds();
    auto p = Participant::Open(po, manifest);
    t_reopen = NowSeconds() - t0;
    if (!p.ok()) return p.status();
  }
  const double tr = Median(t_replay), ts = Median(t_scan);
  Progress(o, "replay: " + std::to_string(records) + " records in " + std::to_string(tr) +
                  " s; raw scan " + std::to_string(ts) + " s");
  return json{{"replay_records_per_s", static_cast<double>(records) / tr},
              {"details",
               {{"records", records},
                {"write_records", rows},
                {"rounds", rounds},
                {"replay_s", tr},
                {"rocksdb_scan_s", ts},
                {"rocksdb_scan_records_per_s", static_cast<double>(scanned) / ts},
                {"replay_vs_rocksdb_scan", ts / tr},
                {"journal_value_bytes", scanned_bytes},
                {"participant_reopen_s", t_reopen},
                {"verify_s", t_verify},
                {"plain_open_s", t_plain_open},
                {"verify_vs_replay", t_verify / tr},
                {"build_s", t_build},
                {"build_records_per_s", static_cast<double>(rows) / t_build},
                {"method",
                 "one committed transaction of one-row writes (one WRITE record each, as "
                 "Participant::Write logs them); ReplayState (chain and checksum verification, "
                 "binary WRITE decoding, in-place apply through ParticipantReplay) over a "
                 "read-only Journal, against a raw RocksDB iterator over the same record keys "
                 "of the same database; participant_reopen_s is Participant::Open on that journal "
                 "(it verifies the journal as `wtx check` does, verify_s alone, then recovery "
                 "reads the materialized state; plain_open_s: a read-write Journal::Open without "
                 "the verification)"}}}};
}

// ---- journal_vs_rocksdb --------------------------------------------------------------------

Result<json> BenchJournal(const BenchOptions& o) {
  const size_t records = o.quick ? 20000 : 200000;
  constexpr size_t kBatch = 256;  // the participant's write-record batch
  const size_t batches = (records + kBatch - 1) / kBatch;
  // WRITE records as the participant logs them (binary form), and its state during a
  // transaction.
  std::vector<std::vector<WriteRecord>> input(batches);
  for (size_t i = 0; i < records; ++i) {
    const int64_t layer = static_cast<int64_t>(i / 7) % 64;
    const int64_t row = static_cast<int64_t>(i % 4096) * 4;
    WriteRecord w;
    w.tx = "bench-tx";
    w.param = "model.layers." + std::to_string(layer) + ".mlp.down_proj.weight";
    w.box = {{row, row + 4}, {0, 4864}};
    w.elements = 4 * 4864;
    w.bytes = 2 * 4 * 4864;
    w.shards = {"0"};
    w.ts = int64_t{1700000000000000} + static_cast<int64_t>(i);
    input[i / kBatch].push_back(std::move(w));
  }
  json state = {{"rank", 0},
                {"version", nullptr},
                {"committed_tx", nullptr},
                {"dirty", true},
                {"loaded", false},
                {"txs", 1},
                {"active",
                 {{"tx", "bench-tx"},
                  {"kind", "full"},
                  {"base", nullptr},
                  {"modules", json::array()},
                  {"sources", json::array()},
                  {"rollback", false},
                  {"wrote", true},
                  {"prepared", false},
                  {"vote", nullptr},
                  {"digest", nullptr}}}};

  // The exact bytes the journal stores, per batch (filled from the first journal run).
  std::vector<std::vector<std::pair<std::string, std::string>>> raw_batches;
  const rocksdb::Options options = JournalLikeOptions();
  auto run_journal = [&](const std::string& path, double* t) -> Status {
    JournalOptions jo;
    jo.identity = {"participant", 0};
    WTX_ASSIGN_OR_RETURN(j, Journal::Open(path, jo));
    std::vector<std::vector<JournalRecord>> recs(batches);  // Append consumes them
    for (size_t b = 0; b < batches; ++b) {
      recs[b].assign(input[b].begin(), input[b].end());
    }
    std::vector<json> states(batches, state);
    const double t0 = NowSeconds();
    for (size_t b = 0; b < batches; ++b) {
      WTX_RETURN_IF_ERROR(j->Append(std::move(recs[b]), std::move(states[b]), false));
    }
    *t = NowSeconds() - t0;
    return Status::OK();
  };
  auto collect = [&](const std::string& path) -> Status {
    rocksdb::Options ro = options;
    ro.create_if_missing = false;
    rocksdb::DB* raw = nullptr;
    WTX_RETURN_IF_ERROR(FromRocks(rocksdb::DB::OpenForReadOnly(ro, path, &raw), path));
    std::unique_ptr<rocksdb::DB> db(raw);
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    raw_batches.assign(batches, {});
    size_t i = 0;
    std::string last;
    for (it->Seek(RecordKey(0)); it->Valid() && RecordSeq(it->key().ToStringView()) != 0;
         it->Next(), ++i) {
      if (i >= records) break;
      raw_batches[i / kBatch].emplace_back(it->key().ToString(), it->value().ToString());
    }
    WTX_RETURN_IF_ERROR(FromRocks(it->status(), path));
    if (i != records) {
      return Status::Corruption(path + ": read back " + std::to_string(i) + " records");
    }
    // The state value of each batch, as Append encodes it.
    for (size_t b = 0; b < batches; ++b) {
      json s = state;
      s["seq"] = RecordSeq(raw_batches[b].back().first);
      s["head"] = Hex64(ValueChecksum(raw_batches[b].back().second));
      raw_batches[b].emplace_back(std::string(kStateKey), EncodeValue(s));
    }
    return Status::OK();
  };
  auto run_raw = [&](const std::string& path, double* t) -> Status {
    rocksdb::DB* raw = nullptr;
    WTX_RETURN_IF_ERROR(FromRocks(rocksdb::DB::Open(options, path, &raw), path));
    std::unique_ptr<rocksdb::DB> db(raw);
    rocksdb::WriteOptions wo;
    wo.sync = false;
    const double t0 = NowSeconds();
    for (const auto& batch : raw_batches) {
      rocksdb::WriteBatch wb;
      for (const auto& [k, v] : batch) wb.Put(k, v);
      WTX_RETURN_IF_ERROR(FromRocks(db->Write(wo, &wb), path));
    }
    *t = NowSeconds() - t0;
    return FromRocks(db->Close(), path);
  };

  const int rounds = o.quick ? 2 : 9;
  std::vector<double> t_journal, t_raw;
  uint64_t bytes = 0;
  for (int r = 0; r < rounds; ++r) {
    WTX_ASSIGN_OR_RETURN(dir, ScratchDir::Make(o.scratch_dir, "journal"));
    for (int k = 0; k < 2; ++k) {
      double t = 0;
      if (raw_batches.empty() || (r + k) % 2 == 0) {
        WTX_RETURN_IF_ERROR(run_journal(dir.path() + "/journal", &t));
        t_journal.push_back(t);
        if (raw_batches.empty()) {
          WTX_RETURN_IF_ERROR(collect(dir.path() + "/journal"));
          for (const auto& b : raw_batches) {
            for (const auto& [key, v] : b) bytes += key.size() + v.size();
          }
        }
      } else {
        WTX_RETURN_IF_ERROR(run_raw(dir.path() + "/raw", &t));
        t_raw.push_back(t);
      }
    }
  }
  const double tj = Median(t_journal), tr = Median(t_raw);
  Progress(o, "journal: " + std::to_string(records) + " records: Journal::Append " +
                  std::to_string(tj) + " s, RocksDB puts " + std::to_string(tr) + " s");
  return json{{"journal_vs_rocksdb", tr / tj},
              {"details",
               {{"records", records},
                {"batch", kBatch},
                {"bytes", bytes},
                {"rounds", rounds},
                {"journal_s", tj},
                {"journal_records_per_s", static_cast<double>(records) / tj},
                {"rocksdb_s", tr},
                {"rocksdb_records_per_s", static_cast<double>(records) / tr},
                {"method",
                 "unsynced Journal::Append of batches of 256 WRITE records (the binary form "
                 "Participant::Write logs) plus the state (CBOR), "
                 "against WriteBatch puts of the same keys and values (read back from the "
                 "journal) with the journal's RocksDB options"}}}};
}

}  // namespace wtx::bench
