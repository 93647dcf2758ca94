// 16-bit floats: bfloat16 and IEEE half (binary16), converted to and from
// float32 a block at a time.
//
// bf16 is the top half of a float32 (same 8-bit exponent, so the same range,
// 8 bits of mantissa); f16 has 11 bits of mantissa and a 5-bit exponent
// (largest finite 65504, smallest subnormal 2^-24). Both conversions from
// float32 round to nearest, ties to even; NaN stays NaN (quiet), infinities
// stay infinite; f16 overflows to infinity and keeps subnormals.
//
// The block conversions use AVX2 (bf16) and F16C (f16) where the CPU has
// them, chosen once at run time, and a portable loop elsewhere; both give
// the same bits. Thread-safe (no state but the one-time CPU check).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace shardps {

// One value, portable (the block functions below are what hot paths use).
inline uint16_t FloatToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x40);  // NaN: quiet, keep sign
  u += 0x7fffu + ((u >> 16) & 1u);  // round to nearest even on the dropped 16 bits
  return static_cast<uint16_t>(u >> 16);
}
inline float Bf16BitsToFloat(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
uint16_t FloatToF16Bits(float f);
float F16BitsToFloat(uint16_t h);

// n values each way. `in` and `out` must not overlap; neither needs any
// alignment.
void FloatToBf16(const float* in, uint16_t* out, size_t n);
void Bf16ToFloat(const uint16_t* in, float* out, size_t n);
void FloatToF16(const float* in, uint16_t* out, size_t n);
void F16ToFloat(const uint16_t* in, float* out, size_t n);

// float32 to bfloat16 with stochastic rounding, for values that are updated
// in place many times (an embedding row after each optimizer step): the
// dropped 16 bits round the magnitude up with probability equal to their
// fraction of one bf16 ulp, so the stored value's expectation is the
// float32. Round to nearest loses every update smaller than half an ulp
// (2^-9 of the value), and a row's small updates add up to many of those.
// `state` is a xorshift64 state (nonzero), advanced; the same state gives
// the same bits. NaN stays NaN (quiet), infinities stay infinite, and a
// finite value never becomes infinite (it truncates to the largest finite
// bf16 where rounding up would overflow). Values that are exactly a bf16
// are kept as they are.
void FloatToBf16Stochastic(const float* in, uint16_t* out, size_t n, uint64_t* state);

// Which code the block conversions run ("avx2+f16c" or "portable").
const char* HalfConversionPath();

}  // namespace shardps
