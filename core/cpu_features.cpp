// CPU feature detection (CPUID + XGETBV on x86-64, the auxiliary vector on aarch64) and the
// HG_CPU_ISA cap. The only file that asks the processor what it supports.
#include "core/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <string_view>

#include "core/error.h"

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#define HG_CPU_X86 1
#elif defined(__aarch64__)
#include <sys/auxv.h>
#define HG_CPU_ARM 1
#endif

namespace hg::cpu {

namespace {

constexpr Isa kAllLevels[] = {Isa::Generic, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16, Isa::Amx, Isa::Neon, Isa::NeonBf16};

bool is_arm_level(Isa level) { return level == Isa::Neon || level == Isa::NeonBf16; }

// Levels only compare within one family: generic < avx2 < avx512 < avx512bf16 < amx, generic < neon < neon-bf16.
bool includes(Isa have, Isa want) {
  if (want == Isa::Generic) return true;
  if (have == Isa::Generic || is_arm_level(have) != is_arm_level(want)) return false;
  return static_cast<int>(have) >= static_cast<int>(want);
}

#if defined(HG_CPU_X86)
bool bit(unsigned value, int index) { return (value >> index) & 1u; }

// The register state the operating system saves on a context switch (XCR0): AVX needs the
// SSE and AVX halves (bits 1, 2), AVX-512 also the mask and upper-ZMM state (bits 5, 6, 7).
// A CPU can report AVX-512 while the OS does not enable it; then it must not be used.
unsigned long long os_saved_state() {
  unsigned eax = 0, edx = 0;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<unsigned long long>(edx) << 32) | eax;
}

// AMX's tile registers are 8 KB of state the OS saves only for processes that ask: XCR0 must
// enable the tile configuration and data (bits 17, 18), and Linux wants an
// arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) before the first tile instruction, which
// otherwise dies with SIGILL. Asked once, here, for the whole process.
bool amx_permitted(unsigned long long xcr0) {
  if ((xcr0 & (3ull << 17)) != (3ull << 17)) return false;
#if defined(__linux__)
  constexpr long kArchReqXcompPerm = 0x1023, kXfeatureXtiledata = 18;
  return syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
#else
  return false;
#endif
}

Isa detect() {
  unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
  if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return Isa::Generic;
  const bool fma = bit(ecx, 12), osxsave = bit(ecx, 27), avx = bit(ecx, 28), f16c = bit(ecx, 29);
  if (!(osxsave && avx)) return Isa::Generic;
  const unsigned long long xcr0 = os_saved_state();
  if ((xcr0 & 0x6) != 0x6) return Isa::Generic;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return Isa::Generic;
  const bool avx2 = bit(ebx, 5);
  if (!(avx2 && fma && f16c)) return Isa::Generic;
  const bool avx512 = bit(ebx, 16) && bit(ebx, 17) && bit(ebx, 30) && bit(ebx, 31);  // F, DQ, BW, VL
  if (!avx512 || (xcr0 & 0xE0) != 0xE0) return Isa::Avx2;
  const bool amx = bit(edx, 24) && bit(edx, 22);  // AMX-TILE, AMX-BF16
  unsigned max_subleaf = eax;
  if (!(max_subleaf >= 1 && __get_cpuid_count(7, 1, &eax, &ebx, &ecx, &edx) && bit(eax, 5))) return Isa::Avx512;
  return amx && amx_permitted(xcr0) ? Isa::Amx : Isa::Avx512Bf16;
}
#elif defined(HG_CPU_ARM)
Isa detect() {
  constexpr unsigned long kHwcapAsimd = 1ul << 1;  // HWCAP_ASIMD
  constexpr unsigned long kHwcap2Bf16 = 1ul << 14;  // HWCAP2_BF16
  if (!(getauxval(AT_HWCAP) & kHwcapAsimd)) return Isa::Generic;
  return (getauxval(AT_HWCAP2) & kHwcap2Bf16) ? Isa::NeonBf16 : Isa::Neon;
}
#else
Isa detect() { return Isa::Generic; }
#endif

Isa parse_level(std::string_view name, const char* source) {
  for (Isa level : kAllLevels)
    if (name == isa_name(level)) return level;
  HG_FAIL(source, ": unknown CPU level '", name, "'; expected one of generic, avx2, avx512, avx512bf16, amx (x86-64) or ",
          "generic, neon, neon-bf16 (aarch64). This CPU has ", isa_name(detected_isa()));
}

Isa checked_cap(Isa level, const char* source) {
  HG_CHECK(includes(detected_isa(), level), source, ": asked for ", isa_name(level), " but this CPU has only ",
           isa_name(detected_isa()), " (a cap can only lower the level, never raise it)");
  return level;
}

constexpr int kUnset = -1;
std::atomic<int> g_level{kUnset};

Isa initial_level() {
  const char* env = std::getenv("HG_CPU_ISA");
  if (env == nullptr || *env == '\0') return detected_isa();
  return checked_cap(parse_level(env, "HG_CPU_ISA"), "HG_CPU_ISA");
}

}  // namespace

const char* isa_name(Isa level) {
  switch (level) {
    case Isa::Generic: return "generic";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
    case Isa::Avx512Bf16: return "avx512bf16";
    case Isa::Amx: return "amx";
    case Isa::Neon: return "neon";
    case Isa::NeonBf16: return "neon-bf16";
  }
  return "unknown";
}

Isa isa_from_name(std::string_view name) { return parse_level(name, "hg::cpu::isa_from_name"); }

Isa detected_isa() {
  static const Isa detected = detect();
  return detected;
}

Isa isa() {
  const int level = g_level.load(std::memory_order_relaxed);
  if (level != kUnset) return static_cast<Isa>(level);
  // NOTE: a bad HG_CPU_ISA throws here, on every call, until it is fixed: no kernel ever runs
  // with a level the user did not mean.
  const Isa first = initial_level();
  int expected = kUnset;
  g_level.compare_exchange_strong(expected, static_cast<int>(first));
  return static_cast<Isa>(g_level.load());
}

Isa set_isa(Isa level) {
  const Isa previous = g_level.load() == kUnset ? detected_isa() : isa();
  g_level.store(static_cast<int>(checked_cap(level, "hg::cpu::set_isa")));
  return previous;
}

bool level_includes(Isa have, Isa want) { return includes(have, want); }

bool supports(Isa level) { return includes(isa(), level); }

bool has_native_bf16() { return supports(Isa::Avx512Bf16); }

bool has_f16c() { return supports(Isa::Avx2); }

bool has_avx512_bf16() { return supports(Isa::Avx512Bf16); }

std::string isa_summary() {
  const Isa used = isa(), detected = detected_isa();
  if (used == detected) return isa_name(used);
  return std::string(isa_name(used)) + " (capped; CPU has " + isa_name(detected) + ")";
}

}  // namespace hg::cpu
