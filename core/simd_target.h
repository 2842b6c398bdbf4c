// Compiling a region of code for one instruction set, whatever the rest of the build targets.
//
//   HG_TARGET_BEGIN("avx2,fma,f16c")
//   void pool_row_avx2(...) { ... intrinsics, lambdas, helpers ... }
//   HG_TARGET_END
//
// Every function *defined* between the two lines (lambdas and local helpers included) may use
// that instruction set; code defined elsewhere (the standard library's templates, halfgrad's
// headers) keeps the build's baseline, so nothing compiled for AVX-512 can leak into code that
// runs on a CPU without it. Such functions are only ever reached through cpu::isa() (see
// core/cpu_features.h). The headers a region needs are included before HG_TARGET_BEGIN.
//
// NOTE: a plain `__attribute__((target(...)))` on one function does not reach the lambdas
// inside it (GCC then refuses to inline the intrinsics they call), which is why the whole
// region is switched with a pragma: `GCC target` for GCC, `clang attribute` for clang.
#pragma once

#if defined(__x86_64__) || defined(_M_X64)
#define HG_X86 1
#else
#define HG_X86 0
#endif

#if defined(__aarch64__)
#define HG_ARM 1
#else
#define HG_ARM 0
#endif

#define HG_PRAGMA(text) _Pragma(#text)
#if defined(__clang__)
#define HG_TARGET_BEGIN(features) HG_PRAGMA(clang attribute push(__attribute__((target(features))), apply_to = function))
#define HG_TARGET_END HG_PRAGMA(clang attribute pop)
#else
#define HG_TARGET_BEGIN(features) HG_PRAGMA(GCC push_options) HG_PRAGMA(GCC target(features))
#define HG_TARGET_END HG_PRAGMA(GCC pop_options)
#endif

// The feature strings of halfgrad's x86 levels (core/cpu_features.h).
#define HG_AVX2_FEATURES "avx2,fma,f16c"
#define HG_AVX512_FEATURES "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"
#define HG_AVX512BF16_FEATURES "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16"
#define HG_AMX_FEATURES "avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq,avx512bf16,amx-tile,amx-bf16"
