// Request splitting (request_split.h): a row range or a key list into
// per-server parts, their headers and frames, without sockets.
#include "client/request_split.h"

#include <gtest/gtest.h>

#include <numeric>
#include <vector>

#include "common/codec/half.h"
#include "tests/table_spec.h"

namespace shardps::detail {
namespace {

// 100 rows in 8 partitions: rows [0, 12) [12, 25) [25, 37) [37, 50) [50, 62)
// [62, 75) [75, 87) [87, 100); partitions 0-3 on server 0, 4-7 on server 1.
const TableSpec kDense = testing::Dense("w", 100, 2);
const ShardMap kTwoServers = ShardMap::Contiguous(8, 2, 1);
const TableSpec kSparse = testing::Sparse("e", 2);

std::vector<std::pair<uint64_t, uint64_t>> Rows(const std::vector<Part>& parts) {
  std::vector<std::pair<uint64_t, uint64_t>> out;
  for (const auto& p : parts) out.emplace_back(p.row_begin, p.row_end);
  return out;
}

using Ranges = std::vector<std::pair<uint64_t, uint64_t>>;

TEST(SplitRange, OnePartPerServerWhenMessagesMayBeLarge) {
  std::vector<Part> parts;
  ASSERT_TRUE(SplitRange(kDense, kTwoServers, {0, 100}, 200, false, 1 << 20, &parts).ok());
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(Rows(parts), (Ranges{{0, 50}, {50, 100}}));
  EXPECT_EQ(parts[0].server, 0u);
  EXPECT_EQ(parts[1].server, 1u);
  EXPECT_EQ(parts[0].offset, 0u);
  EXPECT_EQ(parts[0].floats, 100u);
  EXPECT_EQ(parts[1].offset, 100u);  // floats into the caller's array
  EXPECT_EQ(parts[1].floats, 100u);
  EXPECT_FALSE(parts[0].keyed);
}

TEST(SplitRange, CutsAtPartitionBoundariesInsideTheRange) {
  std::vector<Part> parts;
  ASSERT_TRUE(SplitRange(kDense, kTwoServers, {10, 60}, 100, true, 1 << 20, &parts).ok());
  EXPECT_EQ(Rows(parts), (Ranges{{10, 50}, {50, 60}}));
  EXPECT_EQ(parts[1].offset, 80u);
  EXPECT_EQ(parts[1].floats, 20u);
}

TEST(SplitRange, MergesNeighboursOnOneServerUpToMaxMessageBytes) {
  std::vector<Part> parts;
  // 25 rows x 2 cols x 4 bytes = 200: two partitions fit, three do not.
  ASSERT_TRUE(SplitRange(kDense, kTwoServers, {0, 100}, 200, false, 200, &parts).ok());
  EXPECT_EQ(Rows(parts), (Ranges{{0, 25}, {25, 50}, {50, 75}, {75, 100}}));
  ASSERT_TRUE(SplitRange(kDense, kTwoServers, {0, 100}, 200, false, 199, &parts).ok());
  EXPECT_EQ(parts.size(), 8u) << "no two partitions fit in 199 bytes";
}

TEST(SplitRange, NeverSplitsAPartitionNorMergesAcrossServers) {
  std::vector<Part> parts;
  ASSERT_TRUE(SplitRange(kDense, kTwoServers, {0, 100}, 200, false, 8, &parts).ok());
  EXPECT_EQ(Rows(parts), (Ranges{{0, 12}, {12, 25}, {25, 37}, {37, 50}, {50, 62}, {62, 75}, {75, 87}, {87, 100}}));
  ShardMap alternating;
  alternating.owner = {0, 1, 0, 1, 0, 1, 0, 1};
  ASSERT_TRUE(SplitRange(kDense, alternating, {0, 100}, 200, false, 1 << 20, &parts).ok());
  ASSERT_EQ(parts.size(), 8u);
  for (size_t i = 0; i < parts.size(); ++i) EXPECT_EQ(parts[i].server, i % 2);
}

TEST(SplitRange, RefusesSparseTablesBadRowsAndWrongSizes) {
  std::vector<Part> parts;
  EXPECT_EQ(SplitRange(testing::Sparse("e", 2), kTwoServers, {0, 10}, 20, false, 1 << 20, &parts).code(),
            Code::kInvalidArgument);
  EXPECT_EQ(SplitRange(kDense, kTwoServers, {5, 5}, 0, false, 1 << 20, &parts).code(), Code::kOutOfRange);
  EXPECT_EQ(SplitRange(kDense, kTwoServers, {90, 101}, 22, false, 1 << 20, &parts).code(), Code::kOutOfRange);
  Status s = SplitRange(kDense, kTwoServers, {0, 100}, 3, true, 1 << 20, &parts);
  EXPECT_EQ(s.code(), Code::kSizeMismatch);
  EXPECT_EQ(s.message(), "gradient array has 3 floats, rows [0, 100) x 2 cols need 200");
  s = SplitRange(kDense, kTwoServers, {0, 1}, 3, false, 1 << 20, &parts);
  EXPECT_EQ(s.message(), "output array has 3 floats, rows [0, 1) x 2 cols need 2");
  EXPECT_TRUE(parts.empty());
}

TEST(SplitKeys, KeysOfOneServerMakeOnePartSentAsTheyAre) {
  std::vector<uint64_t> keys = {49, 3, 3, 0};  // all on server 0
  std::vector<Part> parts;
  ASSERT_TRUE(SplitKeys(kDense, kTwoServers, keys, 8, true, &parts).ok());
  ASSERT_EQ(parts.size(), 1u);
  EXPECT_EQ(parts[0].server, 0u);
  EXPECT_TRUE(parts[0].keyed);
  EXPECT_EQ(parts[0].key_count, 4u);
  EXPECT_TRUE(parts[0].positions.empty());
  EXPECT_EQ(parts[0].offset, 0u);
  EXPECT_EQ(parts[0].floats, 8u);
}

TEST(SplitKeys, GroupsKeysByServerWithTheirPositions) {
  std::vector<uint64_t> keys = {99, 0, 50, 49, 7};
  std::vector<Part> parts;
  ASSERT_TRUE(SplitKeys(kDense, kTwoServers, keys, 10, false, &parts).ok());
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].server, 0u);
  EXPECT_EQ(parts[0].positions, (std::vector<uint32_t>{1, 3, 4}));
  EXPECT_EQ(parts[0].key_count, 3u);
  EXPECT_EQ(parts[1].server, 1u);
  EXPECT_EQ(parts[1].positions, (std::vector<uint32_t>{0, 2}));
}

TEST(SplitKeys, SparseIdsGoToTheOwnerOfTheirHashedPartition) {
  const TableSpec sparse = testing::Sparse("e", 4);
  std::vector<uint64_t> keys(200);
  std::iota(keys.begin(), keys.end(), 1000);
  std::vector<Part> parts;
  ASSERT_TRUE(SplitKeys(sparse, kTwoServers, keys, keys.size() * 4, true, &parts).ok());
  ASSERT_EQ(parts.size(), 2u);
  size_t total = 0;
  for (const Part& p : parts) {
    total += p.positions.size();
    for (uint32_t i : p.positions) EXPECT_EQ(kTwoServers.owner[PartitionOfId(keys[i], 8)], p.server);
  }
  EXPECT_EQ(total, keys.size());
}

TEST(SplitKeys, RefusesDenseRowIdsPastTheTableAndWrongSizes) {
  std::vector<uint64_t> keys = {1, 2, 100};
  std::vector<Part> parts;
  Status s = SplitKeys(kDense, kTwoServers, keys, 6, false, &parts);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  EXPECT_EQ(s.message(), "row id 100 (key 2) is outside table 'w' with 100 rows");
  s = SplitKeys(kDense, kTwoServers, keys, 5, true, &parts);
  EXPECT_EQ(s.message(), "gradient array has 5 floats, 3 keys x 2 cols need 6");
  // Sparse ids are any uint64.
  keys = {~0ull};
  EXPECT_TRUE(SplitKeys(testing::Sparse("e", 2), kTwoServers, keys, 2, false, &parts).ok());
  ASSERT_TRUE(SplitKeys(kDense, kTwoServers, {}, 0, false, &parts).ok());
  EXPECT_TRUE(parts.empty());
}

TEST(PartFields, OneHeaderForRangeAndKeyParts) {
  DataHeader h;
  h.push = true;
  h.role = wire::Role::Worker;
  h.rank = 3;
  h.table = 7;
  h.clock = 12;
  h.steps = 2;
  Part range;
  range.row_begin = 10;
  range.row_end = 20;
  const std::vector<uint64_t> bases = {5, 6};
  wire::Fields f = PartFields(h, range, bases);
  EXPECT_EQ(f.type, wire::MsgType::Push);
  EXPECT_EQ(f.role, wire::Role::Worker);
  EXPECT_EQ(f.rank, 3);
  EXPECT_EQ(f.table, 7u);
  EXPECT_EQ(f.clock, 12);
  EXPECT_EQ(f.steps, 2u);
  EXPECT_EQ(f.row_begin, 10u);
  EXPECT_EQ(f.row_end, 20u);
  EXPECT_EQ(f.key_count, 0u);
  EXPECT_EQ(f.base_versions.size(), 2u);
  Part keys;
  keys.keyed = true;
  keys.key_count = 9;
  h.push = false;
  f = PartFields(h, keys, bases);
  EXPECT_EQ(f.type, wire::MsgType::Pull);
  EXPECT_EQ(f.key_count, 9u);
  EXPECT_EQ(f.row_end, 0u);
  EXPECT_TRUE(f.base_versions.empty()) << "a pull names no base versions";
}

TEST(RequestClock, AheadAndThePreviousClock) {
  EXPECT_EQ(RequestClock(5, 0), 5);
  EXPECT_EQ(RequestClock(5, 1), 6);
  EXPECT_EQ(RequestClock(5, kPreviousClock), 4);
  EXPECT_EQ(RequestClock(0, kPreviousClock), 0);
}

TEST(BasesFor, AServersVersionPerStepOrNoneWhenOneIsUnknown) {
  auto a = std::make_shared<const std::vector<uint64_t>>(std::vector<uint64_t>{10, kNoVersion});
  auto b = std::make_shared<const std::vector<uint64_t>>(std::vector<uint64_t>{11, 21});
  EXPECT_EQ(BasesFor({a, b}, 0), (std::vector<uint64_t>{10, 11}));
  EXPECT_TRUE(BasesFor({a, b}, 1).empty()) << "server 1 was not read by step 0's pull";
  EXPECT_TRUE(BasesFor({b, nullptr}, 0).empty());
  EXPECT_TRUE(BasesFor({b}, 2).empty());
  EXPECT_EQ(BasesFor({b}, 1), (std::vector<uint64_t>{21}));
}

TEST(PartFrames, BorrowsLargeArraysCopiesSmallOnesAndGathersScatteredKeys) {
  auto call = std::make_shared<Call>();
  std::vector<float> grads(200, 1.0f);
  Payload pl;
  pl.push = true;
  pl.cols = 2;
  pl.values = grads.data();
  std::vector<Part> parts;
  ASSERT_TRUE(SplitRange(kDense, kTwoServers, {0, 100}, 200, true, 1 << 20, &parts).ok());
  auto frames = PartFrames(pl, parts[1], call);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].size(), 400u);
  EXPECT_NE(frames[0].data(), grads.data() + 100) << "400 bytes are copied";

  const TableSpec big = testing::Dense("big", 4096, 2);
  ASSERT_TRUE(SplitRange(big, kTwoServers, {0, 4096}, 8192, true, 1 << 20, &parts).ok());
  std::vector<float> big_grads(8192);
  pl.values = big_grads.data();
  frames = PartFrames(pl, parts[1], call);
  ASSERT_EQ(frames.size(), 1u);
  EXPECT_EQ(frames[0].data(), big_grads.data() + 4096) << "16 KiB are sent from the caller's array";
  {
    std::lock_guard<std::mutex> lock(call->mu);
    EXPECT_EQ(call->frees_left, 1);
  }
  frames.clear();  // ZeroMQ lets go of it
  {
    std::lock_guard<std::mutex> lock(call->mu);
    EXPECT_EQ(call->frees_left, 0);
  }

  std::vector<uint64_t> keys = {99, 0, 50};
  std::vector<float> key_grads = {9, 9.5, 0, 0.5, 5, 5.5};
  pl.values = key_grads.data();
  pl.keys = keys;
  ASSERT_TRUE(SplitKeys(kDense, kTwoServers, keys, 6, true, &parts).ok());
  frames = PartFrames(pl, parts[1], call);  // server 1: keys 99 and 50
  ASSERT_EQ(frames.size(), 2u);
  const auto* k = static_cast<const uint64_t*>(frames[0].data());
  const auto* v = static_cast<const float*>(frames[1].data());
  ASSERT_EQ(frames[0].size(), 16u);
  EXPECT_EQ(k[0], 99u);
  EXPECT_EQ(k[1], 50u);
  ASSERT_EQ(frames[1].size(), 16u);
  EXPECT_EQ(std::vector<float>(v, v + 4), (std::vector<float>{9, 9.5, 5, 5.5}));

  pl.push = false;
  frames = PartFrames(pl, parts[1], call);
  EXPECT_EQ(frames.size(), 1u) << "a keys pull sends its keys only";
  pl.keys = {};
  ASSERT_TRUE(SplitRange(kDense, kTwoServers, {0, 100}, 200, false, 1 << 20, &parts).ok());
  EXPECT_TRUE(PartFrames(pl, parts[0], call).empty()) << "a range pull is its header";
}

TEST(PartFrames, OneFramePerStepOfAPushSteps) {
  auto call = std::make_shared<Call>();
  std::vector<float> g0(200, 1.0f), g1(200, 2.0f);
  const PushStep steps[] = {{g0, {}}, {g1, {}}};
  Payload pl;
  pl.push = true;
  pl.cols = 2;
  pl.values = g0.data();
  pl.steps = steps;
  std::vector<Part> parts;
  ASSERT_TRUE(SplitRange(kDense, kTwoServers, {0, 100}, 200, true, 1 << 20, &parts).ok());
  auto frames = PartFrames(pl, parts[1], call);
  ASSERT_EQ(frames.size(), 2u);
  EXPECT_EQ(static_cast<const float*>(frames[0].data())[0], 1.0f);
  EXPECT_EQ(static_cast<const float*>(frames[1].data())[0], 2.0f);
  EXPECT_EQ(frames[1].size(), 400u);
}

// A keys pull over two servers: each server's reply (its rows in the order
// of its part's keys) lands at the keys' places in the caller's array.
TEST(PullDest, ScattersEachServersReplyBackToTheKeysPositions) {
  std::vector<uint64_t> keys = {99, 0, 50, 49, 7};
  std::vector<float> out(keys.size() * 2, -1.0f);
  Payload pl;
  pl.cols = 2;
  pl.values = out.data();
  pl.keys = keys;
  std::vector<Part> parts;
  ASSERT_TRUE(SplitKeys(kDense, kTwoServers, keys, out.size(), false, &parts).ok());
  for (Part& p : parts) {
    std::vector<float> rows;
    for (uint32_t i : p.positions) rows.insert(rows.end(), {keys[i] * 10.0f, keys[i] * 10.0f + 1});
    Dest d = PullDest(pl, p);
    EXPECT_TRUE(d.clocks);
    std::vector<zmq::message_t> reply;
    reply.emplace_back(0);
    reply.emplace_back(rows.data(), rows.size() * 4);
    ASSERT_TRUE(PlaceValues(d, reply, "server").ok());
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(out[2 * i], keys[i] * 10.0f) << "key " << i;
    EXPECT_EQ(out[2 * i + 1], keys[i] * 10.0f + 1) << "key " << i;
  }
}

TEST(PullDest, RangePartsWriteAtTheirOffsetOrIntoTheView) {
  std::vector<float> out(200);
  Payload pl;
  pl.cols = 2;
  pl.values = out.data();
  std::vector<Part> parts;
  ASSERT_TRUE(SplitRange(kDense, kTwoServers, {0, 100}, 200, false, 1 << 20, &parts).ok());
  Dest d = PullDest(pl, parts[1]);
  EXPECT_EQ(d.out, out.data() + 100);
  EXPECT_EQ(d.floats, 100u);
  pl.values = nullptr;
  pl.view = std::make_shared<PulledFrames>();
  d = PullDest(pl, parts[1]);
  EXPECT_EQ(d.out, nullptr);
  EXPECT_EQ(d.view, pl.view);
  EXPECT_EQ(d.view_offset, 100u);
  EXPECT_EQ(d.floats, 100u) << "the reply's size is checked against the part's rows";
}

TEST(PlanKeys, EachKeyOnceWithEveryPlaceOfIt) {
  const std::vector<uint64_t> keys = {7, 3, 7, 9, 3, 7};
  const KeyPlan plan = PlanKeys(keys);
  EXPECT_EQ(plan.unique, (std::vector<uint64_t>{7, 3, 9}));
  EXPECT_EQ(plan.offsets, (std::vector<uint32_t>{0, 3, 5, 6}));
  EXPECT_EQ(plan.positions, (std::vector<uint32_t>{0, 2, 5, 1, 4, 3}));
  EXPECT_TRUE(plan.repeats());
  EXPECT_FALSE(PlanKeys(std::vector<uint64_t>{1, 2, 3}).repeats());
  EXPECT_TRUE(PlanKeys(std::vector<uint64_t>{}).unique.empty());
  // Many keys: the table grows, every key found again.
  std::vector<uint64_t> many;
  for (uint64_t i = 0; i < 5000; ++i) many.push_back((i % 1700) * 0x9e3779b97f4a7c15ull);
  const KeyPlan big = PlanKeys(many);
  ASSERT_EQ(big.unique.size(), 1700u);
  for (size_t u = 0; u < big.unique.size(); ++u)
    for (uint32_t k = big.offsets[u]; k < big.offsets[u + 1]; ++k) ASSERT_EQ(many[big.positions[k]], big.unique[u]);
}

TEST(SumRows, ARepeatedKeysGradientsAreSummedInPlaceOrder) {
  const std::vector<uint64_t> keys = {5, 6, 5};
  const KeyPlan plan = PlanKeys(keys);
  const std::vector<float> rows = {1, 2, 10, 20, 100, 200};
  std::vector<float> out(4);
  SumRows(plan, rows.data(), 2, out.data());
  EXPECT_EQ(out, (std::vector<float>{101, 202, 10, 20}));
}

// A pull of a key list with repeats, sent once per key to two servers in
// bf16, fills every place of every key with the value converted once.
TEST(PullDest, OneReplyRowFillsEveryPlaceOfItsKeyConvertedFromItsDtype) {
  const std::vector<uint64_t> keys = {4, 11, 4, 2, 11, 4};
  const KeyPlan plan = PlanKeys(keys);
  std::vector<float> out(keys.size() * 2, -1.0f);
  Payload pl;
  pl.cols = 2;
  pl.dtype = DType::kBF16;
  pl.plan = &plan;
  pl.values = out.data();
  std::vector<Part> parts;
  ASSERT_TRUE(SplitKeys(kSparse, kTwoServers, plan.unique, plan.unique.size() * 2, false, &parts).ok());
  for (Part& p : parts) {
    std::vector<uint64_t> asked = p.positions.empty() ? plan.unique : std::vector<uint64_t>{};
    for (uint32_t u : p.positions) asked.push_back(plan.unique[u]);
    Dest d = PullDest(pl, p);
    std::vector<uint16_t> bf(asked.size() * 2);
    for (size_t i = 0; i < asked.size(); ++i) {
      bf[2 * i] = FloatToBf16Bits(static_cast<float>(asked[i]) * 0.5f);
      bf[2 * i + 1] = FloatToBf16Bits(-static_cast<float>(asked[i]));
    }
    std::vector<zmq::message_t> reply;
    reply.emplace_back();
    reply.emplace_back(bf.data(), bf.size() * 2);
    ASSERT_TRUE(PlaceValues(d, reply, "server").ok());
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    EXPECT_EQ(out[2 * i], static_cast<float>(keys[i]) * 0.5f) << i;
    EXPECT_EQ(out[2 * i + 1], -static_cast<float>(keys[i])) << i;
  }
}

TEST(GatherRowsAs, SixteenBitFramesHoldTheRoundedRows) {
  const std::vector<float> rows = {1.0f, 1.0f + 0x1p-9f, -3.5f, 65504.0f};
  const zmq::message_t all = GatherRowsAs(rows.data(), 2, {}, 2, DType::kF16);
  ASSERT_EQ(all.size(), 8u);
  const auto* h = static_cast<const uint16_t*>(all.data());
  EXPECT_EQ(h[0], FloatToF16Bits(1.0f));
  EXPECT_EQ(h[3], FloatToF16Bits(65504.0f));
  const zmq::message_t second = GatherRowsAs(rows.data(), 2, {1}, 2, DType::kBF16);
  ASSERT_EQ(second.size(), 4u);
  EXPECT_EQ(static_cast<const uint16_t*>(second.data())[0], FloatToBf16Bits(-3.5f));
}

}  // namespace
}  // namespace shardps::detail
