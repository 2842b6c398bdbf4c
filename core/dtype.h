// The one dtype table. Every dtype property (name, size, floating or not, safetensors name)
// comes from kDTypeTable; nothing else in halfgrad switches on a dtype except visit_dtype.
#pragma once
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace hg {

enum class DType : uint8_t { F32, F64, F16, BF16, I32, I64, U8 };

struct DTypeInfo {
  DType dtype;
  std::string_view name;              // "f32"; what users and error messages see
  std::string_view safetensors_name;  // "F32"; the tag in safetensors headers
  size_t size;                        // bytes per element
  bool is_floating;
};

inline constexpr DTypeInfo kDTypeTable[] = {
    {DType::F32, "f32", "F32", 4, true},    {DType::F64, "f64", "F64", 8, true},
    {DType::F16, "f16", "F16", 2, true},    {DType::BF16, "bf16", "BF16", 2, true},
    {DType::I32, "i32", "I32", 4, false},   {DType::I64, "i64", "I64", 8, false},
    {DType::U8, "u8", "U8", 1, false},
};
inline constexpr size_t kNumDTypes = std::size(kDTypeTable);

constexpr const DTypeInfo& dtype_info(DType d) { return kDTypeTable[static_cast<size_t>(d)]; }
constexpr std::string_view dtype_name(DType d) { return dtype_info(d).name; }
constexpr size_t element_size(DType d) { return dtype_info(d).size; }
constexpr bool is_floating(DType d) { return dtype_info(d).is_floating; }
constexpr bool is_16bit_floating(DType d) { return d == DType::F16 || d == DType::BF16; }

inline constexpr DType f32 = DType::F32;
inline constexpr DType f64 = DType::F64;
inline constexpr DType f16 = DType::F16;
inline constexpr DType bf16 = DType::BF16;
inline constexpr DType i32 = DType::I32;
inline constexpr DType i64 = DType::I64;
inline constexpr DType u8 = DType::U8;

// The dtype two tensors combine to, as in PyTorch: integers < 16-bit floats < f32 < f64,
// u8 < i32 < i64, and f16 with bf16 gives f32 (neither holds the other's values).
DType promote_types(DType a, DType b);

std::ostream& operator<<(std::ostream& os, DType d);

}  // namespace hg
