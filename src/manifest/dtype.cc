#include "wtx/dtype.h"

#include <array>
#include <utility>

namespace wtx {
namespace {
struct DTypeInfo {
  DType dtype;
  std::string_view name;
  size_t size;
};
constexpr std::array<DTypeInfo, 7> kInfo = {{
    {DType::kF32, "f32", 4},
    {DType::kBF16, "bf16", 2},
    {DType::kF16, "f16", 2},
    {DType::kFP8E4M3, "fp8_e4m3", 1},
    {DType::kI8, "i8", 1},
    {DType::kU8, "u8", 1},
    {DType::kI32, "i32", 4},
}};
}  // namespace

size_t DTypeSize(DType dtype) { return kInfo[static_cast<size_t>(dtype)].size; }
std::string_view DTypeName(DType dtype) { return kInfo[static_cast<size_t>(dtype)].name; }
std::optional<DType> DTypeFromName(std::string_view name) {
  for (const auto& i : kInfo) {
    if (i.name == name) return i.dtype;
  }
  return std::nullopt;
}

}  // namespace wtx
