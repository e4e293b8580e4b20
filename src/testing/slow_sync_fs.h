// SlowSyncFileSystem: a RocksDB FileSystemWrapper whose every Sync/Fsync of a written file
// first sleeps a fixed delay (a sleep, not a spin), modelling a disk that takes that long per
// flush. Used by `wtx_commit_bench --sync-delay-ms` (and the hidden `--sync-delay-ms` of
// `wtx rank` / `wtx coordinator` it starts) to measure whether the coordinator's fan-out
// overlaps the ranks' durability points. Not for production journals.
//
// Thread-safety: like the wrapped filesystem; the delay is fixed at construction.
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include <rocksdb/file_system.h>

namespace wtx {

class SlowSyncFileSystem : public rocksdb::FileSystemWrapper {
 public:
  explicit SlowSyncFileSystem(
      std::chrono::microseconds delay,
      const std::shared_ptr<rocksdb::FileSystem>& base = rocksdb::FileSystem::Default());
  static const char* kClassName() { return "WtxSlowSyncFileSystem"; }
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

 private:
  rocksdb::IOStatus Wrap(rocksdb::IOStatus s, std::unique_ptr<rocksdb::FSWritableFile>* result);
  const std::chrono::microseconds delay_;
};

}  // namespace wtx
