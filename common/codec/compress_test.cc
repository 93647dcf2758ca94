#include "common/codec/compress.h"

#include <gtest/gtest.h>

#include <cmath>
#include <algorithm>
#include <cstring>
#include <random>
#include <vector>

namespace shardps::compress {
namespace {

std::vector<float> Decoded(Compression kind, const std::vector<uint8_t>& frame, size_t n) {
  std::vector<float> out(n, 123.0f);
  const Status s = Decode(kind, frame.data(), frame.size(), n, out.data());
  EXPECT_TRUE(s.ok()) << s.ToString();
  return out;
}

std::vector<uint8_t> Encoded(Compression kind, const std::vector<float>& g, std::vector<float>* residual, size_t k) {
  std::vector<uint8_t> frame(EncodedBytes(kind, g.size(), k));
  Encode(kind, g.data(), residual->data(), g.size(), k, frame.data());
  return frame;
}

TEST(Compress, TopKCountIsTheCeilingAtLeastOneAtMostAll) {
  EXPECT_EQ(TopKCount(1000, 0.01f), 10u);
  EXPECT_EQ(TopKCount(1001, 0.01f), 11u);
  EXPECT_EQ(TopKCount(10, 0.01f), 1u);
  EXPECT_EQ(TopKCount(10, 1.0f), 10u);
  EXPECT_EQ(TopKCount(0, 0.5f), 0u);
  EXPECT_EQ(EncodedBytes(Compression::kTopK, 1000, 10), 84u);
  EXPECT_EQ(EncodedBytes(Compression::kSign, 1000, 0), 129u);
  EXPECT_EQ(EncodedBytes(Compression::kSign, 9, 0), 6u);
}

TEST(Compress, TopKSendsTheLargestAndKeepsTheRestAsResidual) {
  const std::vector<float> g = {0.1f, -5.0f, 0.2f, 3.0f, -0.3f, 3.0f};
  std::vector<float> residual(g.size(), 0.0f);
  const auto frame = Encoded(Compression::kTopK, g, &residual, 3);
  const auto sent = Decoded(Compression::kTopK, frame, g.size());
  // -5 and both 3s (the tie at 3 is not broken: both are in the top 3).
  EXPECT_EQ(sent, (std::vector<float>{0, -5.0f, 0, 3.0f, 0, 3.0f}));
  EXPECT_EQ(residual, (std::vector<float>{0.1f, 0, 0.2f, 0, -0.3f, 0}));
  // A tie at the boundary goes to the lower index.
  std::vector<float> r2(4, 0.0f);
  const auto f2 = Encoded(Compression::kTopK, {1.0f, 2.0f, 1.0f, 1.0f}, &r2, 2);
  EXPECT_EQ(Decoded(Compression::kTopK, f2, 4), (std::vector<float>{1.0f, 2.0f, 0, 0}));
}

// The selection estimates its threshold from a sample: whatever the
// values, it must send exactly the k entries a full sort would (largest
// magnitude first, ties to the lower index) -- including when the sample
// sees only large values and too few reach its threshold.
TEST(Compress, TopKSendsWhatAFullSortWouldWhateverTheSampleSaw) {
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto check = [&](const std::vector<float>& g, size_t k) {
    std::vector<uint32_t> order(g.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::stable_sort(order.begin(), order.end(), [&](uint32_t a, uint32_t b) { return std::fabs(g[a]) > std::fabs(g[b]); });
    std::vector<float> want(g.size(), 0.0f);
    for (size_t j = 0; j < k; ++j) want[order[j]] = g[order[j]];
    std::vector<float> residual(g.size(), 0.0f);
    EXPECT_EQ(Decoded(Compression::kTopK, Encoded(Compression::kTopK, g, &residual, k), g.size()), want) << k;
  };
  std::vector<float> g(10000);
  for (float& x : g) x = normal(rng);
  for (size_t k : {1, 100, 5000, 9999, 10000}) check(g, k);
  // Large values exactly where the sample looks (every other entry), fewer than k.
  for (size_t i = 0; i < g.size(); ++i) g[i] = i % 2 == 0 && i <= 8190 ? 1.0f : 0.5f;
  check(g, 5000);
  // Spikes the sample misses, and ties.
  std::fill(g.begin(), g.end(), 0.25f);
  for (size_t i = 1; i < g.size(); i += 97) g[i] = -3.0f;
  check(g, 50);
  check(g, 200);
}

TEST(Compress, SignSendsTheMeanMagnitudeWithEachSign) {
  const std::vector<float> g = {1.0f, -3.0f, 0.0f, 2.0f, -2.0f, 4.0f, 1.0f, -1.0f, 4.0f};  // mean |g| = 2
  std::vector<float> residual(g.size(), 0.0f);
  const auto frame = Encoded(Compression::kSign, g, &residual, 0);
  ASSERT_EQ(frame.size(), 4u + 2u);
  const auto sent = Decoded(Compression::kSign, frame, g.size());
  for (size_t i = 0; i < g.size(); ++i) {
    EXPECT_EQ(sent[i], std::signbit(g[i]) ? -2.0f : 2.0f) << i;  // +0 counts as plus
    EXPECT_EQ(sent[i] + residual[i], g[i]) << i;
  }
  EXPECT_EQ(frame[4], 0b01101101);  // values 0..7: + - + + - + + -
  EXPECT_EQ(frame[5], 0b1);
}

// Error feedback's invariant: what was sent plus the residual is what was
// given, step by step and over many steps.
TEST(Compress, TheSentPartsPlusTheResidualAreTheSumOfTheGradients) {
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  for (Compression kind : {Compression::kTopK, Compression::kSign}) {
    SCOPED_TRACE(std::string(ToString(kind)));
    const size_t n = 1000, k = TopKCount(n, 0.01f);
    std::vector<float> residual(n, 0.0f);
    std::vector<double> given(n, 0.0), sent(n, 0.0);
    for (int step = 0; step < 200; ++step) {
      std::vector<float> g(n);
      for (float& x : g) x = normal(rng) * (1.0f + static_cast<float>(step % 5));
      const std::vector<float> before = residual;
      const auto out = Decoded(kind, Encoded(kind, g, &residual, k), n);
      for (size_t i = 0; i < n; ++i) {
        // This step: e = g + residual was split into what went and what stays.
        const float e = before[i] + g[i];
        ASSERT_NEAR(out[i] + residual[i], e, 1e-5f * (1.0f + std::fabs(e))) << "step " << step << " value " << i;
        given[i] += g[i];
        sent[i] += out[i];
      }
    }
    for (size_t i = 0; i < n; ++i) ASSERT_NEAR(sent[i] + residual[i], given[i], 1e-3 * (1 + std::fabs(given[i]))) << i;
  }
}

TEST(Compress, BadFramesAreRefusedSayingWhatIsWrong) {
  float out[8];
  std::vector<uint8_t> f(4 + 8 * 2);
  const uint32_t k = 2, idx[2] = {1, 9};
  const float v[2] = {1.0f, 2.0f};
  std::memcpy(f.data(), &k, 4);
  std::memcpy(f.data() + 4, idx, 8);
  std::memcpy(f.data() + 12, v, 8);
  Status s = Decode(Compression::kTopK, f.data(), f.size(), 8, out);
  EXPECT_EQ(s.code(), Code::kBadMessage);
  EXPECT_NE(s.message().find("top-k index 9 past the 8 values"), std::string::npos) << s.ToString();
  EXPECT_EQ(Check(Compression::kTopK, f.data(), f.size(), 8).message(), s.message());  // what a held push gets
  EXPECT_TRUE(Check(Compression::kTopK, f.data(), f.size(), 10).ok());
  s = Decode(Compression::kTopK, f.data(), f.size() - 1, 8, out);
  EXPECT_NE(s.message().find("announcing 2 values"), std::string::npos) << s.ToString();
  s = Decode(Compression::kTopK, f.data(), 3, 8, out);
  EXPECT_EQ(s.code(), Code::kBadMessage);
  const uint32_t many = 9;
  std::vector<uint8_t> big(4 + 8 * 9, 0);
  std::memcpy(big.data(), &many, 4);
  s = Decode(Compression::kTopK, big.data(), big.size(), 8, out);
  EXPECT_NE(s.message().find("9 values for a part of 8"), std::string::npos) << s.ToString();
  s = Decode(Compression::kSign, f.data(), 4, 8, out);
  EXPECT_NE(s.message().find("sign frame of 4 bytes for 8 values"), std::string::npos) << s.ToString();
  // A repeated index adds.
  const uint32_t same[2] = {3, 3};
  std::memcpy(f.data() + 4, same, 8);
  ASSERT_TRUE(Decode(Compression::kTopK, f.data(), f.size(), 8, out).ok());
  EXPECT_EQ(out[3], 3.0f);
  EXPECT_EQ(out[0], 0.0f);
}

}  // namespace
}  // namespace shardps::compress
