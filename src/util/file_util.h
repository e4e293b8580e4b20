// Reading small untrusted files (JSON configs, manifests, scenarios, checkpoint indexes) given
// by path: the path may name anything — a FIFO nobody writes (open would block forever), a
// device such as /dev/zero (a read never ends), a directory, a huge file — and each is refused
// with an error naming the path before it can hang or exhaust memory.
//
// Thread-safety: pure functions (no shared state).
#pragma once

#include <cstddef>
#include <string>

#include "wtx/status.h"

namespace wtx {

// JSON documents wtx reads from files (HF configs, manifests, scenarios, expectations,
// safetensors indexes) are at most this long (1 GiB).
inline constexpr size_t kMaxJsonFileBytes = size_t{1} << 30;

// The whole contents of the regular file `path`. Opens without blocking (O_NONBLOCK: a FIFO
// does not wait for a writer), refuses anything but a regular file ("PATH: not a regular
// file"), and a file longer than `max_bytes` ("PATH: N bytes, more than the limit of M"),
// never reading more than max_bytes + 1 bytes whatever the file does meanwhile. IO_ERROR when
// it cannot be opened or read (the message names the path and the reason).
Result<std::string> ReadRegularFile(const std::string& path, size_t max_bytes = kMaxJsonFileBytes);

}  // namespace wtx
