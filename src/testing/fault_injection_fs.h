// FaultInjectionFileSystem: a RocksDB FileSystemWrapper that remembers, per file, how many bytes
// were made durable by Sync/Fsync, so that a simulated power loss can drop exactly the data a
// real machine could lose. It can also fail writes or syncs with an I/O error, drop a random
// part of the unsynced tail, or tear the last record (cut the unsynced tail mid-way), and it
// counts syncs (the journal's durability cost) and the I/O errors it injected, so that a test
// can check that each of them surfaced as a failure.
//
// Preallocation (fallocate) of files it creates is turned off: it does not change what a crash
// can lose, and on tmpfs it costs milliseconds per journal open.
//
// Usage for a crash: SetActive(false) (every later write/sync fails, as a dead process's would),
// destroy the DB object, then DropUnsyncedData(). The next Open sees what survived.
//
// Thread-safety: all methods are safe to call concurrently (one internal mutex).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <thread>

#include <rocksdb/file_system.h>

#include "src/util/thread_annotations.h"

namespace wtx {

class FaultInjectionFileSystem : public rocksdb::FileSystemWrapper {
 public:
  enum class DropMode {
    kAllUnsynced,     // power loss: every file back to its last synced size
    kRandomPrefix,    // keep a random prefix of each unsynced tail (partial page writes)
    kTearLastRecord,  // cut each unsynced tail in the middle (a torn last record)
  };

  explicit FaultInjectionFileSystem(
      const std::shared_ptr<rocksdb::FileSystem>& base = rocksdb::FileSystem::Default());
  static const char* kClassName() { return "WtxFaultInjectionFileSystem"; }
  const char* Name() const override { return kClassName(); }

  rocksdb::IOStatus NewWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSWritableFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReopenWritableFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                       std::unique_ptr<rocksdb::FSWritableFile>* result,
                                       rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus ReuseWritableFile(const std::string& fname, const std::string& old_fname,
                                      const rocksdb::FileOptions& opts,
                                      std::unique_ptr<rocksdb::FSWritableFile>* result,
                                      rocksdb::IODebugContext* dbg) override;
  // Files rewritten in place (the journal's sync watermark copies) are tracked like the others.
  rocksdb::IOStatus NewRandomRWFile(const std::string& fname, const rocksdb::FileOptions& opts,
                                    std::unique_ptr<rocksdb::FSRandomRWFile>* result,
                                    rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus RenameFile(const std::string& src, const std::string& target,
                               const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override;
  rocksdb::IOStatus DeleteFile(const std::string& fname, const rocksdb::IOOptions& opts,
                               rocksdb::IODebugContext* dbg) override;

  // While inactive every write and sync fails with an I/O error (a dead process writes nothing).
  void SetActive(bool active);
  bool active() const;
  // Truncates every file written through this filesystem according to `mode`; files never
  // synced are deleted under kAllUnsynced. REQUIRES: no open DB uses this filesystem.
  void DropUnsyncedData(DropMode mode = DropMode::kAllUnsynced, uint64_t seed = 0);
  // The next `n` appends (or syncs) fail with an I/O error. Appends to RocksDB's info log
  // (LOG), whose errors RocksDB deliberately ignores, are not counted.
  // With `after` > 0, that many appends (syncs) succeed first: the error lands later in the
  // same operation (the second record of a commit, the sync watermark, ...). n = 0 disarms.
  void FailNextWrites(int n, int after = 0);
  void FailNextSyncs(int n, int after = 0);
  // Only writes and syncs issued by thread `id` count toward FailNext*: RocksDB's background
  // flushes and compactions (whose errors RocksDB handles itself, with no record lost) are
  // then never hit, which keeps a fault on the caller's own journal write, deterministic.
  void RestrictInjectionToThread(std::thread::id id);

  // I/O errors returned because of FailNextWrites/FailNextSyncs (not those of SetActive(false)).
  uint64_t injected_errors() const;

  uint64_t syncs() const;      // Sync/Fsync calls that made data durable, all files
  uint64_t wal_syncs() const;  // the same, write-ahead-log files only
  void ResetCounters();

  // Callbacks from the file wrapper.
  rocksdb::IOStatus OnAppend(const std::string& fname, size_t n);
  // A write of n bytes at `offset` (a rewrite in place, e.g. the journal's sync watermark):
  // counted and failed like an append; the file's length becomes at least offset + n.
  rocksdb::IOStatus OnPositionedWrite(const std::string& fname, uint64_t offset, size_t n);
  // The file was cut to `size` bytes (nothing beyond it can survive a crash either).
  void OnTruncate(const std::string& fname, uint64_t size);
  rocksdb::IOStatus OnSync(const std::string& fname);

 private:
  struct FileState {
    uint64_t size = 0;
    uint64_t synced = 0;
    bool ever_synced = false;
  };
  // Fails the write when the filesystem is inactive or an injected write error is due.
  // REQUIRES: mu_ held.
  rocksdb::IOStatus CheckWriteLocked(const std::string& fname);
  rocksdb::IOStatus Wrap(const std::string& fname, rocksdb::IOStatus s, bool fresh,
                         std::unique_ptr<rocksdb::FSWritableFile>* result);

  mutable std::mutex mu_;
  std::map<std::string, FileState> files_ GUARDED_BY(mu_);
  // Files renamed while open for writing: old name -> new name, so that writes through the
  // descriptor opened under the old name (the journal's sync watermark, renamed into place and
  // then rewritten in place) are tracked under the name the file now has.
  std::map<std::string, std::string> renamed_ GUARDED_BY(mu_);
  // The name `fname` (as opened) now has.
  const std::string& CurrentNameLocked(const std::string& fname) const REQUIRES(mu_);
  bool active_ GUARDED_BY(mu_) = true;
  int fail_writes_ GUARDED_BY(mu_) = 0;
  int fail_syncs_ GUARDED_BY(mu_) = 0;
  int fail_writes_after_ GUARDED_BY(mu_) = 0;
  int fail_syncs_after_ GUARDED_BY(mu_) = 0;
  std::optional<std::thread::id> inject_thread_ GUARDED_BY(mu_);
  bool Eligible(const std::string& fname) const REQUIRES(mu_);
  uint64_t syncs_ GUARDED_BY(mu_) = 0;
  uint64_t wal_syncs_ GUARDED_BY(mu_) = 0;
  uint64_t injected_errors_ GUARDED_BY(mu_) = 0;
};

}  // namespace wtx
