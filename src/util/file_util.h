// Reading small untrusted files (JSON configs, manifests, scenarios, checkpoint indexes, TLS
// certificates and keys, secrets, live images) given by path: the path may name anything — a
// FIFO nobody writes (open would block forever), a device such as /dev/zero (a read never
// ends), a directory, a huge or an empty file — and each is refused with an error naming the
// option and the path before it can hang or exhaust memory. Every file an option names goes
// through ReadRegularFile (docs/cli.md, "Files named by options").
//
// Thread-safety: pure functions (no shared state).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <span>
#include <string>
#include <string_view>

#include "wtx/status.h"

namespace wtx {

// JSON documents wtx reads from files (HF configs, manifests, scenarios, expectations,
// safetensors indexes) are at most this long (1 GiB).
inline constexpr size_t kMaxJsonFileBytes = size_t{1} << 30;
// PEM files (--tls-cert, --tls-key, --tls-ca) are at most this long (16 MiB).
inline constexpr size_t kMaxPemFileBytes = size_t{16} << 20;

struct ReadFileOptions {
  // What names the file, e.g. the option ("--tls-cert"); every error then reads
  // "WHAT 'PATH': reason". Empty: "PATH: reason".
  std::string_view what;
  size_t max_bytes = kMaxJsonFileBytes;
  // Refuse a file that group or others may access (secrets, private keys).
  bool private_only = false;
  // An empty file is refused ("empty file") unless allowed.
  bool allow_empty = false;
  // Called after each read of at most 64 MiB with the bytes it read (a command's progress).
  std::function<void(size_t bytes)> on_read;
};

// An open regular file (read-only, O_NONBLOCK), closed with this object.
class OpenedFile {
 public:
  OpenedFile(int fd, uint64_t size) : fd_(fd), size_(size) {}
  OpenedFile(OpenedFile&& o) noexcept : fd_(o.fd_), size_(o.size_) { o.fd_ = -1; }
  OpenedFile& operator=(OpenedFile&&) = delete;
  OpenedFile(const OpenedFile&) = delete;
  ~OpenedFile();
  int fd() const { return fd_; }
  uint64_t size() const { return size_; }  // as fstat said at open
  // The descriptor, now the caller's to close.
  int Release() {
    const int fd = fd_;
    fd_ = -1;
    return fd;
  }

 private:
  int fd_;
  uint64_t size_;
};

// The checks of ReadRegularFile but the empty one (regular file, private_only, size limit) on
// `path` opened without blocking and fstat-ed, without reading it (for files mapped rather than
// read: safetensors shards).
Result<OpenedFile> OpenRegularFile(const std::string& path, const ReadFileOptions& options);

// `len` bytes at `offset` of the open file `fd` into `dst` (pread, resumed after short reads
// and EINTR). kIOError naming the byte range: a failed read, or a file that ends before it.
Status PreadFully(int fd, uint64_t offset, void* dst, size_t len);

// The whole contents of the regular file `path`, opened with OpenRegularFile. Opens without
// blocking (O_NONBLOCK: a FIFO does not wait for a writer), checks with fstat before reading and
// refuses anything but a regular file ("not a regular file (a FIFO)"), a file longer than
// `max_bytes` ("N bytes, more than the limit of M"), an empty one, never reading more than
// max_bytes + 1 bytes whatever the file does meanwhile. NOT_FOUND when it does not exist,
// INVALID_ARGUMENT when it cannot be opened or is refused, IO_ERROR when a read fails; the message
// names `what`, the path and the reason.
Result<std::string> ReadRegularFile(const std::string& path, const ReadFileOptions& options);
inline Result<std::string> ReadRegularFile(const std::string& path,
                                           size_t max_bytes = kMaxJsonFileBytes) {
  ReadFileOptions o;
  o.max_bytes = max_bytes;
  return ReadRegularFile(path, o);
}

// Writes `chunks` (in order) to the file `path` named by `what`, never blocking on what is
// there: an empty path, or a path that exists and is not a regular file (a FIFO, a directory, a
// device), is INVALID_ARGUMENT naming `what`, the path and its type, before anything is
// written. The bytes go to a temporary file beside it, synced and renamed over `path`, so a
// reader never sees half a file. IO_ERROR naming the path when a write fails (nothing is left
// behind).
Status WriteRegularFile(const std::string& path, std::string_view what,
                        std::span<const std::string_view> chunks);
// WriteRegularFile's checks alone, for a command that refuses a bad output path before any work.
Status CheckWritableFileArg(const std::string& path, std::string_view what);

// A journal directory named by an option or argument (`what`): OK when `path` is a directory
// (and, with must_hold_files, one holding at least one entry); INVALID_ARGUMENT naming `what`
// and the path when it is missing (unless !must_exist), not a directory, or empty.
Status CheckDirectoryArg(std::string_view what, const std::string& path, bool must_exist,
                         bool must_hold_files);

}  // namespace wtx
