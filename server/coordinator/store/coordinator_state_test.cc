#include "server/coordinator/store/coordinator_state.h"

#include <gtest/gtest.h>
#include <rocksdb/db.h>
#include <rocksdb/options.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>

#include "common/codec/wire.h"
#include "tests/table_spec.h"

namespace shardps {
namespace {

const StateShape kJob{2, 2, 3};  // 2 servers, 2 workers, 3 worker ranks (elastic)

DurableState Sample() {
  DurableState d;
  d.num_servers = 2;
  d.num_workers = 2;
  d.partitions = 8;
  TableSpec t = testing::Dense("w", 10, 2).Adam(0.01f);
  t.id = 0;
  TableSpec e = testing::Sparse("e", 4);
  e.id = 1;
  d.tables = {t, e};
  d.servers = {{"tcp://a:1", 100, "ha"}, {"", 0, ""}};
  d.workers = {{WorkerState::kAlive, "hw", 7}, {WorkerState::kLeft, "", 0}, {WorkerState::kVacant, "", 0}};
  WorkPool p;
  p.total = 100;
  p.next = 60;
  p.last[1] = {40, 60};
  p.returned.push_back({10, 20});
  p.last_clock = 3;
  WorkPool::Block b;
  b.begin = 40;
  b.end = 60;
  b.per = 10;
  b.ranks = {0, 1};
  b.taken = {1, 0};
  p.blocks[4] = b;
  d.work.pools[3] = p;
  d.work.clock_grants[0] = {{3, 4, 40, 50}};
  d.work.work_at[4] = {3, 40};
  d.work.last_claims[1] = {9, 3, 40, 60};
  d.work.resume = {2, 17};
  d.restore_dir = "/snaps/snap-000000000005";
  d.clock_base = 5;
  d.latest_snapshot_dir = "/snaps/snap-000000000009";
  d.latest_snapshot_clock = 9;
  d.snapshots_taken = 2;
  d.next_update_id = 77;
  d.membership_version = 12;
  d.stopping = true;
  return d;
}

// Another, different state: what a failed load must leave alone.
DurableState Sentinel() {
  DurableState d;
  d.num_servers = 1;
  d.restore_dir = "untouched";
  d.work.resume = {99, 98};
  return d;
}

class StateDir : public ::testing::Test {
 protected:
  void SetUp() override {
    static int n = 0;
    dir_ = (std::filesystem::temp_directory_path() /
            ("shardps-state-" + std::to_string(::getpid()) + "-" + std::to_string(n++)))
               .string();
    std::filesystem::remove_all(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }
  // Overwrites every value of the (closed) database with `value`, through
  // RocksDB itself.
  void Overwrite(const std::string& value) {
    rocksdb::DB* raw = nullptr;
    ASSERT_TRUE(rocksdb::DB::Open(rocksdb::Options(), dir_ + "/coordinator.db", &raw).ok());
    std::unique_ptr<rocksdb::DB> db(raw);
    std::vector<std::string> keys;
    std::unique_ptr<rocksdb::Iterator> it(db->NewIterator(rocksdb::ReadOptions()));
    for (it->SeekToFirst(); it->Valid(); it->Next()) keys.push_back(it->key().ToString());
    it.reset();
    ASSERT_EQ(keys.size(), 1u);
    for (const auto& k : keys) ASSERT_TRUE(db->Put(rocksdb::WriteOptions(), k, value).ok());
  }
  std::string dir_;
};

TEST(DurableState, EveryFieldSurvivesEncodingAndDecoding) {
  const DurableState d = Sample();
  DurableState back;
  ASSERT_TRUE(DecodeState(EncodeState(d), kJob, &back).ok());
  EXPECT_EQ(EncodeState(back), EncodeState(d));  // the whole value, byte for byte
  EXPECT_EQ(back.partitions, 8u);
  ASSERT_EQ(back.tables.size(), 2u);
  EXPECT_TRUE(back.tables[0].SameShape(d.tables[0]));
  EXPECT_EQ(back.servers[0].endpoint, "tcp://a:1");
  EXPECT_EQ(back.servers[0].budget, 100u);
  EXPECT_EQ(back.workers[2].state, WorkerState::kVacant);
  EXPECT_EQ(back.workers[0].pid, 7u);
  const WorkPool& p = back.work.pools.at(3);
  EXPECT_EQ(p.next, 60u);
  EXPECT_EQ(p.last.at(1), std::make_pair(uint64_t{40}, uint64_t{60}));
  EXPECT_EQ(p.blocks.at(4).taken, (std::vector<uint8_t>{1, 0}));
  EXPECT_EQ(back.work.clock_grants.at(0).front().end, 50u);
  EXPECT_EQ(back.work.work_at.at(4).position, 40u);
  EXPECT_EQ(back.work.last_claims.at(1).seq, 9u);
  EXPECT_EQ(back.work.resume.position, 17u);
  EXPECT_EQ(back.clock_base, 5);
  EXPECT_EQ(back.latest_snapshot_clock, 9);
  EXPECT_EQ(back.next_update_id, 77u);
  EXPECT_TRUE(back.stopping);
}

TEST(DurableState, AValueThatIsNotAStateIsRefusedAndChangesNothing) {
  DurableState out = Sentinel();
  const std::string before = EncodeState(out);
  Status s = DecodeState("", kJob, &out);
  EXPECT_EQ(s.code(), Code::kBadMessage);
  EXPECT_EQ(s.message(), "the saved state is empty");
  s = DecodeState("definitely not a flatbuffer", kJob, &out);
  EXPECT_EQ(s.message(), "the saved state is corrupt");
  std::string truncated = EncodeState(Sample());
  truncated.resize(truncated.size() / 2);
  EXPECT_EQ(DecodeState(truncated, kJob, &out).code(), Code::kBadMessage);
  EXPECT_EQ(EncodeState(out), before);
}

TEST(DurableState, AnotherFormatOrAnotherJobIsRefused) {
  flatbuffers::FlatBufferBuilder b;
  b.Finish(wire::CreateCoordinatorState(b, 2, 2, 2, 8));
  const std::string v2(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
  DurableState out = Sentinel();
  Status s = DecodeState(v2, kJob, &out);
  EXPECT_EQ(s.code(), Code::kVersionMismatch);
  EXPECT_EQ(s.message(), "the saved state has format 2, this build reads 1");
  s = DecodeState(EncodeState(Sample()), StateShape{3, 2, 3}, &out);
  EXPECT_EQ(s.code(), Code::kConflict);
  EXPECT_EQ(s.message(), "the saved job has 2 servers and 2 workers, this one 3 and 2 (a --state-dir holds one job: "
                         "give a new one to start another)");
  EXPECT_EQ(out.restore_dir, "untouched");
  // Another number of replica groups ([job] groups) is another job too.
  s = DecodeState(EncodeState(Sample()), StateShape{2, 2, 3, 4}, &out);
  EXPECT_EQ(s.code(), Code::kConflict);
  EXPECT_NE(s.message().find("the saved job has 2 replica groups, this one 4"), std::string::npos) << s.message();
}

// A job of 2 servers and 4 groups that added a third server: its slots and
// its map (every group's chain, one naming server 2) come back.
TEST(DurableState, MoreGroupsThanServersAndAnAddedServerSurvive) {
  DurableState d = Sample();
  d.groups = 4;
  d.servers.push_back({"tcp://c:3", 0, "hc", false});
  d.map_version = 6;
  d.map_replicas = {{0, 2}, {0, 1}, {1, 2}, {1, 0}};
  DurableState out;
  Status s = DecodeState(EncodeState(d), StateShape{2, 2, 3, 4}, &out);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(out.groups, 4u);
  EXPECT_EQ(out.servers.size(), 3u);
  EXPECT_EQ(out.servers[2].endpoint, "tcp://c:3");
  EXPECT_EQ(out.map_replicas, d.map_replicas);
  // A map naming a server past the saved slots is refused.
  d.map_replicas[0] = {0, 3};
  s = DecodeState(EncodeState(d), StateShape{2, 2, 3, 4}, &out);
  EXPECT_EQ(s.code(), Code::kBadMessage);
  EXPECT_EQ(s.message(), "the saved shard map names server 3");
}

TEST(DurableState, ContentTheJobCannotHoldIsRefusedNamingIt) {
  struct Case {
    const char* why;
    std::function<void(DurableState&)> spoil;
    StateShape job;
  };
  const std::vector<Case> cases = {
      {"the saved state has 1 partitions", [](DurableState& d) { d.partitions = 1; }, kJob},
      {"the saved table ids are not dense", [](DurableState& d) { d.tables[1].id = 5; }, kJob},
      {"the saved servers do not match the job", [](DurableState& d) { d.servers.pop_back(); }, kJob},
      {"the saved state has more worker ranks", [](DurableState&) {}, StateShape{2, 2, 2}},
      {"a saved worker state is unknown", [](DurableState& d) { d.workers[0].state = static_cast<WorkerState>(9); },
       kJob},
      {"a saved work pool is past its end", [](DurableState& d) { d.work.pools.at(3).next = 101; }, kJob},
      {"a saved returned range is outside its pool",
       [](DurableState& d) { d.work.pools.at(3).returned[0] = {90, 120}; }, kJob},
      {"a saved grant names an unknown worker or lies outside its pool",
       [](DurableState& d) { d.work.pools.at(3).last[7] = {0, 1}; }, kJob},
      {"a saved block is inconsistent", [](DurableState& d) { d.work.pools.at(3).blocks.at(4).per = 0; }, kJob},
      {"a saved per-clock grant names an unknown worker or pool, or lies outside it",
       [](DurableState& d) { d.work.clock_grants[0].front().pool = 4; }, kJob},
      {"a saved claim names an unknown worker or an inverted range",
       [](DurableState& d) { d.work.last_claims[1].begin = 61; }, kJob},
      {"the saved clocks are out of range", [](DurableState& d) { d.clock_base = -1; }, kJob},
  };
  for (const auto& c : cases) {
    DurableState d = Sample();
    c.spoil(d);
    DurableState out = Sentinel();
    Status s = DecodeState(EncodeState(d), c.job, &out);
    EXPECT_EQ(s.code(), Code::kBadMessage) << c.why;
    EXPECT_EQ(s.message(), c.why);
    EXPECT_EQ(out.restore_dir, "untouched") << c.why;
  }
}

TEST_F(StateDir, SavedStateLoadsInTheNextProcessUntilForgotten) {
  {
    std::unique_ptr<StateStore> store;
    ASSERT_TRUE(StateStore::Open(dir_, &store).ok());
    EXPECT_EQ(store->path(), dir_ + "/coordinator.db");
    DurableState out;
    bool found = true;
    ASSERT_TRUE(store->Load(kJob, &out, &found).ok());
    EXPECT_FALSE(found);
    EXPECT_TRUE(store->Save(Sentinel()));
    EXPECT_TRUE(store->Save(Sample()));  // the newest wins
  }
  {
    std::unique_ptr<StateStore> store;
    ASSERT_TRUE(StateStore::Open(dir_, &store).ok());
    DurableState out;
    bool found = false;
    ASSERT_TRUE(store->Load(kJob, &out, &found).ok());
    EXPECT_TRUE(found);
    EXPECT_EQ(EncodeState(out), EncodeState(Sample()));
    store->Forget();
  }
  std::unique_ptr<StateStore> store;
  ASSERT_TRUE(StateStore::Open(dir_, &store).ok());
  DurableState out;
  bool found = true;
  ASSERT_TRUE(store->Load(kJob, &out, &found).ok());
  EXPECT_FALSE(found);
}

TEST_F(StateDir, ACorruptValueIsAnErrorNamingTheDatabaseAndChangesNothing) {
  {
    std::unique_ptr<StateStore> store;
    ASSERT_TRUE(StateStore::Open(dir_, &store).ok());
    ASSERT_TRUE(store->Save(Sample()));
  }
  Overwrite("garbage that does not verify");
  std::unique_ptr<StateStore> store;
  ASSERT_TRUE(StateStore::Open(dir_, &store).ok());
  DurableState out = Sentinel();
  const std::string before = EncodeState(out);
  bool found = true;
  Status s = store->Load(kJob, &out, &found);
  EXPECT_EQ(s.code(), Code::kBadMessage);
  EXPECT_EQ(s.message(), dir_ + "/coordinator.db: the saved state is corrupt");
  EXPECT_FALSE(found);
  EXPECT_EQ(EncodeState(out), before);
}

TEST_F(StateDir, ADatabaseInUseIsRefusedSayingSo) {
  std::unique_ptr<StateStore> first, second;
  ASSERT_TRUE(StateStore::Open(dir_, &first).ok());
  Status s = StateStore::Open(dir_, &second);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("is another coordinator using this --state-dir?"), std::string::npos) << s.message();
  EXPECT_EQ(second, nullptr);
}

TEST_F(StateDir, ADirectoryThatCannotBeMadeIsRefused) {
  std::filesystem::create_directories(dir_);
  const std::string file = dir_ + "/a-file";
  { std::ofstream(file) << "x"; }
  std::unique_ptr<StateStore> store;
  Status s = StateStore::Open(file + "/sub", &store);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message().rfind("--state-dir '" + file + "/sub': ", 0), 0u) << s.message();
}

}  // namespace
}  // namespace shardps
