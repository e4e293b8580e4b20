#include "src/testing/slow_sync_fs.h"

#include <thread>

namespace wtx {

using rocksdb::FileOptions;
using rocksdb::FSWritableFile;
using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;

namespace {

class SlowSyncFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  SlowSyncFile(std::unique_ptr<FSWritableFile> f, std::chrono::microseconds delay)
      : FSWritableFileOwnerWrapper(std::move(f)), delay_(delay) {}
  // The modelled disk's flush: the delay, not the real disk's flush (see the header).
  IOStatus Sync(const IOOptions&, IODebugContext*) override {
    std::this_thread::sleep_for(delay_);
    return IOStatus::OK();
  }
  IOStatus Fsync(const IOOptions&, IODebugContext*) override {
    std::this_thread::sleep_for(delay_);
    return IOStatus::OK();
  }

 private:
  const std::chrono::microseconds delay_;
};

}  // namespace

SlowSyncFileSystem::SlowSyncFileSystem(std::chrono::microseconds delay,
                                       const std::shared_ptr<rocksdb::FileSystem>& base)
    : FileSystemWrapper(base), delay_(delay) {}

IOStatus SlowSyncFileSystem::Wrap(IOStatus s, std::unique_ptr<FSWritableFile>* result) {
  if (s.ok()) *result = std::make_unique<SlowSyncFile>(std::move(*result), delay_);
  return s;
}

IOStatus SlowSyncFileSystem::NewWritableFile(const std::string& fname, const FileOptions& opts,
                                             std::unique_ptr<FSWritableFile>* result,
                                             IODebugContext* dbg) {
  return Wrap(target()->NewWritableFile(fname, opts, result, dbg), result);
}

IOStatus SlowSyncFileSystem::ReopenWritableFile(const std::string& fname, const FileOptions& opts,
                                                std::unique_ptr<FSWritableFile>* result,
                                                IODebugContext* dbg) {
  return Wrap(target()->ReopenWritableFile(fname, opts, result, dbg), result);
}

IOStatus SlowSyncFileSystem::ReuseWritableFile(const std::string& fname,
                                               const std::string& old_fname,
                                               const FileOptions& opts,
                                               std::unique_ptr<FSWritableFile>* result,
                                               IODebugContext* dbg) {
  return Wrap(target()->ReuseWritableFile(fname, old_fname, opts, result, dbg), result);
}

}  // namespace wtx
