#include "src/testing/fault_injection_fs.h"

#include <algorithm>
#include <filesystem>

namespace wtx {

using rocksdb::FileOptions;
using rocksdb::FSWritableFile;
using rocksdb::IODebugContext;
using rocksdb::IOOptions;
using rocksdb::IOStatus;
using rocksdb::Slice;

namespace {

bool IsWalFile(const std::string& fname) {
  return fname.size() > 4 && fname.compare(fname.size() - 4, 4, ".log") == 0;
}

// RocksDB's info log (LOG, LOG.old.*): RocksDB ignores its write errors, so no injected error
// is spent on it.
bool IsInfoLog(const std::string& fname) {
  const size_t slash = fname.rfind('/');
  return fname.compare(slash == std::string::npos ? 0 : slash + 1, 3, "LOG") == 0;
}

class TrackedWritableFile : public rocksdb::FSWritableFileOwnerWrapper {
 public:
  TrackedWritableFile(std::unique_ptr<FSWritableFile> f, std::string fname,
                      FaultInjectionFileSystem* fs)
      : FSWritableFileOwnerWrapper(std::move(f)), fname_(std::move(fname)), fs_(fs) {}

  IOStatus Append(const Slice& data, const IOOptions& o, IODebugContext* d) override {
    IOStatus s = fs_->OnAppend(fname_, data.size());
    return s.ok() ? target()->Append(data, o, d) : s;
  }
  IOStatus Append(const Slice& data, const IOOptions& o, const rocksdb::DataVerificationInfo& v,
                  IODebugContext* d) override {
    IOStatus s = fs_->OnAppend(fname_, data.size());
    return s.ok() ? target()->Append(data, o, v, d) : s;
  }
  IOStatus PositionedAppend(const Slice& data, uint64_t off, const IOOptions& o,
                            IODebugContext* d) override {
    IOStatus s = fs_->OnPositionedWrite(fname_, off, data.size());
    return s.ok() ? target()->PositionedAppend(data, off, o, d) : s;
  }
  IOStatus Truncate(uint64_t size, const IOOptions& o, IODebugContext* d) override {
    IOStatus s = target()->Truncate(size, o, d);
    if (s.ok()) fs_->OnTruncate(fname_, size);
    return s;
  }
  IOStatus Sync(const IOOptions& o, IODebugContext* d) override {
    IOStatus s = target()->Flush(o, d);
    if (s.ok()) s = target()->Sync(o, d);
    return s.ok() ? fs_->OnSync(fname_) : s;
  }
  IOStatus Fsync(const IOOptions& o, IODebugContext* d) override {
    IOStatus s = target()->Flush(o, d);
    if (s.ok()) s = target()->Fsync(o, d);
    return s.ok() ? fs_->OnSync(fname_) : s;
  }
  // Range syncs are advisory in RocksDB; treat them as not durable.
  IOStatus RangeSync(uint64_t, uint64_t, const IOOptions&, IODebugContext*) override {
    return IOStatus::OK();
  }

 private:
  std::string fname_;
  FaultInjectionFileSystem* fs_;
};

// A file rewritten in place (the journal's sync watermark copies): writes are counted and
// failed like a writable file's, syncs make its length durable.
class TrackedRandomRWFile : public rocksdb::FSRandomRWFileOwnerWrapper {
 public:
  TrackedRandomRWFile(std::unique_ptr<rocksdb::FSRandomRWFile> f, std::string fname,
                      FaultInjectionFileSystem* fs)
      : FSRandomRWFileOwnerWrapper(std::move(f)), fname_(std::move(fname)), fs_(fs) {}

  IOStatus Write(uint64_t off, const Slice& data, const IOOptions& o, IODebugContext* d) override {
    IOStatus s = fs_->OnPositionedWrite(fname_, off, data.size());
    return s.ok() ? target()->Write(off, data, o, d) : s;
  }
  IOStatus Sync(const IOOptions& o, IODebugContext* d) override {
    IOStatus s = target()->Sync(o, d);
    return s.ok() ? fs_->OnSync(fname_) : s;
  }
  IOStatus Fsync(const IOOptions& o, IODebugContext* d) override {
    IOStatus s = target()->Fsync(o, d);
    return s.ok() ? fs_->OnSync(fname_) : s;
  }

 private:
  std::string fname_;
  FaultInjectionFileSystem* fs_;
};

}  // namespace

FaultInjectionFileSystem::FaultInjectionFileSystem(const std::shared_ptr<rocksdb::FileSystem>& base)
    : FileSystemWrapper(base) {}

IOStatus FaultInjectionFileSystem::Wrap(const std::string& fname, IOStatus s, bool fresh,
                                        std::unique_ptr<FSWritableFile>* result) {
  if (!s.ok()) return s;
  {
    std::lock_guard<std::mutex> l(mu_);
    renamed_.erase(fname);  // a file opened under this name now: writes to it are its own
    if (fresh) {
      files_[fname] = FileState{};
    } else {
      uint64_t size = 0;
      std::error_code ec;
      auto sz = std::filesystem::file_size(fname, ec);
      if (!ec) size = sz;
      auto& st = files_[fname];
      st.size = size;
      st.synced = size;
      st.ever_synced = true;
    }
  }
  *result = std::make_unique<TrackedWritableFile>(std::move(*result), fname, this);
  return s;
}

IOStatus FaultInjectionFileSystem::NewWritableFile(const std::string& fname,
                                                   const FileOptions& opts,
                                                   std::unique_ptr<FSWritableFile>* result,
                                                   IODebugContext* dbg) {
  if (!active()) return IOStatus::IOError("filesystem inactive (process crashed): " + fname);
  FileOptions o = opts;
  o.allow_fallocate = false;
  return Wrap(fname, target()->NewWritableFile(fname, o, result, dbg), true, result);
}

IOStatus FaultInjectionFileSystem::ReopenWritableFile(const std::string& fname,
                                                      const FileOptions& opts,
                                                      std::unique_ptr<FSWritableFile>* result,
                                                      IODebugContext* dbg) {
  if (!active()) return IOStatus::IOError("filesystem inactive (process crashed): " + fname);
  FileOptions o = opts;
  o.allow_fallocate = false;
  // Reopening a file that does not exist creates it: as new (and as unsynced) as any other.
  std::error_code ec;
  const bool existed = std::filesystem::exists(fname, ec);
  return Wrap(fname, target()->ReopenWritableFile(fname, o, result, dbg), !existed, result);
}

IOStatus FaultInjectionFileSystem::ReuseWritableFile(const std::string& fname,
                                                     const std::string& old_fname,
                                                     const FileOptions& opts,
                                                     std::unique_ptr<FSWritableFile>* result,
                                                     IODebugContext* dbg) {
  if (!active()) return IOStatus::IOError("filesystem inactive (process crashed): " + fname);
  FileOptions o = opts;
  o.allow_fallocate = false;
  return Wrap(fname, target()->ReuseWritableFile(fname, old_fname, o, result, dbg), true, result);
}

IOStatus FaultInjectionFileSystem::NewRandomRWFile(const std::string& fname,
                                                   const FileOptions& opts,
                                                   std::unique_ptr<rocksdb::FSRandomRWFile>* result,
                                                   IODebugContext* dbg) {
  if (!active()) return IOStatus::IOError("filesystem inactive (process crashed): " + fname);
  std::error_code ec;
  const bool existed = std::filesystem::exists(fname, ec);
  IOStatus s = target()->NewRandomRWFile(fname, opts, result, dbg);
  if (!s.ok()) return s;
  {
    std::lock_guard<std::mutex> l(mu_);
    renamed_.erase(fname);
    FileState& st = files_[fname];
    if (existed) {
      // What exists when it is opened counts as durable, as for ReopenWritableFile.
      const uint64_t size = std::filesystem::file_size(fname, ec);
      st.size = ec ? 0 : size;
      st.synced = st.size;
      st.ever_synced = true;
    } else {
      st = FileState{};
    }
  }
  *result = std::make_unique<TrackedRandomRWFile>(std::move(*result), fname, this);
  return s;
}

IOStatus FaultInjectionFileSystem::RenameFile(const std::string& src, const std::string& dst,
                                              const IOOptions& opts, IODebugContext* dbg) {
  if (!active()) return IOStatus::IOError("filesystem inactive (process crashed): " + src);
  IOStatus s = target()->RenameFile(src, dst, opts, dbg);
  if (s.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    auto it = files_.find(src);
    if (it != files_.end()) {
      files_[dst] = it->second;
      files_.erase(it);
    }
    renamed_.erase(dst);
    renamed_[src] = dst;
  }
  return s;
}

IOStatus FaultInjectionFileSystem::DeleteFile(const std::string& fname, const IOOptions& opts,
                                              IODebugContext* dbg) {
  if (!active()) return IOStatus::IOError("filesystem inactive (process crashed): " + fname);
  IOStatus s = target()->DeleteFile(fname, opts, dbg);
  if (s.ok()) {
    std::lock_guard<std::mutex> l(mu_);
    files_.erase(fname);
  }
  return s;
}

void FaultInjectionFileSystem::SetActive(bool active) {
  std::lock_guard<std::mutex> l(mu_);
  active_ = active;
}

bool FaultInjectionFileSystem::active() const {
  std::lock_guard<std::mutex> l(mu_);
  return active_;
}

void FaultInjectionFileSystem::FailNextWrites(int n, int after) {
  std::lock_guard<std::mutex> l(mu_);
  fail_writes_ = n;
  fail_writes_after_ = after;
}

void FaultInjectionFileSystem::FailNextSyncs(int n, int after) {
  std::lock_guard<std::mutex> l(mu_);
  fail_syncs_ = n;
  fail_syncs_after_ = after;
}

void FaultInjectionFileSystem::RestrictInjectionToThread(std::thread::id id) {
  std::lock_guard<std::mutex> l(mu_);
  inject_thread_ = id;
}

bool FaultInjectionFileSystem::Eligible(const std::string& fname) const {
  return !IsInfoLog(fname) && (!inject_thread_ || *inject_thread_ == std::this_thread::get_id());
}

const std::string& FaultInjectionFileSystem::CurrentNameLocked(const std::string& fname) const {
  const std::string* name = &fname;
  // Renames form chains (a -> b, later b -> c); a cycle (a -> b -> a) cannot loop forever.
  for (size_t hops = 0; hops <= renamed_.size(); ++hops) {
    auto it = renamed_.find(*name);
    if (it == renamed_.end()) break;
    name = &it->second;
  }
  return *name;
}

IOStatus FaultInjectionFileSystem::CheckWriteLocked(const std::string& fname) {
  if (!active_) return IOStatus::IOError("filesystem inactive (process crashed): " + fname);
  if (fail_writes_ > 0 && Eligible(fname) && fail_writes_after_-- <= 0) {
    --fail_writes_;
    ++injected_errors_;
    return IOStatus::IOError("injected write error: " + fname);
  }
  return IOStatus::OK();
}

IOStatus FaultInjectionFileSystem::OnAppend(const std::string& fname, size_t n) {
  std::lock_guard<std::mutex> l(mu_);
  IOStatus s = CheckWriteLocked(fname);
  if (s.ok()) files_[CurrentNameLocked(fname)].size += n;
  return s;
}

IOStatus FaultInjectionFileSystem::OnPositionedWrite(const std::string& fname, uint64_t offset,
                                                     size_t n) {
  std::lock_guard<std::mutex> l(mu_);
  IOStatus s = CheckWriteLocked(fname);
  if (s.ok()) {
    FileState& st = files_[CurrentNameLocked(fname)];
    st.size = std::max<uint64_t>(st.size, offset + n);
  }
  return s;
}

void FaultInjectionFileSystem::OnTruncate(const std::string& fname, uint64_t size) {
  std::lock_guard<std::mutex> l(mu_);
  FileState& st = files_[CurrentNameLocked(fname)];
  st.size = size;
  st.synced = std::min(st.synced, size);
}

IOStatus FaultInjectionFileSystem::OnSync(const std::string& fname) {
  std::lock_guard<std::mutex> l(mu_);
  if (!active_) return IOStatus::IOError("filesystem inactive (process crashed): " + fname);
  if (fail_syncs_ > 0 && Eligible(fname) && fail_syncs_after_-- <= 0) {
    --fail_syncs_;
    ++injected_errors_;
    return IOStatus::IOError("injected sync error: " + fname);
  }
  auto& st = files_[CurrentNameLocked(fname)];
  st.synced = st.size;
  st.ever_synced = true;
  ++syncs_;
  if (IsWalFile(fname)) ++wal_syncs_;
  return IOStatus::OK();
}

void FaultInjectionFileSystem::DropUnsyncedData(DropMode mode, uint64_t seed) {
  std::lock_guard<std::mutex> l(mu_);
  std::mt19937_64 rng(seed);
  for (auto it = files_.begin(); it != files_.end();) {
    const std::string& fname = it->first;
    FileState& st = it->second;
    std::error_code ec;
    if (!std::filesystem::exists(fname, ec)) {
      it = files_.erase(it);
      continue;
    }
    if (mode == DropMode::kAllUnsynced && !st.ever_synced) {
      std::filesystem::remove(fname, ec);
      it = files_.erase(it);
      continue;
    }
    uint64_t keep = st.synced;
    uint64_t tail = st.size > st.synced ? st.size - st.synced : 0;
    if (tail > 0 && mode == DropMode::kRandomPrefix) keep += rng() % (tail + 1);
    if (tail > 1 && mode == DropMode::kTearLastRecord) keep += 1 + rng() % (tail - 1);
    if (keep < std::filesystem::file_size(fname, ec)) std::filesystem::resize_file(fname, keep, ec);
    st.size = keep;
    st.synced = keep;
    ++it;
  }
}

uint64_t FaultInjectionFileSystem::injected_errors() const {
  std::lock_guard<std::mutex> l(mu_);
  return injected_errors_;
}

uint64_t FaultInjectionFileSystem::syncs() const {
  std::lock_guard<std::mutex> l(mu_);
  return syncs_;
}

uint64_t FaultInjectionFileSystem::wal_syncs() const {
  std::lock_guard<std::mutex> l(mu_);
  return wal_syncs_;
}

void FaultInjectionFileSystem::ResetCounters() {
  std::lock_guard<std::mutex> l(mu_);
  syncs_ = 0;
  wal_syncs_ = 0;
}

}  // namespace wtx
