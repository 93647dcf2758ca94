// ColdStore (server/tables/cold_store.h): rows written come back bit for
// bit, in one batched read; partitions scan in id order and drop alone; a
// directory that is not a cold store's is never touched.
#include <gtest/gtest.h>

#include <stdlib.h>

#include <filesystem>
#include <fstream>

#include "server/tables/cold_store.h"

namespace shardps {
namespace {

namespace fs = std::filesystem;

class ColdStoreTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardps-cold-test-XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    root_ = tmpl;
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string root_;
};

std::vector<uint8_t> Value(uint64_t id, size_t n) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(id * 31 + i);
  return v;
}

TEST_F(ColdStoreTest, RowsComeBackBitForBitInOneBatchedRead) {
  std::unique_ptr<ColdStore> s;
  ASSERT_TRUE(ColdStore::Open(root_ + "/cold", &s).ok());
  const size_t n = 20;
  for (uint64_t id : {3ull, 7ull, 1ull << 40, ~0ull}) s->Put(1, 2, id, Value(id, n).data(), n);
  s->Put(1, 3, 5, Value(5, n).data(), n);  // another partition: not read by a read of partition 2
  ASSERT_TRUE(s->Commit().ok());
  const uint64_t ids[] = {3, 5, 7, 1ull << 40, ~0ull};
  std::vector<uint8_t> out(5 * n);
  std::vector<uint8_t> found;
  ASSERT_TRUE(s->MultiGet(1, 2, ids, 5, n, out.data(), &found).ok());
  EXPECT_EQ(found, (std::vector<uint8_t>{1, 0, 1, 1, 1}));
  for (size_t i : {0, 2, 3, 4})
    EXPECT_EQ(std::vector<uint8_t>(out.begin() + i * n, out.begin() + (i + 1) * n), Value(ids[i], n)) << i;
  EXPECT_EQ(s->bytes_read(), 4 * n);
  std::vector<uint8_t> one(n);
  EXPECT_TRUE(s->Get(1, 3, 5, n, one.data()));
  EXPECT_EQ(one, Value(5, n));
  EXPECT_FALSE(s->Get(1, 2, 5, n, one.data()));
  EXPECT_FALSE(s->Get(1, 2, 3, n + 1, one.data()));  // a row of another size is not this table's
  s->Delete(1, 2, 7);
  ASSERT_TRUE(s->Commit().ok());
  EXPECT_FALSE(s->Get(1, 2, 7, n, one.data()));
}

TEST_F(ColdStoreTest, APartitionScansInIdOrderFromWhereAScanStoppedAndDropsAlone) {
  std::unique_ptr<ColdStore> s;
  ASSERT_TRUE(ColdStore::Open(root_ + "/cold", &s).ok());
  const uint8_t v[4] = {1, 2, 3, 4};
  for (uint64_t id : {900ull, 5ull, 1ull << 63, 70ull}) s->Put(0, 1, id, v, 4);
  s->Put(0, 0, 1, v, 4);
  s->Put(0, 2, 1, v, 4);
  s->Put(1, 1, 2, v, 4);
  ASSERT_TRUE(s->Commit().ok());
  std::vector<uint64_t> seen;
  bool done = false;
  uint64_t next = s->Scan(0, 1, 0, &done, [&](uint64_t id, std::string_view) {
    seen.push_back(id);
    return seen.size() < 2;
  });
  EXPECT_FALSE(done);
  EXPECT_EQ(seen, (std::vector<uint64_t>{5, 70}));
  next = s->Scan(0, 1, next, &done, [&](uint64_t id, std::string_view val) {
    seen.push_back(id);
    EXPECT_EQ(val.size(), 4u);
    return true;
  });
  EXPECT_TRUE(done);
  EXPECT_EQ(seen, (std::vector<uint64_t>{5, 70, 900, 1ull << 63}));
  ASSERT_TRUE(s->DropPartition(0, 1).ok());
  uint8_t out[4];
  for (uint64_t id : {5ull, 70ull, 900ull, 1ull << 63}) EXPECT_FALSE(s->Get(0, 1, id, 4, out));
  EXPECT_TRUE(s->Get(0, 0, 1, 4, out));  // the partitions beside it, and the other table's, stay
  EXPECT_TRUE(s->Get(0, 2, 1, 4, out));
  EXPECT_TRUE(s->Get(1, 1, 2, 4, out));
}

TEST_F(ColdStoreTest, ADirectoryNotMadeByAColdStoreIsRefusedAndLeftAsItWas) {
  const std::string dir = root_ + "/data";
  fs::create_directories(dir);
  std::ofstream(dir + "/model.bin") << "precious";
  std::unique_ptr<ColdStore> s;
  const Status st = ColdStore::Open(dir, &s);
  EXPECT_EQ(st.code(), Code::kInvalidArgument);
  EXPECT_NE(st.message().find("not empty and holds no cold tier"), std::string::npos) << st.message();
  EXPECT_TRUE(fs::exists(dir + "/model.bin"));
  std::ofstream(root_ + "/file") << "x";
  EXPECT_FALSE(ColdStore::Open(root_ + "/file", &s).ok());  // not a directory
}

TEST_F(ColdStoreTest, ATierInUseIsNeverTakenByAnotherStore) {
  std::unique_ptr<ColdStore> a, b;
  ASSERT_TRUE(ColdStore::Open(root_ + "/cold", &a).ok());
  const uint8_t v[2] = {1, 2};
  a->Put(0, 0, 1, v, 2);
  ASSERT_TRUE(a->Commit().ok());
  const Status st = ColdStore::Open(root_ + "/cold", &b);
  EXPECT_EQ(st.code(), Code::kUnavailable);
  EXPECT_NE(st.message().find("in use by another running server"), std::string::npos) << st.message();
  uint8_t out[2];
  EXPECT_TRUE(a->Get(0, 0, 1, 2, out));  // nothing of a's was touched
  a.reset();
  EXPECT_TRUE(ColdStore::Open(root_ + "/cold", &b).ok());
}

TEST_F(ColdStoreTest, AnEarlierServersTierIsEmptiedAndTheTierIsGoneWhenItCloses) {
  const std::string dir = root_ + "/cold";
  const uint8_t v[2] = {9, 9};
  {
    std::unique_ptr<ColdStore> s;
    ASSERT_TRUE(ColdStore::Open(dir, &s).ok());
    s->Put(0, 0, 1, v, 2);
    ASSERT_TRUE(s->Commit().ok());
    ASSERT_TRUE(s->Flush().ok());  // (no write-ahead log: the row is in a file only once flushed)
    // A server killed leaves its tier behind: copy it aside as such a one.
    fs::copy(dir, root_ + "/left", fs::copy_options::recursive);
  }
  bool has_rows = false;
  for (const auto& e : fs::directory_iterator(root_ + "/left/rows")) has_rows |= e.path().extension() == ".sst";
  ASSERT_TRUE(has_rows) << "the copy holds no file of rows: the test would prove nothing";
  EXPECT_FALSE(fs::exists(dir));  // closed: removed
  fs::rename(root_ + "/left", dir);
  std::unique_ptr<ColdStore> s;
  ASSERT_TRUE(ColdStore::Open(dir, &s).ok());  // an earlier tier: taken, emptied
  uint8_t out[2];
  EXPECT_FALSE(s->Get(0, 0, 1, 2, out));
  EXPECT_GT(s->FreeBytes(), 0u);
}

}  // namespace
}  // namespace shardps
