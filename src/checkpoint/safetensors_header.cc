// ParseSafetensorsHeader: validation of the 8-byte length + JSON header of one safetensors
// file (safetensors.h). Untrusted input: every check is explicit, nothing may overflow.
#include <algorithm>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "src/util/json_fields.h"
#include "wtx/safetensors.h"

namespace wtx {

namespace {

struct StName {
  std::string_view name;
  DType dtype;
};
constexpr StName kStDTypes[] = {
    {"BF16", DType::kBF16},       {"F16", DType::kF16}, {"F32", DType::kF32},
    {"F8_E4M3", DType::kFP8E4M3}, {"I8", DType::kI8},   {"U8", DType::kU8},
    {"I32", DType::kI32},
};

Status Bad(std::string_view file, const std::string& tensor, const std::string& what) {
  std::string m(file);
  if (!tensor.empty()) m += ": tensor '" + tensor + "'";
  return Status::InvalidArgument(m + ": " + what);
}

// a * b, or nullopt on overflow.
std::optional<uint64_t> MulChecked(uint64_t a, uint64_t b) {
  if (a != 0 && b > std::numeric_limits<uint64_t>::max() / a) return std::nullopt;
  return a * b;
}

}  // namespace

Result<DType> DTypeFromSafetensorsName(std::string_view name) {
  for (const auto& d : kStDTypes) {
    if (d.name == name) return d.dtype;
  }
  return Status::InvalidArgument("unsupported dtype '" + std::string(name) +
                                 "' (BF16, F16, F32, F8_E4M3, I8, U8, I32)");
}

std::string_view SafetensorsDTypeName(DType dtype) {
  for (const auto& d : kStDTypes) {
    if (d.dtype == dtype) return d.name;
  }
  return "?";
}

Result<SafetensorsHeader> ParseSafetensorsHeader(std::span<const uint8_t> file,
                                                 std::string_view file_label) {
  if (file.size() < 8) {
    return Bad(file_label, "",
               "truncated: " + std::to_string(file.size()) +
                   " bytes, a safetensors file starts with an 8-byte header "
                   "length");
  }
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | file[static_cast<size_t>(i)];
  if (n > kMaxSafetensorsHeaderBytes) {
    return Bad(file_label, "",
               "header length " + std::to_string(n) + " exceeds the limit of " +
                   std::to_string(kMaxSafetensorsHeaderBytes) + " bytes");
  }
  if (n > file.size() - 8) {
    return Bad(file_label, "",
               "header length " + std::to_string(n) + " runs past the end of " + "the file (" +
                   std::to_string(file.size()) + " bytes)");
  }
  SafetensorsHeader h;
  h.header_bytes = n;
  h.data_offset = 8 + n;
  const uint64_t data_size = file.size() - h.data_offset;
  const char* text = reinterpret_cast<const char*>(file.data() + 8);
  std::vector<std::string> duplicate;
  nlohmann::json j = ParseJsonNoDuplicateKeys(std::string_view(text, n), &duplicate);
  if (!duplicate.empty()) {
    // Two entries of one name: which bytes are the tensor would be the parser's choice.
    if (duplicate.size() == 1) return Bad(file_label, duplicate[0], "named twice in the header");
    return Bad(file_label, duplicate[0], "field '" + duplicate.back() + "' given twice");
  }
  if (j.is_discarded()) return Bad(file_label, "", "the header is not valid JSON");
  if (!j.is_object()) return Bad(file_label, "", "the header is not a JSON object");
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& name = it.key();
    const nlohmann::json& e = it.value();
    if (name == "__metadata__") {
      if (!e.is_object()) return Bad(file_label, "", "__metadata__ is not an object");
      for (auto m = e.begin(); m != e.end(); ++m) {
        if (!m.value().is_string()) {
          return Bad(file_label, "", "__metadata__." + m.key() + " is not a string");
        }
      }
      continue;
    }
    if (name.empty()) return Bad(file_label, name, "empty tensor name");
    if (!e.is_object()) return Bad(file_label, name, "entry is not an object");
    for (auto f = e.begin(); f != e.end(); ++f) {
      if (f.key() != "dtype" && f.key() != "shape" && f.key() != "data_offsets") {
        return Bad(file_label, name, "unknown field '" + f.key() + "'");
      }
    }
    SafetensorsEntry t;
    t.name = name;
    auto dt = e.find("dtype");
    if (dt == e.end()) return Bad(file_label, name, "dtype missing");
    if (!dt->is_string()) return Bad(file_label, name, "dtype " + dt->dump() + " is not a string");
    t.dtype_name = dt->get<std::string>();
    auto d = DTypeFromSafetensorsName(t.dtype_name);
    if (!d.ok()) return Bad(file_label, name, d.status().message());
    t.dtype = d.value();
    auto sh = e.find("shape");
    if (sh == e.end() || !sh->is_array()) return Bad(file_label, name, "shape missing");
    if (sh->size() > 16) return Bad(file_label, name, "shape has more than 16 dimensions");
    uint64_t elements = 1;
    for (const auto& x : *sh) {
      // A number_float (1.5, NaN spelled as 1e999, ...) or a negative value is refused.
      if (!x.is_number_integer() ||
          (x.is_number_integer() && !x.is_number_unsigned() && x.get<int64_t>() < 0)) {
        return Bad(file_label, name,
                   "shape " + sh->dump() +
                       " is not a list of non-negative "
                       "integers");
      }
      const uint64_t v = x.get<uint64_t>();
      if (v > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return Bad(file_label, name, "shape " + sh->dump() + " is too large");
      }
      auto p = MulChecked(elements, v);
      if (!p) return Bad(file_label, name, "shape " + sh->dump() + " overflows");
      elements = *p;
      t.shape.push_back(static_cast<int64_t>(v));
    }
    auto bytes = MulChecked(elements, DTypeSize(t.dtype));
    if (!bytes) return Bad(file_label, name, "shape " + sh->dump() + " overflows");
    auto off = e.find("data_offsets");
    if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
        !(*off)[1].is_number_unsigned()) {
      return Bad(file_label, name, "data_offsets is not a pair of non-negative integers");
    }
    t.begin = (*off)[0].get<uint64_t>();
    t.end = (*off)[1].get<uint64_t>();
    if (t.begin > t.end) {
      return Bad(file_label, name,
                 "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                     "] are inverted");
    }
    if (t.end > data_size) {
      return Bad(file_label, name,
                 "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                     "] run past the end of the " + "data (" + std::to_string(data_size) +
                     " bytes)");
    }
    if (t.end - t.begin != *bytes) {
      return Bad(file_label, name,
                 "data_offsets [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                     "] hold " + std::to_string(t.end - t.begin) + " bytes, shape " + sh->dump() +
                     " of " + t.dtype_name + " needs " + std::to_string(*bytes));
    }
    h.tensors.push_back(std::move(t));
  }
  std::sort(h.tensors.begin(), h.tensors.end(), [](const auto& a, const auto& b) {
    return std::tie(a.begin, a.end, a.name) < std::tie(b.begin, b.end, b.name);
  });
  // Sorted by begin: each non-empty tensor must start at or after the furthest end so far.
  const SafetensorsEntry* last = nullptr;
  for (const SafetensorsEntry& t : h.tensors) {
    if (t.end == t.begin) continue;  // zero-byte tensors overlap nothing
    if (last && last->end > t.begin) {
      return Bad(file_label, t.name,
                 "bytes [" + std::to_string(t.begin) + ", " + std::to_string(t.end) +
                     ") overlap those of tensor '" + last->name + "' [" +
                     std::to_string(last->begin) + ", " + std::to_string(last->end) + ")");
    }
    if (!last || t.end > last->end) last = &t;
  }
  return h;
}

}  // namespace wtx
