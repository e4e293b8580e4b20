// SafetensorsCheckpoint: memory-mapped safetensors files, single or sharded through a Hugging
// Face index (safetensors.h).
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "src/util/file_util.h"
#include "src/util/json_fields.h"
#include "wtx/safetensors.h"

namespace wtx {

namespace {

namespace fs = std::filesystem;

constexpr std::string_view kIndexName = "model.safetensors.index.json";

// One read-only mapping of a whole file.
class MappedFile {
 public:
  MappedFile() = default;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile() {
    if (addr_ != nullptr) munmap(addr_, size_);
    if (fd_ >= 0) close(fd_);
  }

  Status Open(const std::string& path) {
    // Opened without blocking and checked (a FIFO, device or folder is refused, named).
    ReadFileOptions ro;
    ro.max_bytes = SIZE_MAX;
    WTX_ASSIGN_OR_RETURN(file, OpenRegularFile(path, ro));
    const int fd = file.fd();
    size_ = static_cast<size_t>(file.size());
    // Kept open (loaders read the tensors with pread) while descriptors are plentiful; a
    // checkpoint of very many files reads the rest through the mapping, so that it never runs
    // the process out of descriptors.
    if (fd < kMaxKeptDescriptor) fd_ = file.Release();
    if (size_ > 0) {
      void* a = mmap(nullptr, size_, PROT_READ, MAP_SHARED, fd, 0);
      if (a == MAP_FAILED) return Status::IOError(path + ": cannot map: " + std::strerror(errno));
      addr_ = a;
    }
    return Status::OK();
  }
  std::span<const uint8_t> bytes() const { return {static_cast<const uint8_t*>(addr_), size_}; }
  int fd() const { return fd_; }

 private:
  static constexpr int kMaxKeptDescriptor = 512;
  int fd_ = -1;
  void* addr_ = nullptr;
  size_t size_ = 0;
};

class CheckpointImpl : public SafetensorsCheckpoint {
 public:
  const std::vector<std::string>& names() const override { return names_; }
  const std::vector<std::string>& files() const override { return files_; }
  const CheckpointTensor* Find(std::string_view name) const override {
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
  }
  uint64_t data_bytes() const override { return data_bytes_; }

  // Maps `path` and adds its tensors; `only` (when not null) is the set the index maps to this
  // file: each must be present, and tensors outside it are ignored.
  Status AddFile(const std::string& path, const std::set<std::string>* only) {
    auto& f = maps_.emplace_back(std::make_unique<MappedFile>());
    WTX_RETURN_IF_ERROR(f->Open(path));
    auto h = ParseSafetensorsHeader(f->bytes(), path);
    if (!h.ok()) return h.status();
    files_.push_back(path);
    std::set<std::string> seen;
    for (const SafetensorsEntry& e : h.value().tensors) {
      if (only && !only->count(e.name)) continue;
      seen.insert(e.name);
      CheckpointTensor t;
      t.name = e.name;
      t.file = path;
      t.dtype = e.dtype;
      t.shape = e.shape;
      t.bytes = f->bytes().subspan(h.value().data_offset + e.begin, e.end - e.begin);
      t.fd = f->fd();
      t.file_offset = h.value().data_offset + e.begin;
      data_bytes_ += e.end - e.begin;
      auto [it, inserted] = tensors_.emplace(e.name, std::move(t));
      if (!inserted) {
        return Status::InvalidArgument(path + ": tensor '" + e.name + "' is also in " +
                                       it->second.file);
      }
    }
    if (only) {
      for (const std::string& n : *only) {
        if (!seen.count(n)) {
          std::string msg = path;
          msg.append(": tensor '")
              .append(n)
              .append("' is mapped to this file by the index, but the file does not hold it");
          return Status(ErrorCode::kNotFound, std::move(msg));
        }
      }
    }
    return Status::OK();
  }

  Status OpenIndex(const std::string& index_path) {
    WTX_ASSIGN_OR_RETURN(text, ReadRegularFile(index_path));
    std::vector<std::string> duplicate;
    nlohmann::json j = ParseJsonNoDuplicateKeys(text, &duplicate);
    if (duplicate.size() == 2 && duplicate[0] == "weight_map") {
      return Status::InvalidArgument(index_path + ": tensor '" + duplicate[1] +
                                     "' is mapped twice by weight_map");
    }
    if (!duplicate.empty()) {
      std::string path;
      for (const std::string& k : duplicate) path = FieldPath(path, k);
      return Status::InvalidArgument(index_path + ": '" + path + "' given twice");
    }
    if (j.is_discarded() || !j.is_object()) {
      return Status::InvalidArgument(index_path + ": not a JSON object");
    }
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object() || wm->empty()) {
      return Status::InvalidArgument(index_path + ": weight_map missing or empty");
    }
    const fs::path dir = fs::path(index_path).parent_path();
    std::map<std::string, std::set<std::string>> by_file;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it.value().is_string()) {
        return Status::InvalidArgument(index_path + ": weight_map['" + it.key() +
                                       "'] is not a file name");
      }
      const std::string file = it.value().get<std::string>();
      const fs::path rel(file);
      // Shard files live next to the index: no folders, no "..", no absolute paths.
      if (file.empty() || rel.has_parent_path() || rel.is_absolute() || file == "." ||
          file == "..") {
        std::string msg = index_path;
        msg.append(": tensor '")
            .append(it.key())
            .append("': shard file '")
            .append(file)
            .append("' is not a file name in the index's folder");
        return Status::InvalidArgument(std::move(msg));
      }
      by_file[(dir / rel).string()].insert(it.key());
    }
    for (const auto& [file, names] : by_file) WTX_RETURN_IF_ERROR(AddFile(file, &names));
    return Status::OK();
  }

  void Finish() {
    for (const auto& [n, _] : tensors_) names_.push_back(n);
    std::sort(files_.begin(), files_.end());
  }

 private:
  std::vector<std::unique_ptr<MappedFile>> maps_;
  std::map<std::string, CheckpointTensor, std::less<>> tensors_;
  std::vector<std::string> names_;
  std::vector<std::string> files_;
  uint64_t data_bytes_ = 0;
};

}  // namespace

Result<std::unique_ptr<SafetensorsCheckpoint>> SafetensorsCheckpoint::Open(
    const std::string& path) {
  auto c = std::make_unique<CheckpointImpl>();
  std::error_code ec;
  if (fs::is_directory(path, ec)) {
    const fs::path index = fs::path(path) / kIndexName;
    if (fs::exists(index, ec)) {
      WTX_RETURN_IF_ERROR(c->OpenIndex(index.string()));
    } else {
      std::vector<std::string> found;
      for (const auto& e : fs::directory_iterator(path, ec)) {
        if (e.path().extension() == ".safetensors") found.push_back(e.path().string());
      }
      if (found.size() != 1) {
        return Status::InvalidArgument(path + ": a checkpoint folder needs " +
                                       std::string(kIndexName) +
                                       " or exactly one "
                                       ".safetensors file (found " +
                                       std::to_string(found.size()) + ")");
      }
      WTX_RETURN_IF_ERROR(c->AddFile(found[0], nullptr));
    }
  } else if (!fs::exists(path, ec)) {
    return Status::IOError(path + ": no such file or folder");
  } else if (fs::path(path).extension() == ".json") {
    WTX_RETURN_IF_ERROR(c->OpenIndex(path));
  } else {
    WTX_RETURN_IF_ERROR(c->AddFile(path, nullptr));
  }
  c->Finish();
  return std::unique_ptr<SafetensorsCheckpoint>(std::move(c));
}

Status CheckTensorAgainstManifest(const CheckpointTensor& tensor, const Manifest& manifest) {
  std::optional<Shape> want = manifest.SourceShape(tensor.name);
  if (!want) return Status::OK();  // this rank does not read it
  if (*want != tensor.shape) {
    return Status::InvalidArgument(tensor.file + ": tensor '" + tensor.name + "' has shape " +
                                   ShapeToString(tensor.shape) +
                                   ", the manifest's source_shape is " + ShapeToString(*want));
  }
  return Status::OK();
}

}  // namespace wtx
