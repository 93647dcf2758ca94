#include "common/codec/half.h"

#include <cpuid.h>
#include <immintrin.h>

namespace shardps {

uint16_t FloatToF16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((a >> 13) & 0x1ffu);  // NaN, quiet
  if (a >= 0x477ff000u) return sign | 0x7c00u;  // rounds past 65504 (or is infinite): infinity
  if (a < 0x38800000u) {                        // below 2^-14: subnormal (or zero) in f16
    if (a < 0x33000000u) return sign;           // below half the smallest subnormal (2^-25): zero
    // value = m * 2^(e-150) with the implicit bit; in units of 2^-24.
    const uint32_t e = a >> 23, m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14..24: brings m * 2^(e-150) to units of 2^-24
    uint32_t q = m >> shift;
    const uint32_t rest = m & ((1u << shift) - 1), half = 1u << (shift - 1);
    if (rest > half || (rest == half && (q & 1u))) ++q;
    return sign | static_cast<uint16_t>(q);
  }
  // Normal: rebias the exponent (127 -> 15) and round 23 -> 10 mantissa bits;
  // a carry out of the mantissa steps the exponent, as it should.
  uint32_t h = ((a >> 13) - (112u << 10));
  const uint32_t rest = a & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return sign | static_cast<uint16_t>(h);
}

float F16BitsToFloat(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu, m = h & 0x3ffu;
  uint32_t u;
  if (e == 0x1f) {
    u = sign | 0x7f800000u | (m << 13);  // infinity or NaN (payload kept)
  } else if (e != 0) {
    u = sign | ((e + 112u) << 23) | (m << 13);
  } else if (m == 0) {
    u = sign;
  } else {  // subnormal: m * 2^-24, normalised
    int shift = 0;
    uint32_t mm = m;
    while (!(mm & 0x400u)) {
      mm <<= 1;
      ++shift;
    }
    u = sign | ((113u - shift) << 23) | ((mm & 0x3ffu) << 13);
  }
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

namespace {

void FloatToBf16Portable(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToBf16Bits(in[i]);
}
void Bf16ToFloatPortable(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = Bf16BitsToFloat(in[i]);
}
void FloatToF16Portable(const float* in, uint16_t* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = FloatToF16Bits(in[i]);
}
void F16ToFloatPortable(const uint16_t* in, float* out, size_t n) {
  for (size_t i = 0; i < n; ++i) out[i] = F16BitsToFloat(in[i]);
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) void FloatToBf16Avx2(const float* in, uint16_t* out, size_t n) {
  const __m256i lsb = _mm256_set1_epi32(1), bias = _mm256_set1_epi32(0x7fff);
  const __m256i abs_mask = _mm256_set1_epi32(0x7fffffff), inf = _mm256_set1_epi32(0x7f800000);
  const __m256i quiet = _mm256_set1_epi32(0x400000);
  size_t i = 0;
  for (; i + 16 <= n; i += 16) {
    __m256i r[2];
    for (int k = 0; k < 2; ++k) {
      const __m256i u = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i + 8 * k));
      const __m256i rounded = _mm256_add_epi32(u, _mm256_add_epi32(bias, _mm256_and_si256(_mm256_srli_epi32(u, 16), lsb)));
      const __m256i nan = _mm256_cmpgt_epi32(_mm256_and_si256(u, abs_mask), inf);
      r[k] = _mm256_srli_epi32(_mm256_blendv_epi8(rounded, _mm256_or_si256(u, quiet), nan), 16);
    }
    // packus works per 128-bit lane: [a0 b0 a1 b1] -> fix the order.
    const __m256i packed = _mm256_permute4x64_epi64(_mm256_packus_epi32(r[0], r[1]), 0xd8);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), packed);
  }
  FloatToBf16Portable(in + i, out + i, n - i);
}

__attribute__((target("avx2"))) void Bf16ToFloatAvx2(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i));
    const __m256i u = _mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), u);
  }
  Bf16ToFloatPortable(in + i, out + i, n - i);
}

__attribute__((target("avx2,f16c"))) void FloatToF16F16c(const float* in, uint16_t* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i h = _mm256_cvtps_ph(_mm256_loadu_ps(in + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), h);
  }
  FloatToF16Portable(in + i, out + i, n - i);
}

__attribute__((target("avx2,f16c"))) void F16ToFloatF16c(const uint16_t* in, float* out, size_t n) {
  size_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(in + i))));
  F16ToFloatPortable(in + i, out + i, n - i);
}

// F16C from CPUID leaf 1 (ECX bit 29): clang's __builtin_cpu_supports
// does not know "f16c". AVX2 implies the OS saves the YMM registers.
bool HasAvx2F16c() {
  static const bool has = [] {
    unsigned eax, ebx, ecx, edx;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return false;
    return __builtin_cpu_supports("avx2") && (ecx & (1u << 29)) != 0;
  }();
  return has;
}
#else
bool HasAvx2F16c() { return false; }
#endif

}  // namespace

void FloatToBf16Stochastic(const float* in, uint16_t* out, size_t n, uint64_t* state) {
  uint64_t s = *state, r = 0;
  for (size_t i = 0; i < n; ++i) {
    if ((i & 3) == 0) {  // xorshift64*: 64 random bits, 16 per value
      s ^= s >> 12;
      s ^= s << 25;
      s ^= s >> 27;
      r = s * 0x2545F4914F6CDD1Dull;
    }
    const uint32_t bits = static_cast<uint32_t>(r >> 48);  // the high bits are the best of xorshift64*
    r <<= 16;
    uint32_t u;
    std::memcpy(&u, &in[i], 4);
    const uint32_t mag = u & 0x7fffffffu;
    if (mag > 0x7f800000u) {
      out[i] = static_cast<uint16_t>((u >> 16) | 0x40);  // NaN: quiet, keep sign
    } else if (mag >= 0x7f7f0000u) {
      out[i] = static_cast<uint16_t>(u >> 16);  // infinity, or above the largest finite bf16: no rounding up
    } else {
      out[i] = static_cast<uint16_t>((u + bits) >> 16);  // adds to the magnitude: away from zero
    }
  }
  *state = s;
}

void FloatToBf16(const float* in, uint16_t* out, size_t n) {
#if defined(__x86_64__)
  if (HasAvx2F16c()) return FloatToBf16Avx2(in, out, n);
#endif
  FloatToBf16Portable(in, out, n);
}
void Bf16ToFloat(const uint16_t* in, float* out, size_t n) {
#if defined(__x86_64__)
  if (HasAvx2F16c()) return Bf16ToFloatAvx2(in, out, n);
#endif
  Bf16ToFloatPortable(in, out, n);
}
void FloatToF16(const float* in, uint16_t* out, size_t n) {
#if defined(__x86_64__)
  if (HasAvx2F16c()) return FloatToF16F16c(in, out, n);
#endif
  FloatToF16Portable(in, out, n);
}
void F16ToFloat(const uint16_t* in, float* out, size_t n) {
#if defined(__x86_64__)
  if (HasAvx2F16c()) return F16ToFloatF16c(in, out, n);
#endif
  F16ToFloatPortable(in, out, n);
}

const char* HalfConversionPath() { return HasAvx2F16c() ? "avx2+f16c" : "portable"; }

}  // namespace shardps
