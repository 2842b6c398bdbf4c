// The one dtype table. Every dtype property (name, size, floating or not, how it promotes, the
// dtype it computes and accumulates in, its safetensors and CUDA library tags) comes from
// kDTypeTable; nothing else in halfgrad switches on a dtype except visit_dtype (core/visit.h).
#pragma once
#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <iterator>
#include <string_view>

namespace hg {

enum class DType : uint8_t { F32, F64, F16, BF16, I32, I64, U8, F8E4M3, F8E5M2 };

struct DTypeInfo {
  DType dtype;
  std::string_view name;              // "f32"; what users and error messages see
  std::string_view safetensors_name;  // "F32"; the tag in safetensors headers
  size_t size;                        // bytes per element
  bool is_floating;
  // promote_types: the higher rank wins; two different dtypes of one rank (f16, bf16) meet in f32.
  // Every floating rank is above every integer rank.
  int promotion_rank;
  // The dtype arithmetic on this dtype runs in (Acc<T>, PyTorch's opmath type): 16-bit floats
  // are only a storage format, computed in f32.
  DType compute;
  // The dtype of results summed over many elements and of per-channel statistics: f32 for the
  // 16-bit floats and f32, f64 for f64, i64 for integers (an integer sum is an i64, as in PyTorch).
  DType accumulate;
  // NOTE: the CUDA libraries' tags, stored as the plain integers of cuBLAS's cudaDataType_t
  // (CUDA_R_32F ...) and cuDNN's cudnnDataType_t (CUDNN_DATA_FLOAT ...), so that this header
  // needs no CUDA header. kernels/cuda/gemm.cpp and kernels/cuda/conv.cpp static_assert that each equals
  // the library's enumerator, so a wrong number here does not compile there.
  int cuda_data_type;
  int cudnn_data_type;
};

// clang-format off
inline constexpr DTypeInfo kDTypeTable[] = {
  //  dtype       name    safetensors  size  floating  rank  compute     accumulate  cudaDataType  cudnnDataType
    {DType::F32,  "f32",  "F32",       4,    true,     4,    DType::F32, DType::F32, /*R_32F*/ 0,  /*FLOAT*/ 0},
    {DType::F64,  "f64",  "F64",       8,    true,     5,    DType::F64, DType::F64, /*R_64F*/ 1,  /*DOUBLE*/ 1},
    {DType::F16,  "f16",  "F16",       2,    true,     3,    DType::F32, DType::F32, /*R_16F*/ 2,  /*HALF*/ 2},
    {DType::BF16, "bf16", "BF16",      2,    true,     3,    DType::F32, DType::F32, /*R_16BF*/ 14, /*BFLOAT16*/ 9},
    {DType::I32,  "i32",  "I32",       4,    false,    1,    DType::I32, DType::I64, /*R_32I*/ 10, /*INT32*/ 4},
    {DType::I64,  "i64",  "I64",       8,    false,    2,    DType::I64, DType::I64, /*R_64I*/ 24, /*INT64*/ 10},
    {DType::U8,   "u8",   "U8",        1,    false,    0,    DType::U8,  DType::I64, /*R_8U*/ 8,   /*UINT8*/ 6},
    // FP8 (core/float8.h): storage only. Ops refuse them (visit_dtype) and promote_types does not
    // mix them with other dtypes, as in PyTorch; Tensor::to converts, the FP8 recipes quantise.
    {DType::F8E4M3, "f8e4m3", "F8_E4M3", 1, true,   3,    DType::F32, DType::F32, /*R_8F_E4M3*/ 28, /*FP8_E4M3*/ 12},
    {DType::F8E5M2, "f8e5m2", "F8_E5M2", 1, true,   3,    DType::F32, DType::F32, /*R_8F_E5M2*/ 29, /*FP8_E5M2*/ 13},
};
// clang-format on
inline constexpr size_t kNumDTypes = std::size(kDTypeTable);

constexpr const DTypeInfo& dtype_info(DType d) { return kDTypeTable[static_cast<size_t>(d)]; }
constexpr std::string_view dtype_name(DType d) { return dtype_info(d).name; }
constexpr size_t element_size(DType d) { return dtype_info(d).size; }
constexpr bool is_floating(DType d) { return dtype_info(d).is_floating; }
constexpr bool is_16bit_floating(DType d) { return is_floating(d) && element_size(d) == 2; }
constexpr bool is_float8(DType d) { return is_floating(d) && element_size(d) == 1; }
constexpr DType compute_dtype(DType d) { return dtype_info(d).compute; }
constexpr DType accumulate_dtype(DType d) { return dtype_info(d).accumulate; }

// dtype_info(d) indexes the table by the enumerator's value, so rows must follow the enum order.
constexpr bool table_follows_enum_order() {
  for (size_t i = 0; i < kNumDTypes; ++i)
    if (static_cast<size_t>(kDTypeTable[i].dtype) != i) return false;
  return true;
}
static_assert(table_follows_enum_order(), "kDTypeTable: rows must be in DType's order");

inline constexpr DType f32 = DType::F32;
inline constexpr DType f64 = DType::F64;
inline constexpr DType f16 = DType::F16;
inline constexpr DType bf16 = DType::BF16;
inline constexpr DType i32 = DType::I32;
inline constexpr DType i64 = DType::I64;
inline constexpr DType u8 = DType::U8;
inline constexpr DType f8e4m3 = DType::F8E4M3;
inline constexpr DType f8e5m2 = DType::F8E5M2;

// The dtype two tensors combine to, as in PyTorch: integers < 16-bit floats < f32 < f64,
// u8 < i32 < i64, and f16 with bf16 gives f32 (neither holds the other's values). An FP8 dtype
// promotes only with itself: mixing it with another dtype is an hg::Error (convert first).
DType promote_types(DType a, DType b);

std::ostream& operator<<(std::ostream& os, DType d);

}  // namespace hg
