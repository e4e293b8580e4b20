// Safetensors checkpoints: a reader for single `.safetensors` files and Hugging Face sharded
// checkpoints (`model.safetensors.index.json` + shard files), memory-mapped read-only.
//
// File format: an 8-byte little-endian header length N, N bytes of JSON header, then the data
// section. The header maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]}
// (offsets relative to the data section) plus an optional "__metadata__" object of strings.
//
// Contract: a header is accepted only when N is within bounds (8 + N <= file size, N <=
// kMaxSafetensorsHeaderBytes), it is a JSON object, every entry has a supported dtype name
// (BF16, F16, F32, F8_E4M3, I8, U8, I32), a shape of non-negative integers whose byte size
// equals end - begin (no overflow), offsets inside the data section, and no two tensors'
// byte ranges overlap. An index's weight_map must name only shard files inside the
// checkpoint's folder, and every tensor it maps must be found in the file it names (and in no
// other shard). Every error is kInvalidArgument (kIOError for an unreadable file, kNotFound
// for an absent tensor) and names the file and, where there is one, the tensor.
//
// Thread-safety: a SafetensorsCheckpoint is immutable after Open; concurrent reads are safe.
// The tensor bytes stay mapped until the checkpoint is destroyed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "wtx/dtype.h"
#include "wtx/manifest.h"
#include "wtx/status.h"

namespace wtx {

inline constexpr uint64_t kMaxSafetensorsHeaderBytes = uint64_t{100} << 20;  // 100 MiB

// One tensor entry of a parsed header.
struct SafetensorsEntry {
  std::string name;
  DType dtype = DType::kF32;
  std::string dtype_name;  // as in the file: "BF16"
  Shape shape;
  uint64_t begin = 0;  // byte offsets into the data section
  uint64_t end = 0;
};

struct SafetensorsHeader {
  uint64_t header_bytes = 0;              // N
  uint64_t data_offset = 0;               // 8 + N: where the data section starts in the file
  std::vector<SafetensorsEntry> tensors;  // sorted by begin offset
};

// Parses and validates the header of a safetensors file whose full content is `file` (only
// the first 8 + N bytes are read; the size is used for the bounds checks). `file_label` names
// the file in errors. Never crashes on any input (fuzzed: tests/fuzz).
Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> file,
                                                 std::string_view file_label);

// DType of a safetensors dtype name ("BF16" -> kBF16); kInvalidArgument for others.
Result<DType> DTypeFromSafetensorsName(std::string_view name);
// The safetensors name of `dtype` ("BF16").
std::string_view SafetensorsDTypeName(DType dtype);

// A tensor of an open checkpoint.
struct CheckpointTensor {
  std::string name;
  std::string file;  // path of the file that holds it
  DType dtype = DType::kF32;
  Shape shape;
  std::span<const uint8_t> bytes;  // mapped; valid while the checkpoint lives
  int fd = -1;               // the open file (open while the checkpoint lives), or -1: read `bytes`
  uint64_t file_offset = 0;  // where `bytes` begin in it: read them with pread
};

class SafetensorsCheckpoint {
 public:
  // `path`: a .safetensors file; a model.safetensors.index.json file; or a folder holding
  // either model.safetensors.index.json (sharded) or exactly one *.safetensors file.
  static Result<std::unique_ptr<SafetensorsCheckpoint>> Open(const std::string& path);
  virtual ~SafetensorsCheckpoint() = default;

  // Tensor names, sorted.
  virtual const std::vector<std::string>& names() const = 0;
  // The files read (one, or the index's shards), sorted.
  virtual const std::vector<std::string>& files() const = 0;
  // nullptr when absent.
  virtual const CheckpointTensor* Find(std::string_view name) const = 0;
  // Total bytes of tensor data.
  virtual uint64_t data_bytes() const = 0;
};

// Checks that `tensor` can feed source `source` of `manifest`: its shape equals the
// manifest's source_shape. Errors name the file and tensor.
Status CheckTensorAgainstManifest(const CheckpointTensor& tensor, const Manifest& manifest);

}  // namespace wtx
