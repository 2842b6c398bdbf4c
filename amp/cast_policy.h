// CastPolicy: what autocast does with an op's floating inputs before the op computes. Each
// built-in op has one in the op table (amp/op_table.h); custom ops choose theirs with
// amp::set_policy (amp/policy.h).
#pragma once
#include <cstdint>
#include <string_view>

namespace hg::amp {

enum class CastPolicy : uint8_t {
  Lower,    // cast floating inputs to the autocast dtype (f16/bf16): GEMM-like ops
  F32,      // cast floating inputs to f32: ops whose range or accuracy 16 bits cannot hold
  Promote,  // cast floating inputs to the widest floating input dtype
  Keep,     // run in whatever dtype the inputs have
};

constexpr std::string_view policy_name(CastPolicy policy) {
  switch (policy) {
    case CastPolicy::Lower: return "Lower";
    case CastPolicy::F32: return "F32";
    case CastPolicy::Promote: return "Promote";
    case CastPolicy::Keep: return "Keep";
  }
  return "?";
}

}  // namespace hg::amp
