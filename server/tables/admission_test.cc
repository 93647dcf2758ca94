// AdmissionSketch (server/tables/admission.h): an id's k-th push is seen as its
// k-th, never later; estimates stay close for a realistic mix; counts age;
// the bytes round-trip.
#include "server/tables/admission.h"

#include <gtest/gtest.h>

#include <random>
#include <unordered_map>

namespace shardps {
namespace {

TEST(AdmissionSketch, CountsEachIdsPushesAndNeverUndercounts) {
  AdmissionSketch s(1 << 14);
  std::unordered_map<uint64_t, uint32_t> truth;
  std::mt19937_64 rng(2);
  // A mix of a few hot ids and many rare ones, fewer pushes than the
  // ageing threshold (the width), so nothing is halved yet.
  for (int i = 0; i < 16000; ++i) {
    const uint64_t id = rng() % 10 == 0 ? rng() % 50 : rng() % 20000;
    const uint32_t est = s.Add(id);
    const uint32_t t = std::min<uint32_t>(++truth[id], 255);
    ASSERT_GE(est, t) << id;
  }
  size_t exact = 0;
  for (const auto& [id, n] : truth) exact += s.Estimate(id) == std::min<uint32_t>(n, 255);
  EXPECT_GT(static_cast<double>(exact) / truth.size(), 0.9);  // conservative updates keep most exact
}

TEST(AdmissionSketch, TheKthPushIsSeenAsTheKth) {
  AdmissionSketch s;
  for (uint32_t k = 1; k <= 5; ++k) EXPECT_EQ(s.Add(77), k);
  EXPECT_EQ(s.Estimate(77), 5u);
  EXPECT_EQ(s.Estimate(78), 0u);
}

TEST(AdmissionSketch, CountsAgeAndSaturate) {
  AdmissionSketch s(128);  // ages after 128 pushes
  for (int i = 0; i < 100; ++i) s.Add(1);
  EXPECT_EQ(s.Estimate(1), 100u);
  for (int i = 0; i < 28; ++i) s.Add(1000 + i);
  EXPECT_LE(s.Estimate(1), 50u);  // halved
  AdmissionSketch big(1024);
  for (int i = 0; i < 300; ++i) big.Add(5);
  EXPECT_EQ(big.Estimate(5), 255u);
}

TEST(AdmissionSketch, SerializesAndRefusesOtherBytes) {
  AdmissionSketch s(1 << 10);
  for (uint64_t i = 0; i < 500; ++i) s.Add(i % 37);
  AdmissionSketch t(8);
  ASSERT_TRUE(t.Deserialize(s.Serialize()));
  EXPECT_EQ(t.width(), s.width());
  for (uint64_t i = 0; i < 37; ++i) EXPECT_EQ(t.Estimate(i), s.Estimate(i));
  EXPECT_FALSE(t.Deserialize("nonsense"));
  std::string cut = s.Serialize();
  cut.pop_back();
  EXPECT_FALSE(t.Deserialize(cut));
  EXPECT_EQ(t.Estimate(3), s.Estimate(3));  // unchanged by a refused input
}

}  // namespace
}  // namespace shardps
