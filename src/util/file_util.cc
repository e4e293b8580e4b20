#include "src/util/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace wtx {

Result<std::string> ReadRegularFile(const std::string& path, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return Status::IOError(path + ": cannot open: " + std::strerror(errno));
  struct FdCloser {
    int fd;
    ~FdCloser() { ::close(fd); }
  } closer{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0)
    return Status::IOError(path + ": cannot stat: " + std::strerror(errno));
  if (!S_ISREG(st.st_mode)) {
    return Status::InvalidArgument(path + ": not a regular file" +
                                   (S_ISDIR(st.st_mode) ? std::string(" (a directory)") : ""));
  }
  auto too_long = [&](uint64_t n) {
    return Status::InvalidArgument(path + ": " + std::to_string(n) +
                                   " bytes, more than the limit of " + std::to_string(max_bytes));
  };
  if (static_cast<uint64_t>(st.st_size) > max_bytes) return too_long(st.st_size);
  // Read at most one byte past the bound, whatever fstat said (the file may grow).
  std::string s(static_cast<size_t>(st.st_size) + 1, '\0');
  size_t got = 0;
  while (true) {
    if (got == s.size()) {
      if (s.size() > max_bytes) return too_long(s.size());
      s.resize(std::min(max_bytes + 1, s.size() * 2));
    }
    const ssize_t n = ::read(fd, s.data() + got, s.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Status::IOError(path + ": cannot read: " + std::strerror(errno));
    if (n == 0) break;
    got += static_cast<size_t>(n);
  }
  s.resize(got);
  return s;
}

}  // namespace wtx
