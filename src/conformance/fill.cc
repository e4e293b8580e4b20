#include "src/conformance/fill.h"

#include <xxhash.h>
#include <cstring>

#include "src/util/json_fields.h"
#include "src/util/json_number.h"

namespace wtx::sim {

namespace {

uint64_t SplitMix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

uint16_t FloatToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  u += 0x7fff + ((u >> 16) & 1);  // round to nearest even (finite inputs only)
  return static_cast<uint16_t>(u >> 16);
}

uint16_t FloatToF16(float f) {
  // Values are in [-1, 1): normal or subnormal halves, no overflow.
  uint32_t u;
  std::memcpy(&u, &f, 4);
  uint32_t sign = (u >> 16) & 0x8000;
  int32_t exp = static_cast<int32_t>((u >> 23) & 0xff) - 127 + 15;
  uint32_t mant = u & 0x7fffff;
  if (exp <= 0) {
    if (exp < -10) return static_cast<uint16_t>(sign);
    mant |= 0x800000;
    return static_cast<uint16_t>(sign | (mant >> (14 - exp)));
  }
  return static_cast<uint16_t>(sign | (exp << 10) | (mant >> 13));
}

}  // namespace

uint64_t SourceNameHash(const std::string& source) {
  return XXH3_64bits(source.data(), source.size());
}

Result<FillSpec> ParseFill(const nlohmann::json& j, const std::string& where) {
  FillSpec f;
  if (j.is_string()) {
    if (j.get<std::string>() != "zeros") {
      return Status::InvalidArgument(where + ": unknown fill '" + j.get<std::string>() +
                                     "' (\"zeros\" or {\"seed\": N})");
    }
    f.zeros = true;
    return f;
  }
  if (!j.is_object() || !j.contains("seed") || !j["seed"].is_number_integer()) {
    return Status::InvalidArgument(where + ": expected \"zeros\" or {\"seed\": N}");
  }
  WTX_RETURN_IF_ERROR(CheckFields(j, where, {"seed", "override"}));
  WTX_ASSIGN_OR_RETURN(seed, JsonUint(j["seed"], where + ".seed"));
  f.seed = seed;
  if (auto it = j.find("override"); it != j.end()) {
    const auto& o = *it;
    WTX_RETURN_IF_ERROR(CheckFields(o, where + ".override", {"seed", "indices"}));
    if (!o.is_object() || !o.contains("seed") || !o["seed"].is_number_integer() ||
        !o.contains("indices") || !o["indices"].is_array()) {
      return Status::InvalidArgument(where +
                                     ".override: expected {\"seed\": M, \"indices\": [...]}");
    }
    f.has_override = true;
    WTX_ASSIGN_OR_RETURN(oseed, JsonUint(o["seed"], where + ".override.seed"));
    f.override_seed = oseed;
    for (const auto& i : o["indices"]) {
      if (!i.is_number_integer()) {
        return Status::InvalidArgument(where + ".override.indices: expected integers");
      }
      WTX_ASSIGN_OR_RETURN(index, JsonInt(i, where + ".override.indices", INT64_MIN, INT64_MAX));
      f.override_indices.insert(index);
    }
  }
  return f;
}

void FillElement(const FillSpec& fill, uint64_t source_hash, int64_t index, DType dtype,
                 void* out) {
  const size_t esz = DTypeSize(dtype);
  if (fill.zeros) {
    std::memset(out, 0, esz);
    return;
  }
  uint64_t seed = fill.seed;
  if (fill.has_override && fill.override_indices.count(index)) seed = fill.override_seed;
  const uint64_t h = SplitMix64(SplitMix64(seed ^ source_hash) + static_cast<uint64_t>(index));
  const float f = static_cast<float>(static_cast<double>(h >> 11) * 0x1.0p-53 * 2.0 - 1.0);
  switch (dtype) {
    case DType::kF32:
      std::memcpy(out, &f, 4);
      break;
    case DType::kBF16: {
      uint16_t v = FloatToBf16(f);
      std::memcpy(out, &v, 2);
      break;
    }
    case DType::kF16: {
      uint16_t v = FloatToF16(f);
      std::memcpy(out, &v, 2);
      break;
    }
    case DType::kFP8E4M3: {
      uint8_t b = static_cast<uint8_t>(h & 0xff);
      if ((b & 0x7f) == 0x7f) b ^= 1;  // 0x7f/0xff are NaN in e4m3
      std::memcpy(out, &b, 1);
      break;
    }
    case DType::kI8:
    case DType::kU8: {
      uint8_t b = static_cast<uint8_t>(h & 0xff);
      std::memcpy(out, &b, 1);
      break;
    }
    case DType::kI32: {
      uint32_t v = static_cast<uint32_t>(h);
      std::memcpy(out, &v, 4);
      break;
    }
  }
}

}  // namespace wtx::sim
