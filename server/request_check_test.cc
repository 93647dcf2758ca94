#include "server/request_check.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "common/cluster/partition.h"
#include "common/codec/wire.h"
#include "server/tables/table_set.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

// One server holding every partition of a dense table (id 0: 100 x 2) and
// a sparse one (id 1: 2 columns, at most 4 rows); requests of at most 4 KiB.
class RequestCheckTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ClusterView v;
    v.num_servers = 1;
    v.map = ShardMap::Contiguous(4, 1, 1);
    v.tables = {testing::Dense("w", 100, 2), testing::Sparse("e", 2).MaxRows(4)};
    v.tables[1].id = 1;
    ASSERT_TRUE(tables_.Define(v, 0).ok());
  }

  // A request's frames: identity, header (`f`), then `payload`.
  std::vector<zmq::message_t> Request(wire::Fields f, std::vector<zmq::message_t> payload) {
    std::vector<zmq::message_t> frames;
    frames.emplace_back("peer", 4);
    frames.push_back(wire::EncodeSimple(fbb_, f));
    for (auto& p : payload) frames.push_back(std::move(p));
    return frames;
  }
  static wire::Fields Push(uint64_t begin, uint64_t end) {
    wire::Fields f;
    f.type = wire::MsgType::Push;
    f.role = wire::Role::Worker;
    f.rank = 0;
    f.row_begin = begin;
    f.row_end = end;
    return f;
  }
  static zmq::message_t Floats(size_t n, float v = 0.5f) {
    std::vector<float> x(n, v);
    return zmq::message_t(x.data(), x.size() * sizeof(float));
  }
  static zmq::message_t Keys(std::vector<uint64_t> keys) {
    return zmq::message_t(keys.data(), keys.size() * sizeof(uint64_t));
  }
  Status Check(std::vector<zmq::message_t>& frames, bool push) {
    const wire::Header* h = nullptr;
    Status s = wire::ParseHeader(frames[1], scratch_, &h);
    if (!s.ok()) return s;
    return check_.Check(*h, frames, push, &t_, &keys_, values_);
  }

  TableSet tables_{1 << 20};
  RequestCheck check_{tables_, 4096};
  flatbuffers::FlatBufferBuilder fbb_;
  std::vector<uint64_t> scratch_;
  ServerTable* t_ = nullptr;
  const uint64_t* keys_ = nullptr;
  const float* values_[kMaxPushSteps] = {};
};

// 16-bit transfer (TableSpec::wire_dtype): a dense push names its values'
// type in the header; each frame must be of that type's size, and is read
// as float32 (bf16: its bits are the top half of the float).
TEST_F(RequestCheckTest, ADensePushInBf16IsSizedAndReadAsItsType) {
  wire::Fields f = Push(10, 12);
  f.values.dtype = wire::DType::BF16;
  std::vector<uint16_t> h = {0x3fc0, 0xc000, 0x0001, 0x7f80};  // 1.5, -2, the smallest subnormal, +inf
  std::vector<zmq::message_t> payload;
  payload.emplace_back(h.data(), h.size() * 2);
  auto frames = Request(f, std::move(payload));
  ASSERT_TRUE(Check(frames, true).ok());
  EXPECT_EQ(values_[0][0], 1.5f);
  EXPECT_EQ(values_[0][1], -2.0f);
  EXPECT_GT(values_[0][2], 0.0f);
  EXPECT_TRUE(std::isinf(values_[0][3]));
  // float32-sized values under a bf16 header: refused, naming the sizes.
  std::vector<zmq::message_t> wrong;
  wrong.push_back(Floats(4));
  frames = Request(f, std::move(wrong));
  const Status s = Check(frames, true);
  EXPECT_EQ(s.code(), Code::kSizeMismatch) << s.ToString();
  EXPECT_NE(s.message().find("values frame has 16 bytes, the header announces 8"), std::string::npos) << s.ToString();
}

TEST_F(RequestCheckTest, AnUnknownValueTypeOrOneNamedForASparseTableIsRefused) {
  wire::Fields f = Push(10, 12);
  f.values.dtype = static_cast<wire::DType>(9);
  std::vector<zmq::message_t> payload;
  payload.push_back(Floats(4));
  auto frames = Request(f, std::move(payload));
  Status s = Check(frames, true);
  EXPECT_EQ(s.code(), Code::kBadMessage) << s.ToString();
  wire::Fields k;
  k.type = wire::MsgType::Pull;
  k.table = 1;
  k.key_count = 1;
  k.values.dtype = wire::DType::BF16;
  std::vector<zmq::message_t> keys;
  keys.push_back(Keys({7}));
  frames = Request(k, std::move(keys));
  s = Check(frames, false);
  EXPECT_EQ(s.code(), Code::kBadMessage) << s.ToString();
  EXPECT_NE(s.message().find("sparse table 'e'"), std::string::npos) << s.ToString();
}

TEST_F(RequestCheckTest, AValidPushPointsAtItsTableAndEachStepsGradients) {
  wire::Fields f = Push(10, 12);
  f.steps = 2;
  std::vector<zmq::message_t> payload;
  payload.push_back(Floats(4, 1.5f));
  payload.push_back(Floats(4, -2.0f));
  auto frames = Request(f, std::move(payload));
  ASSERT_TRUE(Check(frames, true).ok());
  EXPECT_EQ(t_, tables_.get(0));
  EXPECT_EQ(keys_, nullptr);
  EXPECT_EQ(values_[0], static_cast<const float*>(frames[2].data()));  // in place, no copy
  EXPECT_EQ(values_[1][3], -2.0f);
}

TEST_F(RequestCheckTest, AMisalignedFrameIsReadThroughScratch) {
  alignas(8) static char buf[4 * sizeof(float) + 1];
  const float want[4] = {1, 2, 3, 4};
  std::memcpy(buf + 1, want, sizeof(want));
  std::vector<zmq::message_t> payload;
  payload.emplace_back(buf + 1, sizeof(want), nullptr, nullptr);  // zero-copy, at an odd address
  auto frames = Request(Push(0, 2), std::move(payload));
  ASSERT_TRUE(Check(frames, true).ok());
  EXPECT_NE(values_[0], reinterpret_cast<const float*>(buf + 1));
  for (int i = 0; i < 4; ++i) EXPECT_EQ(values_[0][i], want[i]);
}

TEST_F(RequestCheckTest, FramesMustBeTheOnesTheHeaderAnnounces) {
  auto frames = Request(Push(0, 2), {});
  Status s = Check(frames, true);
  EXPECT_EQ(s.code(), Code::kBadMessage);
  EXPECT_EQ(s.message(), "push by row range takes 2 frames, got 1");
  std::vector<zmq::message_t> payload;
  payload.push_back(Floats(3));
  frames = Request(Push(0, 2), std::move(payload));
  EXPECT_EQ(Check(frames, true).code(), Code::kSizeMismatch);
  wire::Fields f = Push(0, 2);
  f.type = wire::MsgType::Pull;
  f.steps = 2;
  frames = Request(f, {});
  s = Check(frames, false);
  EXPECT_EQ(s.code(), Code::kBadMessage);
  EXPECT_EQ(s.message(), "a pull carries no steps or base versions");
  f = Push(0, 2);
  f.steps = kMaxPushSteps + 1;
  frames = Request(f, {});
  EXPECT_EQ(Check(frames, true).code(), Code::kTooLarge);
  const uint64_t versions[] = {1, 2, 3};
  f = Push(0, 2);
  f.steps = 2;
  f.base_versions = versions;
  frames = Request(f, {});
  s = Check(frames, true);
  EXPECT_EQ(s.code(), Code::kBadMessage);
  EXPECT_EQ(s.message(), "a push of 2 steps with 3 base versions");
}

TEST_F(RequestCheckTest, RowsMustBeTheTablesAndWithinTheRequestLimit) {
  auto frames = Request(Push(5, 5), {});
  Status s = Check(frames, false);
  EXPECT_EQ(s.code(), Code::kOutOfRange);
  EXPECT_EQ(s.message(), "empty or inverted row range [5, 5)");
  frames = Request(Push(90, 101), {});
  EXPECT_EQ(Check(frames, false).code(), Code::kOutOfRange);
  // 4096 bytes / 4 / 2 columns: 512 rows at most.
  ClusterView v;
  v.map = ShardMap::Contiguous(4, 1, 1);
  v.tables = {testing::Dense("w", 100, 2), testing::Sparse("e", 2).MaxRows(4), testing::Dense("big", 1000, 2)};
  v.tables[1].id = 1;
  v.tables[2].id = 2;
  ASSERT_TRUE(tables_.Define(v, 0).ok());
  wire::Fields f = Push(0, 513);
  f.table = 2;
  frames = Request(f, {});
  s = Check(frames, false);
  EXPECT_EQ(s.code(), Code::kTooLarge);
  EXPECT_EQ(s.message(), "513 rows exceed the request limit of 4096 bytes");
}

TEST_F(RequestCheckTest, TheTableMustBeHeld) {
  wire::Fields f = Push(0, 1);
  f.table = 7;
  auto frames = Request(f, {});
  Status s = Check(frames, false);
  EXPECT_EQ(s.code(), Code::kUnknownTable);
  EXPECT_EQ(s.message(), "table id 7 is not defined (2 tables exist)");
  TableSet none(1 << 20);
  RequestCheck early(none, 4096);
  const wire::Header* h = nullptr;
  ASSERT_TRUE(wire::ParseHeader(frames[1], scratch_, &h).ok());
  s = early.Check(*h, frames, false, &t_, &keys_, values_);
  EXPECT_EQ(s.code(), Code::kNotReady);
  EXPECT_EQ(s.message(), "server has no shard map yet");
}

TEST_F(RequestCheckTest, SparseRowsAreCreatedOnlyByPushesWithinTheTablesShare) {
  wire::Fields f;
  f.type = wire::MsgType::Pull;
  f.role = wire::Role::Worker;
  f.table = 1;
  f.key_count = 5;
  std::vector<zmq::message_t> payload;
  payload.push_back(Keys({1, 2, 3, 4, 5}));
  auto frames = Request(f, std::move(payload));
  ASSERT_TRUE(Check(frames, false).ok());  // a pull reads, creates nothing: any number of unknown ids
  EXPECT_EQ(keys_[4], 5u);
  // A push of five new ids would pass the share (4 of max_rows 4).
  wire::Fields p = f;
  p.type = wire::MsgType::Push;
  payload.clear();
  payload.push_back(Keys({1, 2, 3, 4, 5}));
  payload.emplace_back(5 * 2 * sizeof(float));
  frames = Request(p, std::move(payload));
  Status s = Check(frames, true);
  EXPECT_EQ(s.code(), Code::kTooLarge);
  EXPECT_EQ(s.message(), "sparse table 'e' holds 0 rows on server 0; 5 new ids would pass its share (4) of max_rows 4");
  // A keys frame of the wrong size.
  payload.clear();
  payload.push_back(Keys({1, 2}));
  frames = Request(f, std::move(payload));
  EXPECT_EQ(Check(frames, false).code(), Code::kSizeMismatch);
}


// Replicas: a server holding two replica groups (every partition) takes a
// request only for the group it names (the rows or ids must be of it), and
// a backup applying what its primary took is not refused for its own
// budget (`trusted`).
TEST(RequestCheckGroups, RowsAndIdsMustBeOfTheGroupNamedAndABackupIsNotRefusedForGrowth) {
  ClusterView v;
  v.num_servers = 2;
  v.map = ShardMap::Replicated(4, 2, 2, {}, 1);  // group 0: partitions 0-1, group 1: 2-3; server 0 holds both
  v.tables = {testing::Dense("w", 100, 2), testing::Sparse("e", 2).MaxRows(2)};
  v.tables[1].id = 1;
  TableSet tables(1 << 20);
  ASSERT_TRUE(tables.Define(v, 0).ok());
  RequestCheck check(tables, 1 << 20);
  check.SetGroups(&v.map.group);
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<uint64_t> scratch;
  ServerTable* t = nullptr;
  const uint64_t* keys = nullptr;
  const float* values[kMaxPushSteps] = {};
  auto check_push = [&](wire::Fields f, std::vector<zmq::message_t> payload, uint32_t group, bool trusted) {
    std::vector<zmq::message_t> frames;
    frames.emplace_back("peer", 4);
    frames.push_back(wire::EncodeSimple(fbb, f));
    for (auto& p : payload) frames.push_back(std::move(p));
    const wire::Header* h = nullptr;
    EXPECT_TRUE(wire::ParseHeader(frames[1], scratch, &h).ok());
    return check.Check(*h, frames, true, &t, &keys, values, group, trusted);
  };
  auto rows = [](uint64_t b, uint64_t e) {
    wire::Fields f;
    f.type = wire::MsgType::Push;
    f.role = wire::Role::Worker;
    f.row_begin = b;
    f.row_end = e;
    return f;
  };
  auto floats = [](size_t n) { return zmq::message_t(std::vector<float>(n, 0.5f).data(), n * sizeof(float)); };
  std::vector<zmq::message_t> p;
  p.push_back(floats(20));
  EXPECT_TRUE(check_push(rows(60, 70), std::move(p), 1, false).ok());  // rows 60-69: partitions 2: group 1
  p.clear();
  p.push_back(floats(20));
  Status s = check_push(rows(60, 70), std::move(p), 0, false);
  EXPECT_EQ(s.code(), Code::kWrongServer) << s.ToString();
  EXPECT_NE(s.message().find("is in group 1, not in group 0"), std::string::npos) << s.ToString();
  p.clear();
  p.push_back(floats(40));
  s = check_push(rows(40, 60), std::move(p), 0, false);  // partitions 1 and 2: two groups
  EXPECT_EQ(s.code(), Code::kWrongServer) << s.ToString();
  // Ids of group 0 only (found by their partitions), three new ones past max_rows 2.
  std::vector<uint64_t> ids;
  for (uint64_t id = 0; ids.size() < 3; ++id)
    if (v.map.group[PartitionOfId(id, 4)] == 0) ids.push_back(id);
  wire::Fields f;
  f.type = wire::MsgType::Push;
  f.role = wire::Role::Worker;
  f.table = 1;
  f.key_count = ids.size();
  p.clear();
  p.emplace_back(ids.data(), ids.size() * sizeof(uint64_t));
  p.push_back(floats(6));
  s = check_push(f, std::move(p), 0, false);
  EXPECT_EQ(s.code(), Code::kTooLarge) << s.ToString();
  p.clear();
  p.emplace_back(ids.data(), ids.size() * sizeof(uint64_t));
  p.push_back(floats(6));
  EXPECT_TRUE(check_push(f, std::move(p), 0, true).ok());  // a backup: its primary took it
  p.clear();
  p.emplace_back(ids.data(), ids.size() * sizeof(uint64_t));
  p.push_back(floats(6));
  s = check_push(f, std::move(p), 1, true);  // named the other group: refused even so
  EXPECT_EQ(s.code(), Code::kWrongServer) << s.ToString();
}

}  // namespace
}  // namespace shardps
