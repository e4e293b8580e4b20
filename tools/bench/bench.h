// `wtx bench`: what a transaction costs against the physical limit. Each measurement pits a wtx
// operation against a baseline doing the same physical work (memcpy of the same shards, one raw
// XXH3 pass over the same bytes, raw RocksDB writes and scans of the same keys and values),
// measured in the same process and interleaved round by round, so that a noisy shared machine
// moves both sides alike; figures are ratios of medians (or, where a figure is absolute, a
// median). docs/performance.md describes each method.
//
// Contract: every Bench* function creates its journals under options.scratch_dir (which must
// exist and is left as found: each run works in, and removes, its own subdirectory), returns
// a JSON object with its figure(s) under the documented keys plus a "details" object, and
// returns an error Status (never throws) when a measurement cannot run (a missing model
// config, a failing transaction). Progress lines go to options.progress when it is not null.
//
// Thread-safety: the functions are independent and use no shared state, but they measure
// single-threaded work and are meant to run one at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "wtx/status.h"

namespace wtx::bench {

struct BenchOptions {
  bool quick = false;          // small sizes: a smoke test that runs in seconds
  std::string model;           // config.json of the update figure (tp 1)
  std::string coverage_model;  // config.json of the coverage figure
  int coverage_tp = 8;         // ... its TP degree (rank 0 is measured)
  // The landing figure's engine lands its bytes in buckets of at most this many bytes (a
  // parameter larger than a bucket in row slices, smaller ones packed together); 0: one
  // parameter at a time.
  size_t landing_bucket_bytes = size_t{32} << 20;
  // ParticipantOptions::threads of the measured ranks (0: one per core), and the thread count
  // of the baselines that do the same work in parallel.
  int threads = 0;
  std::string scratch_dir;  // where journals live; must exist
  std::ostream* progress = nullptr;
};

// update_vs_stream_copy: a full transaction of the model (Participant writes with coverage,
// journal, prepare with hashing, 2PC commit through Coordinator + InProcTransport with real
// fsync; the rank's data path on options.threads threads) against the streaming (non-temporal)
// copy of the same shards into the same live buffers on as many threads: the limit of one pass
// over the bytes. update_vs_memcpy: against one thread's memcpy of the same shards.
// update_metrics_on_vs_off: the same transaction on a rank recording no metrics
// (ParticipantHooks::benchmark_no_metrics) against the one recording them, interleaved (1.0:
// metrics cost nothing). Keys: update_vs_memcpy, update_vs_stream_copy,
// update_metrics_on_vs_off, details (update_vs_stream_copy_one_thread: against one thread's
// streaming copy).
Result<nlohmann::json> BenchUpdate(const BenchOptions& options);

// hash_vs_xxh3: ParamDigest over a buffer larger than the caches against one XXH3_64bits pass
// over the same bytes (both through libxxhash's run-time dispatch where it has one:
// src/util/xxh3.h). Keys: hash_vs_xxh3, details.
Result<nlohmann::json> BenchHash(const BenchOptions& options);

// coverage_check_ms / coverage_bytes: Participant::CheckPrepare (prepare's coverage, staleness
// and kernel-identity checks) on a rank whose every shard was written through Write() in
// benchmark_coverage_only mode, and Participant::CoverageMemoryBytes().
Result<nlohmann::json> BenchCoverage(const BenchOptions& options);

// synced_writes_per_tx: syncs counted by FaultInjectionFileSystem over N full transactions on
// two ranks. Keys: synced_writes_per_tx (the most of any rank),
// synced_writes_per_tx_coordinator, details.
Result<nlohmann::json> BenchSyncs(const BenchOptions& options);

// replay_records_per_s: ReplayState over a participant journal of one transaction with many
// one-row writes, against a raw RocksDB iterator scan of the same database. Keys:
// replay_records_per_s, details.
Result<nlohmann::json> BenchReplay(const BenchOptions& options);

// expected_version_vs_xxh3: the trainer's expected version of a full update of options.model at
// tp 2 (ExpectedVersionBuilder, source by source) against one XXH3 pass over the same source
// bytes. Keys: expected_version_vs_xxh3, details (assembled_vs_xxh3: the reference that
// assembles each rank's parameters before hashing).
Result<nlohmann::json> BenchExpect(const BenchOptions& options);

// journal_vs_rocksdb: Journal::Append (unsynced, batches of write records plus the state)
// against WriteBatch puts of the very same keys and values into a RocksDB with the journal's
// options. Keys: journal_vs_rocksdb, details.
Result<nlohmann::json> BenchJournal(const BenchOptions& options);

// landed_update_vs_memcpy: a full transaction of the model landed in place by an engine that
// receives its bytes in buckets of options.landing_bucket_bytes (per bucket: Reserve each
// piece, the engine's own memcpy into the returned addresses, Landed each piece; 2PC commit)
// against the same memcpy calls of the same bytes into the same live buffers, without wtx
// (higher is better), by a rank with the default data path on options.threads threads (Landed
// hands the chunks of a large landing to threads - 1 data-path threads and returns; prepare only
// combines digests). landed_update_vs_memcpy_one_thread: the same landing by a second
// participant over the same buffers with ParticipantOptions::threads = 1 (Landed hashes in the
// engine's thread). hash_at_prepare_landed_update_vs_memcpy: the one-thread landing with all
// hashing left to prepare (a hook; the second pass over the bytes that the two others avoid).
// The details also hold one memcpy per whole parameter. verify_all_vs_xxh3:
// Participant::Verify() (every chunk rehashed and compared with the committed chunk digests) on
// the clean rank against one XXH3_64bits pass over the same bytes (its cost: lower is better).
// details.copy_then_hash_vs_memcpy / copy_then_hash_one_thread_vs_memcpy: the limit of any
// copy-then-hash landing on the machine (the same memcpy calls and XXH3 of the same chunks by
// a thread following the copy bucket by bucket, or by the copying thread), and the landed
// figures against it (landed_update_vs_copy_then_hash, one_thread_...). Keys: those four,
// details.
Result<nlohmann::json> BenchLanding(const BenchOptions& options);

// load_vs_read: `wtx load` (checkpoint_load.h: open + validate, fresh participants and
// journals on options.threads data-path threads, every rank reads its slices by source name,
// 2PC commit) of a safetensors checkpoint of the model (tp 1, written under the scratch dir, page
// cache warm) against read() of the same files, by as many threads taking a file at a time, into
// fresh memory advised to huge pages as host live memory is. Keys: load_vs_read, details.
Result<nlohmann::json> BenchLoad(const BenchOptions& options);

// {"cores", "cpu", "memory_bytes", "loadavg"} of this machine.
nlohmann::json MachineInfo();

// Helpers shared by the measurements.
double NowSeconds();
double Median(std::vector<double> v);
// Fills `n` bytes with a deterministic pseudo-random pattern.
void FillPattern(void* p, size_t n, uint64_t seed);
// Copies with non-temporal stores where the CPU allows (the fastest copy of bytes that are not
// read back soon); memcpy elsewhere.
void StreamCopy(void* dst, const void* src, size_t n);
// options.threads, 0 resolved to the number of cores.
int ResolvedThreads(const BenchOptions& options);
// Runs fn(k) for k in [0, n) on `threads` threads (the caller's and threads - 1 started for the
// call), each taking the next k in turn.
void ParallelFor(int threads, size_t n, const std::function<void(size_t)>& fn);

}  // namespace wtx::bench
