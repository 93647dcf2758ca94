// bf16 and f16 conversion (common/codec/half.h): every 16-bit pattern round-trips,
// float32 rounds to nearest-even within each type's precision, NaN stays
// NaN, infinities and subnormals are kept, and the vectorised block path
// gives the bits the portable one gives; stochastic bf16 rounding keeps the
// value on average.
#include "common/codec/half.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

namespace shardps {
namespace {

bool IsNaN16(uint16_t h, bool bf16) { return bf16 ? (h & 0x7fff) > 0x7f80 : (h & 0x7fff) > 0x7c00; }

TEST(Half, Every16BitPatternRoundTripsThroughFloat) {
  std::vector<uint16_t> all(65536), back(65536);
  for (uint32_t i = 0; i < 65536; ++i) all[i] = static_cast<uint16_t>(i);
  std::vector<float> f(65536);
  for (bool bf16 : {true, false}) {
    if (bf16) {
      Bf16ToFloat(all.data(), f.data(), all.size());
      FloatToBf16(f.data(), back.data(), f.size());
    } else {
      F16ToFloat(all.data(), f.data(), all.size());
      FloatToF16(f.data(), back.data(), f.size());
    }
    for (uint32_t i = 0; i < 65536; ++i) {
      if (IsNaN16(all[i], bf16)) {
        EXPECT_TRUE(std::isnan(f[i])) << i;
        EXPECT_TRUE(IsNaN16(back[i], bf16)) << i;
      } else {
        ASSERT_EQ(back[i], all[i]) << (bf16 ? "bf16 " : "f16 ") << std::hex << i << " -> " << f[i];
      }
    }
  }
}

TEST(Half, KnownValuesSpecialsAndRounding) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(FloatToBf16Bits(1.0f), 0x3f80);
  EXPECT_EQ(FloatToF16Bits(1.0f), 0x3c00);
  EXPECT_EQ(FloatToF16Bits(-2.0f), 0xc000);
  EXPECT_EQ(FloatToF16Bits(65504.0f), 0x7bff);  // largest finite f16
  EXPECT_EQ(FloatToF16Bits(65520.0f), 0x7c00);  // halfway to 65536: ties to even, infinity
  EXPECT_EQ(FloatToF16Bits(1e6f), 0x7c00);
  EXPECT_EQ(FloatToF16Bits(-inf), 0xfc00);
  EXPECT_EQ(FloatToBf16Bits(inf), 0x7f80);
  EXPECT_EQ(FloatToF16Bits(std::ldexp(1.0f, -24)), 0x0001);  // smallest subnormal
  EXPECT_EQ(FloatToF16Bits(std::ldexp(1.0f, -25)), 0x0000);  // half of it: ties to even (0)
  EXPECT_EQ(FloatToF16Bits(std::ldexp(1.5f, -25)), 0x0001);
  EXPECT_EQ(FloatToF16Bits(std::ldexp(1.0f, -14)), 0x0400);  // smallest normal
  EXPECT_EQ(FloatToF16Bits(-0.0f), 0x8000);
  EXPECT_EQ(F16BitsToFloat(0x0001), std::ldexp(1.0f, -24));
  EXPECT_EQ(F16BitsToFloat(0x03ff), std::ldexp(1023.0f, -24));
  // bf16: 1 + 2^-8 is halfway between 1 and 1 + 2^-7: ties to even (1).
  EXPECT_EQ(FloatToBf16Bits(1.0f + std::ldexp(1.0f, -8)), 0x3f80);
  EXPECT_EQ(FloatToBf16Bits(1.0f + std::ldexp(3.0f, -8)), 0x3f82);  // ties to even (up)
  EXPECT_TRUE(std::isnan(Bf16BitsToFloat(FloatToBf16Bits(std::nanf("")))));
  EXPECT_TRUE(std::isnan(F16BitsToFloat(FloatToF16Bits(std::nanf("")))));
  // A NaN whose payload sits only in the low bits stays a NaN (not infinity).
  uint32_t low_nan = 0x7f800001;
  float f;
  std::memcpy(&f, &low_nan, 4);
  EXPECT_TRUE(IsNaN16(FloatToBf16Bits(f), true));
  EXPECT_TRUE(IsNaN16(FloatToF16Bits(f), false));
}

TEST(Half, FloatsComeBackWithinEachTypesPrecision) {
  std::mt19937 rng(7);
  std::normal_distribution<float> d(0.0f, 3.0f);
  std::vector<float> x(10007), y(x.size());
  std::vector<uint16_t> h(x.size());
  for (auto& v : x) v = d(rng);
  FloatToBf16(x.data(), h.data(), x.size());
  Bf16ToFloat(h.data(), y.data(), y.size());
  for (size_t i = 0; i < x.size(); ++i) EXPECT_LE(std::fabs(y[i] - x[i]), std::fabs(x[i]) * 0x1p-8f) << x[i];
  FloatToF16(x.data(), h.data(), x.size());
  F16ToFloat(h.data(), y.data(), y.size());
  for (size_t i = 0; i < x.size(); ++i)
    EXPECT_LE(std::fabs(y[i] - x[i]), std::max(std::fabs(x[i]) * 0x1p-11f, 0x1p-25f)) << x[i];
}

TEST(Half, TheBlockPathGivesThePortableBits) {
  // Lengths that leave every tail size, values across every range.
  std::mt19937 rng(11);
  std::uniform_int_distribution<uint32_t> bits;
  for (size_t n : {0, 1, 7, 8, 9, 15, 16, 17, 33, 1000}) {
    std::vector<float> x(n);
    for (auto& v : x) {
      const uint32_t u = bits(rng);
      std::memcpy(&v, &u, 4);
    }
    std::vector<uint16_t> b(n), f(n);
    FloatToBf16(x.data(), b.data(), n);
    FloatToF16(x.data(), f.data(), n);
    for (size_t i = 0; i < n; ++i) {
      EXPECT_EQ(b[i], FloatToBf16Bits(x[i])) << i;
      if (std::isnan(x[i]))
        EXPECT_TRUE(IsNaN16(f[i], false));
      else
        EXPECT_EQ(f[i], FloatToF16Bits(x[i])) << std::hexfloat << x[i];
    }
    std::vector<float> back(n);
    F16ToFloat(f.data(), back.data(), n);
    for (size_t i = 0; i < n; ++i)
      if (!IsNaN16(f[i], false)) EXPECT_EQ(back[i], F16BitsToFloat(f[i])) << i;
  }
  std::printf("half conversion path: %s\n", HalfConversionPath());
}

TEST(Half, StochasticBf16KeepsTheValueOnAverageAndNeverOverflows) {
  // 1 + 2^-10 lies 1/8 of the way from 1 to the next bf16 (1 + 2^-7): it
  // rounds up 1/8 of the time.
  const float x = 1.0f + std::ldexp(1.0f, -10);
  const int n = 40000;
  std::vector<float> in(n, x), back(n);
  std::vector<uint16_t> out(n);
  uint64_t state = 12345;
  FloatToBf16Stochastic(in.data(), out.data(), n, &state);
  Bf16ToFloat(out.data(), back.data(), n);
  int up = 0;
  double sum = 0;
  for (int i = 0; i < n; ++i) {
    ASSERT_TRUE(back[i] == 1.0f || back[i] == 1.0f + std::ldexp(1.0f, -7)) << back[i];
    up += back[i] > 1.0f;
    sum += back[i];
  }
  // Rounds up 1/8 of the time (binomial sd 66 of 5000; 8 sd either side).
  EXPECT_NEAR(up, n / 8, 530);
  EXPECT_NEAR(sum / n, x, 1e-4);
  EXPECT_EQ(FloatToBf16Bits(x), FloatToBf16Bits(1.0f)) << "round to nearest always loses it";
  // Negative values round their magnitude the same way.
  std::vector<float> neg(n, -x);
  FloatToBf16Stochastic(neg.data(), out.data(), n, &state);
  Bf16ToFloat(out.data(), back.data(), n);
  sum = 0;
  for (int i = 0; i < n; ++i) sum += back[i];
  EXPECT_NEAR(sum / n, -x, 1e-4);
  // Exact bf16 values, zeros, infinities and NaN come back as they are; the
  // largest floats stay finite.
  const float inf = std::numeric_limits<float>::infinity();
  const float specials[] = {0.0f, -0.0f, 1.0f, -2.5f, inf, -inf, std::numeric_limits<float>::max(),
                            -std::numeric_limits<float>::max(), std::nanf("")};
  for (float v : specials) {
    for (int k = 0; k < 64; ++k) {
      uint16_t h;
      FloatToBf16Stochastic(&v, &h, 1, &state);
      const float b = Bf16BitsToFloat(h);
      if (std::isnan(v)) {
        EXPECT_TRUE(std::isnan(b));
      } else if (std::isinf(v)) {
        EXPECT_EQ(b, v);
      } else if (std::fabs(v) == std::numeric_limits<float>::max()) {
        EXPECT_TRUE(std::isfinite(b)) << v;
        EXPECT_EQ(std::fabs(b), Bf16BitsToFloat(0x7f7f));
      } else {
        EXPECT_EQ(std::memcmp(&b, &v, 4), 0) << v;
      }
    }
  }
  // The same state gives the same bits.
  uint64_t s1 = 7, s2 = 7;
  std::vector<uint16_t> o1(33), o2(33);
  FloatToBf16Stochastic(in.data(), o1.data(), 33, &s1);
  FloatToBf16Stochastic(in.data(), o2.data(), 33, &s2);
  EXPECT_EQ(o1, o2);
  EXPECT_EQ(s1, s2);
}

}  // namespace
}  // namespace shardps
