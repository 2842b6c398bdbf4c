// Which SIMD instructions the CPU kernels may use: detected once, capped by the environment
// variable HG_CPU_ISA, asked by every CPU kernel family (the one place that reads CPUID).
//
//   hg::cpu::isa()            // the level in use, e.g. Isa::Avx2
//   hg::cpu::isa_name(isa())  // "avx2"
//   HG_CPU_ISA=generic ./app  // run the portable kernels on any CPU (tests, comparisons)
//
// The levels, each including the ones before it:
//   x86-64:  generic < avx2 (AVX2 + FMA + F16C) < avx512 (F, BW, VL, DQ) < avx512bf16 (+ AVX512-BF16)
//            < amx (+ AMX-TILE and AMX-BF16, with the kernel's permission to use the tile state)
//   aarch64: generic < neon (Advanced SIMD) < neon-bf16 (+ the BF16 extension)
// "generic" means halfgrad's hand-written SIMD kernels are off (portable C++ and Eigen instead);
// the compiler may still vectorise plain loops with whatever the build targets (-march=native).
#pragma once
#include <string>
#include <string_view>

namespace hg::cpu {

enum class Isa { Generic, Avx2, Avx512, Avx512Bf16, Amx, Neon, NeonBf16 };

const char* isa_name(Isa isa);
// The level named `name` ("avx2", ...); an unknown name is an hg::Error listing the valid ones.
Isa isa_from_name(std::string_view name);

// What this CPU (and its operating system) supports.
Isa detected_isa();

// The level the kernels use: detected_isa(), capped by HG_CPU_ISA (read on first use) or by
// set_isa(). HG_CPU_ISA naming a level this CPU lacks, or an unknown name, is an hg::Error that
// names what the CPU has.
Isa isa();

// Caps the level at run time (tests, benchmarks); the same rules as HG_CPU_ISA. Returns the
// previous level.
Isa set_isa(Isa level);

// True when level `have` includes `want` (same family, at or above it; everything includes
// generic); supports(want) asks it of isa().
bool level_includes(Isa have, Isa want);
bool supports(Isa level);

// Native bf16 dot products in use (AVX512-BF16 or AMX): the only CPUs where bf16 compute can be
// faster than f32. Elsewhere bf16 only saves memory and costs conversions.
bool has_native_bf16();

// One line for program headers: "avx512bf16" or "avx2 (capped by HG_CPU_ISA; CPU has avx512bf16)".
std::string isa_summary();

// ---- the conversion kernels' view (kept for existing callers) ----
bool has_f16c();         // vcvtph2ps / vcvtps2ph in use (isa() >= avx2)
bool has_avx512_bf16();  // vcvtneps2bf16 / vdpbf16ps in use (isa() >= avx512bf16, x86)

}  // namespace hg::cpu
