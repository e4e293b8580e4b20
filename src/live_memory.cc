#include "wtx/live_memory.h"

#include <cstdlib>
#include <cstring>

namespace wtx {
namespace {

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};

class HostLiveMemory : public LiveMemory {
 public:
  explicit HostLiveMemory(const Manifest& m) {
    for (const auto& p : m.params()) sizes_.push_back(static_cast<size_t>(p.num_bytes()));
    Allocate();
  }
  std::span<uint8_t> Param(uint32_t i) override { return {bufs_[i].get(), sizes_[i]}; }
  void Discard() override { Allocate(); }

 private:
  void Allocate() {
    bufs_.clear();
    // calloc: the OS hands out zero pages lazily, so untouched parameters cost nothing.
    for (size_t s : sizes_) bufs_.emplace_back(static_cast<uint8_t*>(std::calloc(s ? s : 1, 1)));
  }
  std::vector<size_t> sizes_;
  std::vector<std::unique_ptr<uint8_t, FreeDeleter>> bufs_;
};

class BorrowedLiveMemory : public LiveMemory {
 public:
  explicit BorrowedLiveMemory(std::vector<std::span<uint8_t>> spans) : spans_(std::move(spans)) {}
  std::span<uint8_t> Param(uint32_t i) override { return spans_[i]; }
  void Discard() override {
    for (auto s : spans_) std::memset(s.data(), 0, s.size());
  }

 private:
  std::vector<std::span<uint8_t>> spans_;
};

}  // namespace

std::unique_ptr<LiveMemory> NewHostLiveMemory(const Manifest& manifest) {
  return std::make_unique<HostLiveMemory>(manifest);
}

Result<std::unique_ptr<LiveMemory>> NewBorrowedLiveMemory(const Manifest& manifest,
                                                          std::vector<std::span<uint8_t>> spans) {
  if (spans.size() != manifest.params().size()) {
    return Status::InvalidArgument("borrowed memory: " + std::to_string(spans.size()) +
                                   " buffers for " + std::to_string(manifest.params().size()) +
                                   " parameters");
  }
  for (size_t i = 0; i < spans.size(); ++i) {
    const auto& p = manifest.params()[i];
    if (spans[i].size() != static_cast<size_t>(p.num_bytes())) {
      return Status::InvalidArgument("borrowed memory: buffer of " + p.name + " has " +
                                     std::to_string(spans[i].size()) + " bytes, expected " +
                                     std::to_string(p.num_bytes()));
    }
  }
  return std::unique_ptr<LiveMemory>(std::make_unique<BorrowedLiveMemory>(std::move(spans)));
}

}  // namespace wtx
