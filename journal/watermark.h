// The sync watermark: the last record of a journal known to be durable, kept outside the
// write-ahead log so that a log cut at a record boundary (which no WAL checksum can see) is
// still caught. It is stored twice, in kWatermarkCopies[0] and [1] ("WTX-SYNCED-A", "-B"),
// rewritten alternately in place, so that the loss or damage of one file (deleted, torn by a
// crash in the middle of its rewrite, overwritten) leaves the other: the reader takes the
// newest valid copy. Each copy is one fixed-size binary value (docs/journal-format.md):
//
//   "WTXS" | layout (1) | 3 zero bytes | generation u64 | seq u64 | head u64 | XXH3-64 of the
//   32 bytes before it (all integers little endian): 40 bytes.
//
// The generation grows by one with every write of either copy; seq names the record, head is
// its checksum. Journals written before the two copies have one file, kWatermarkFile
// ("WTX-SYNCED", a CBOR value {"seq", "head"}): it is still read (and replaced by the two
// copies when such a journal is next opened for writing).
//
// Thread-safety: pure functions of their arguments and the files.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "wtx/status.h"

namespace rocksdb {
class FileSystem;
}  // namespace rocksdb

namespace wtx {

// The single watermark file of journals written before the two copies (read, never written).
inline constexpr const char* kWatermarkFile = "WTX-SYNCED";
// The two copies, written alternately.
inline constexpr const char* kWatermarkCopies[2] = {"WTX-SYNCED-A", "WTX-SYNCED-B"};
// The encoded size of one copy.
inline constexpr size_t kWatermarkCopyBytes = 40;

struct SyncWatermark {
  uint64_t seq = 0;
  std::string head;         // hex checksum of record `seq`
  uint64_t generation = 0;  // 0 for the legacy file
  std::string file;         // the file it was read from
};

// Encodes one copy. The one encoder of the format above.
std::string EncodeWatermarkCopy(uint64_t generation, uint64_t seq, uint64_t head);
// Decodes one copy read from `file` (named in the error): kJournalCorrupt on a wrong size,
// magic, layout or checksum. The one decoder of the format above.
Result<SyncWatermark> DecodeWatermarkCopy(std::string_view data, const std::string& file);

// What the watermark files of a journal directory hold.
struct WatermarkReading {
  // The newest valid watermark (highest seq, then generation) of the two copies and the legacy
  // file; nullopt when none is valid.
  std::optional<SyncWatermark> newest;
  // Every valid one (at most three), for the checks against the records.
  std::vector<SyncWatermark> valid;
  bool copy_present[2] = {false, false};  // kWatermarkCopies[i] exists
  bool copy_valid[2] = {false, false};    // ... and decodes
  bool legacy_present = false;            // kWatermarkFile exists (valid or not)
  // One line per file that is missing or unusable ("WTX-SYNCED-B: missing", "WTX-SYNCED-A:
  // 17 bytes, expected 40 (torn or truncated)"); the legacy file is named only when it exists.
  std::vector<std::string> problems;
  // The problems as one line ("" when none).
  std::string Problems() const;
  // A journal of the older single-file format: kWatermarkFile, and neither copy.
  bool LegacyFormat() const { return legacy_present && !copy_present[0] && !copy_present[1]; }
};

// Reads the watermark files of `dir` through `fs` (null: the default filesystem).
WatermarkReading ReadWatermark(const std::string& dir,
                               const std::shared_ptr<rocksdb::FileSystem>& fs);

}  // namespace wtx
