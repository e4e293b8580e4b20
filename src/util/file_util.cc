#include "src/util/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

namespace wtx {

namespace {

std::string Named(std::string_view what, const std::string& path) {
  if (what.empty()) return path;
  return std::string(what) + " '" + path + "'";
}

const char* FileTypeName(mode_t m) {
  if (S_ISDIR(m)) return " (a directory)";
  if (S_ISFIFO(m)) return " (a FIFO)";
  if (S_ISCHR(m) || S_ISBLK(m)) return " (a device)";
  if (S_ISSOCK(m)) return " (a socket)";
  return "";
}

Status TooLong(const std::string& name, uint64_t n, const ReadFileOptions& o) {
  return Status::InvalidArgument(name + ": " + std::to_string(n) +
                                 " bytes, more than the limit of " + std::to_string(o.max_bytes));
}

}  // namespace

OpenedFile::~OpenedFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status PreadFully(int fd, uint64_t offset, void* dst, size_t len) {
  auto* out = static_cast<uint8_t*>(dst);
  for (size_t got = 0; got < len;) {
    const ssize_t n = pread(fd, out + got, len - got, static_cast<off_t>(offset + got));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      return Status::IOError("cannot read bytes [" + std::to_string(offset) + ", " +
                             std::to_string(offset + len) + "): " +
                             (n < 0 ? std::string(std::strerror(errno))
                                    : "the file ends at " + std::to_string(offset + got)));
    }
    got += static_cast<size_t>(n);
  }
  return Status::OK();
}

Result<OpenedFile> OpenRegularFile(const std::string& path, const ReadFileOptions& o) {
  const std::string name = Named(o.what, path);
  if (path.empty()) return Status::InvalidArgument(name + ": empty path");
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) {
    const int e = errno;
    const std::string m = name + ": cannot open: " + std::strerror(e);
    return Status(e == ENOENT ? ErrorCode::kNotFound : ErrorCode::kInvalidArgument, m);
  }
  OpenedFile f(fd, 0);
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    return Status::IOError(name + ": cannot stat: " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(name + ": not a regular file" + FileTypeName(st.st_mode));
  }
  if (o.private_only && (st.st_mode & (S_IRWXG | S_IRWXO))) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    return Status::InvalidArgument(name + ": accessible by group or others (mode " + mode +
                                   "); make it private: chmod 600 '" + path + "'");
  }
  if (static_cast<uint64_t>(st.st_size) > o.max_bytes) return TooLong(name, st.st_size, o);
  return OpenedFile(f.Release(), static_cast<uint64_t>(st.st_size));
}

Result<std::string> ReadRegularFile(const std::string& path, const ReadFileOptions& o) {
  const std::string name = Named(o.what, path);
  WTX_ASSIGN_OR_RETURN(f, OpenRegularFile(path, o));
  const int fd = f.fd();
  // Read at most one byte past the bound, whatever fstat said (the file may grow).
  std::string s(static_cast<size_t>(f.size()) + 1, '\0');
  size_t got = 0;
  while (true) {
    if (got == s.size()) {
      if (s.size() > o.max_bytes) return TooLong(name, s.size(), o);
      s.resize(std::min(o.max_bytes + 1, s.size() * 2));
    }
    constexpr size_t kReadChunk = size_t{64} << 20;
    const ssize_t n = ::read(fd, s.data() + got, std::min(s.size() - got, kReadChunk));
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IOError(name + ": cannot read: " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
    if (o.on_read) o.on_read(static_cast<size_t>(n));
  }
  s.resize(got);
  if (s.empty() && !o.allow_empty) return Status::InvalidArgument(name + ": empty file");
  return s;
}

Status CheckDirectoryArg(std::string_view what, const std::string& path, bool must_exist,
                         bool must_hold_files) {
  const std::string name = Named(what, path);
  if (path.empty()) return Status::InvalidArgument(name + ": empty path");
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) {
    if (errno == ENOENT && !must_exist) return Status::OK();
    return Status::InvalidArgument(name + ": " + std::strerror(errno));
  }
  if (!S_ISDIR(st.st_mode)) {
    return Status::InvalidArgument(name + ": not a directory" + FileTypeName(st.st_mode));
  }
  if (must_hold_files) {
    std::error_code ec;
    std::filesystem::directory_iterator it(path, ec);
    if (ec) return Status::InvalidArgument(name + ": cannot list: " + ec.message());
    if (it == std::filesystem::directory_iterator()) {
      return Status::InvalidArgument(name + ": empty directory (no journal)");
    }
  }
  return Status::OK();
}

Status CheckWritableFileArg(const std::string& path, std::string_view what) {
  const std::string name = Named(what, path);
  if (path.empty()) return Status::InvalidArgument(name + ": empty path");
  struct stat st;
  if (::stat(path.c_str(), &st) == 0 && !S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(name + ": not a regular file" + FileTypeName(st.st_mode));
  }
  return Status::OK();
}

Status WriteRegularFile(const std::string& path, std::string_view what,
                        std::span<const std::string_view> chunks) {
  WTX_RETURN_IF_ERROR(CheckWritableFileArg(path, what));
  const std::string name = Named(what, path);
  std::string tmp = path + ".tmp-XXXXXX";
  const int fd = ::mkstemp(tmp.data());
  if (fd < 0) {
    return Status::InvalidArgument(name +
                                   ": cannot create a file beside it: " + std::strerror(errno));
  }
  Status s;
  for (std::string_view c : chunks) {
    for (size_t done = 0; done < c.size() && s.ok();) {
      const ssize_t n = ::write(fd, c.data() + done, c.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        s = Status::IOError(name + ": write failed: " + std::strerror(errno));
        break;
      }
      done += static_cast<size_t>(n);
    }
  }
  if (s.ok() && ::fsync(fd) != 0)
    s = Status::IOError(name + ": fsync failed: " + std::strerror(errno));
  if (s.ok()) ::fchmod(fd, 0644);
  ::close(fd);
  if (s.ok() && ::rename(tmp.c_str(), path.c_str()) != 0) {
    s = Status::IOError(name +
                        ": cannot rename the written file into place: " + std::strerror(errno));
  }
  if (!s.ok()) ::unlink(tmp.c_str());
  return s;
}

}  // namespace wtx
