// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC 2011): a
// counter-based generator. Random number k of a stream is a pure function of (seed, k), so any
// thread -- or a CUDA thread -- computes it directly, and results do not depend on thread count
// or device. Usable from host and device code.
#pragma once
#include <cmath>
#include <cstdint>

#if (defined(__AVX512F__) || defined(__AVX2__)) && !defined(__CUDACC__)
#include <immintrin.h>
#endif

#if defined(__CUDACC__)
#define HG_PHILOX_HD __host__ __device__ __forceinline__
#else
#define HG_PHILOX_HD inline
#endif

namespace hg::philox {

struct Block {
  uint32_t v[4];
};

constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;  // key schedule increments
constexpr uint32_t kMul0 = 0xD2511F53u, kMul1 = 0xCD9E8D57u;    // round multipliers

// One of the ten rounds on the counter (c0..c3) with round key (k0, k1).
HG_PHILOX_HD void apply_round(uint32_t& c0, uint32_t& c1, uint32_t& c2, uint32_t& c3, uint32_t k0, uint32_t k1) {
  const uint64_t p0 = uint64_t(kMul0) * c0, p1 = uint64_t(kMul1) * c2;
  const uint32_t hi0 = uint32_t(p0 >> 32), lo0 = uint32_t(p0), hi1 = uint32_t(p1 >> 32), lo1 = uint32_t(p1);
  c0 = hi1 ^ c1 ^ k0;
  c1 = lo1;
  c2 = hi0 ^ c3 ^ k1;
  c3 = lo0;
}

HG_PHILOX_HD Block generate(uint64_t seed, uint64_t counter) {
  uint32_t c0 = uint32_t(counter), c1 = uint32_t(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r, k0 += kWeyl0, k1 += kWeyl1) apply_round(c0, c1, c2, c3, k0, k1);
  return Block{{c0, c1, c2, c3}};
}

// The blocks of counters first .. first + kBatch - 1 at once, word w of block l in words[w][l]:
// the same numbers as generate(), laid out so that the rounds run over the kBatch lanes as
// vectors (the CPU loops: drawn one block per call, dropout was 13.8% of an f32 mnist-net step
// at 1 thread, perf).
//
// NOTE: the lane loop is marked `omp simd` (HG_SIMD_LOOP; the library is compiled with
// -fopenmp-simd -DHG_OPENMP_SIMD: the pragma, no OpenMP runtime); without it GCC unrolled the
// 16 lanes into scalar imuls. Each round's products are 32 x 32 -> 64 bits, one instruction on
// x86, (v)pmuludq. GCC 12 emits it for the 32-bit lanes below at SSE2 and AVX2 (generate_batch
// alone, 1 thread: 2-3x and 1.1x faster than the 64-bit lanes held before), but at AVX-512 it
// picks vpmullq, a full 64-bit multiply of 3 uops and 15 cycles' latency on Intel, on the
// rounds' dependency chain; so AVX-512 builds (-march=native here) write the rounds with
// _mm512_mul_epu32, 2x faster than GCC's vpmullq code (docs/results.md section 16, ops_bench
// --dropout); with it, 32 blocks per batch were no faster than 16. AVX2 builds write them with
// _mm256_mul_epu32 likewise (results.md section 30). Portable builds compile this header for the
// baseline, so both are for -march=native builds.
#if defined(HG_OPENMP_SIMD) && !defined(__CUDACC__)
#define HG_SIMD_LOOP _Pragma("omp simd")
#else
#define HG_SIMD_LOOP
#endif
inline constexpr int kBatch = 16;
#if defined(__AVX512F__) && !defined(__CUDACC__)
#if !defined(__clang__)  // GCC 12 reports -W(maybe-)uninitialized inside its own AVX-512 intrinsics
#pragma GCC diagnostic push  // (a known false positive), where they are inlined: here, not in the callers
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
inline void generate_batch(uint64_t seed, uint64_t first, uint32_t (&words)[4][kBatch]) {
  // Eight blocks per register, each word in the low half of a 64-bit lane (upper half zero),
  // which is the half that _mm512_mul_epu32 multiplies.
  const __m512i low = _mm512_set1_epi64(0xFFFFFFFFu), mul0 = _mm512_set1_epi64(kMul0), mul1 = _mm512_set1_epi64(kMul1);
  for (int l = 0; l < kBatch; l += 8) {
    const __m512i counter = _mm512_add_epi64(_mm512_set1_epi64(int64_t(first + uint64_t(l))),
                                             _mm512_set_epi64(7, 6, 5, 4, 3, 2, 1, 0));
    __m512i c0 = _mm512_and_si512(counter, low), c1 = _mm512_srli_epi64(counter, 32);
    __m512i c2 = _mm512_setzero_si512(), c3 = _mm512_setzero_si512();
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int r = 0; r < 10; ++r, k0 += kWeyl0, k1 += kWeyl1) {  // apply_round, on 8 lanes
      const __m512i p0 = _mm512_mul_epu32(c0, mul0), p1 = _mm512_mul_epu32(c2, mul1);
      c0 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(p1, 32), c1), _mm512_set1_epi64(k0));
      c1 = _mm512_and_si512(p1, low);
      c2 = _mm512_xor_si512(_mm512_xor_si512(_mm512_srli_epi64(p0, 32), c3), _mm512_set1_epi64(k1));
      c3 = _mm512_and_si512(p0, low);
    }
    _mm512_mask_cvtepi64_storeu_epi32(words[0] + l, 0xFF, c0);  // each lane's low half (vpmovqd)
    _mm512_mask_cvtepi64_storeu_epi32(words[1] + l, 0xFF, c1);
    _mm512_mask_cvtepi64_storeu_epi32(words[2] + l, 0xFF, c2);
    _mm512_mask_cvtepi64_storeu_epi32(words[3] + l, 0xFF, c3);
  }
}
#if !defined(__clang__)
#pragma GCC diagnostic pop
#endif
#elif defined(__AVX2__) && !defined(__CUDACC__)
inline void generate_batch(uint64_t seed, uint64_t first, uint32_t (&words)[4][kBatch]) {
  // The same with four blocks per register: GCC's code for the lane loop below splits and re-joins
  // the 32-bit lanes around every vpmuludq (dropout 2.8 -> 1.9 ns per f32 element on Zen 3).
  const __m256i low = _mm256_set1_epi64x(0xFFFFFFFFu), mul0 = _mm256_set1_epi64x(kMul0), mul1 = _mm256_set1_epi64x(kMul1);
  const __m256i low_halves = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);  // each lane's low half to the bottom
  for (int l = 0; l < kBatch; l += 4) {
    const __m256i counter = _mm256_add_epi64(_mm256_set1_epi64x(int64_t(first + uint64_t(l))), _mm256_setr_epi64x(0, 1, 2, 3));
    __m256i c0 = _mm256_and_si256(counter, low), c1 = _mm256_srli_epi64(counter, 32);
    __m256i c2 = _mm256_setzero_si256(), c3 = _mm256_setzero_si256();
    uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
    for (int r = 0; r < 10; ++r, k0 += kWeyl0, k1 += kWeyl1) {  // apply_round, on 4 lanes
      const __m256i p0 = _mm256_mul_epu32(c0, mul0), p1 = _mm256_mul_epu32(c2, mul1);
      c0 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p1, 32), c1), _mm256_set1_epi64x(k0));
      c1 = _mm256_and_si256(p1, low);
      c2 = _mm256_xor_si256(_mm256_xor_si256(_mm256_srli_epi64(p0, 32), c3), _mm256_set1_epi64x(k1));
      c3 = _mm256_and_si256(p0, low);
    }
    const auto store = [&](__m256i c, int w) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(words[w] + l),
                       _mm256_castsi256_si128(_mm256_permutevar8x32_epi32(c, low_halves)));
    };
    store(c0, 0), store(c1, 1), store(c2, 2), store(c3, 3);
  }
}
#else
inline void generate_batch(uint64_t seed, uint64_t first, uint32_t (&words)[4][kBatch]) {
  uint32_t(&c0)[kBatch] = words[0], (&c1)[kBatch] = words[1], (&c2)[kBatch] = words[2], (&c3)[kBatch] = words[3];
  for (int l = 0; l < kBatch; ++l) {
    const uint64_t counter = first + uint64_t(l);
    c0[l] = uint32_t(counter), c1[l] = uint32_t(counter >> 32), c2[l] = 0, c3[l] = 0;
  }
  uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  for (int r = 0; r < 10; ++r, k0 += kWeyl0, k1 += kWeyl1) {
    HG_SIMD_LOOP
    for (int l = 0; l < kBatch; ++l) apply_round(c0[l], c1[l], c2[l], c3[l], k0, k1);
  }
}
#endif

// A batch's words in element order -- word w of block l is element 4 l + w, as uniform() numbers
// them -- each cut to its top `bits` bits.
inline void draws_in_order(const uint32_t (&words)[4][kBatch], int bits, uint32_t (&draws)[4 * kBatch]) {
  for (int l = 0; l < kBatch; ++l)
    for (int w = 0; w < 4; ++w) draws[4 * l + w] = words[w][l] >> (32 - bits);
}

// Element i of a uniform tensor uses word i%4 of block i/4, keeping `bits` bits: the result is
// a multiple of 2^-bits in [0, 1), exactly representable in the target dtype (24 bits for f32,
// 11 for f16, 8 for bf16, 32 for f64), so rounding can never produce 1.0.
HG_PHILOX_HD double uniform_of_word(uint32_t word, int bits) {
  return double(word >> (32 - bits)) * std::ldexp(1.0, -bits);
}
HG_PHILOX_HD double uniform(uint64_t seed, uint64_t offset, uint64_t i, int bits) {
  return uniform_of_word(generate(seed, offset + i / 4).v[i % 4], bits);
}

// Element i of a normal tensor: Box-Muller on words (2*(i%2), 2*(i%2)+1) of block i/2, in
// double so that CPU and CUDA round to the same float.
HG_PHILOX_HD double normal(uint64_t seed, uint64_t offset, uint64_t i) {
  const Block b = generate(seed, offset + i / 2);
  const uint32_t w0 = b.v[2 * (i % 2)], w1 = b.v[2 * (i % 2) + 1];
  const double u1 = (double(w0) + 1.0) * 2.3283064365386963e-10;  // (0, 1]: log(u1) is finite
  const double u2 = double(w1) * 2.3283064365386963e-10;           // [0, 1)
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}

// Element i of an integer tensor in [low, high): 64 random bits modulo the range.
HG_PHILOX_HD int64_t integer(uint64_t seed, uint64_t offset, uint64_t i, int64_t low, int64_t high) {
  const Block b = generate(seed, offset + i / 2);
  const uint64_t bits = (uint64_t(b.v[2 * (i % 2)]) << 32) | b.v[2 * (i % 2) + 1];
  return int64_t(uint64_t(low) + bits % (uint64_t(high) - uint64_t(low)));
}

}  // namespace hg::philox
