// SlowSyncFileSystem: a RocksDB FileSystemWrapper modelling a disk whose every flush takes a
// fixed delay: each Sync/Fsync of a written file sleeps that delay (a sleep, not a spin, and
// without holding any lock of its own) *instead of* flushing the real disk. Used by
// `wtx_commit_bench --sync-delay-ms` (and the hidden `--sync-delay-ms` of `wtx rank` /
// `wtx coordinator` it starts) to measure whether the coordinator's fan-out overlaps the ranks'
// durability points, each rank on a disk of its own.
//
// Why not also flush the real disk: the benchmark's ranks share one machine and one disk, whose
// flushes serialize (on the development VM 256 concurrent write + fdatasync take 25-34 ms,
// 4 take 0.7 ms), so a real flush on top of the sleep would measure that one shared disk, not
// ranks with a disk each. The data still reaches the OS (written as usual; a killed process
// loses nothing, a power loss may): for benchmark journals only, never production ones. The
// real disk's cost is what the benchmark measures without the wrapper (`--sync-delay-ms 0`).
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
