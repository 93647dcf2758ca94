#include "server/snapshot/snapshot.h"

#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdio>
#include <fstream>

#include "server/tables/table.h"

namespace shardps::snapshot {
namespace {

class SnapshotTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/shardps-snap-XXXXXX";
    ASSERT_TRUE(mkdtemp(tmpl));
    root_ = tmpl;
  }
  void TearDown() override { std::system(("rm -rf '" + root_ + "'").c_str()); }

  // A 2-server snapshot of one dense and one sparse table at `clock`.
  // file_checksums = false: as written before manifests recorded them.
  std::string Write(int64_t clock, bool with_manifest = true, bool file_checksums = false) {
    const std::string dir = root_ + "/" + DirName(clock);
    mkdir(dir.c_str(), 0755);
    TableSpec d;
    d.id = 0;
    d.name = "dense";
    d.rows = 100;
    d.cols = 4;
    d.init = InitKind::kNormal;
    d.init_b = 1;
    d.optimizer = OptimizerKind::kMomentum;
    TableSpec s = d;
    s.id = 1;
    s.name = "sparse";
    s.kind = TableKind::kSparse;
    s.optimizer = OptimizerKind::kSGD;
    Manifest m;
    m.clock = clock;
    m.work_pool = 3;  // where training resumes
    m.work_position = 640;
    m.num_servers = 2;
    m.partitions = 8;
    m.owner = {0, 0, 0, 0, 1, 1, 1, 1};
    m.tables = {d, s};
    for (uint32_t server = 0; server < 2; ++server) {
      std::vector<uint32_t> owned;
      for (uint32_t p = 0; p < 8; ++p)
        if (m.owner[p] == server) owned.push_back(p);
      ServerTable td(d, 8, owned), ts(s, 8, owned);
      std::vector<uint64_t> ids;
      for (uint64_t i = 0; i < 50; ++i) ids.push_back(i * 1000003);
      std::vector<uint64_t> mine;
      for (auto id : ids)
        if (ts.CheckKeys(&id, 1).ok()) mine.push_back(id);
      std::vector<float> out(mine.size() * 4);
      ts.ReadKeys(mine.data(), mine.size(), out.data());
      std::vector<PartitionData> parts;
      td.Export(0, &parts);
      ts.Export(1, &parts);
      uint64_t bytes, sum = 0;
      EXPECT_TRUE(WriteServerFile(dir + "/" + ServerFileName(server), server, parts, &m.parts, &bytes,
                                  file_checksums ? &sum : nullptr).ok());
      m.files.push_back({server, ServerFileName(server), bytes, sum});
    }
    if (with_manifest) EXPECT_TRUE(WriteManifest(dir, m).ok());
    return dir;
  }
  std::string root_;
};

TEST_F(SnapshotTest, WriteReadVerifyAndIterate) {
  std::string dir = Write(10);
  Manifest m;
  ASSERT_TRUE(ReadManifest(dir, &m).ok());
  EXPECT_EQ(m.clock, 10);
  EXPECT_EQ(m.work_pool, 3u);
  EXPECT_EQ(m.work_position, 640u);
  EXPECT_EQ(m.tables.size(), 2u);
  ASSERT_TRUE(Verify(dir, m).ok()) << Verify(dir, m).ToString();
  uint64_t rows = 0;
  for (uint32_t p = 0; p < 8; ++p)
    ASSERT_TRUE(ForEachRow(dir, m, 0, p, [&](uint64_t, const float*, uint32_t stride) {
      EXPECT_EQ(stride, 8u);  // cols + momentum
      ++rows;
    }).ok());
  EXPECT_EQ(rows, 100u);
}

TEST_F(SnapshotTest, ListNewestGoodAndIncomplete) {
  Write(5);
  Write(9);
  Write(12, /*with_manifest=*/false);
  std::vector<Listing> all;
  ASSERT_TRUE(List(root_, &all).ok());
  ASSERT_EQ(all.size(), 3u);
  EXPECT_TRUE(all[0].complete);
  EXPECT_FALSE(all[2].complete);
  std::string dir;
  Manifest m;
  std::vector<std::string> refused;
  ASSERT_TRUE(FindNewestGood(root_, -1, &dir, &m, &refused).ok());
  EXPECT_EQ(m.clock, 9);
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_NE(refused[0].find("incomplete"), std::string::npos) << refused[0];
}

TEST_F(SnapshotTest, FlippedBytesAreFoundAndNamedAndTheOlderOneIsUsed) {
  Write(5);
  std::string dir = Write(9);
  const std::string file = dir + "/" + ServerFileName(1);
  {
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(200);
    char c;
    f.read(&c, 1);
    f.seekp(200);
    c ^= 0x5a;
    f.write(&c, 1);
  }
  Manifest m;
  ASSERT_TRUE(ReadManifest(dir, &m).ok());
  Status s = Verify(dir, m);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("server-1.sst"), std::string::npos) << s.ToString();
  std::string good;
  std::vector<std::string> refused;
  ASSERT_TRUE(FindNewestGood(root_, -1, &good, &m, &refused).ok());
  EXPECT_EQ(m.clock, 5);
  EXPECT_EQ(refused.size(), 1u);
}

TEST_F(SnapshotTest, CorruptManifestAndMissingDirectory) {
  std::string dir = Write(3);
  std::ofstream(dir + "/MANIFEST") << "garbage";
  Manifest m;
  EXPECT_EQ(ReadManifest(dir, &m).code(), Code::kBadMessage);
  std::vector<Listing> all;
  EXPECT_FALSE(List(root_ + "/nope", &all).ok());
}

// Found by fuzzing (tests/fuzz/crashes/snapshot/rocksdb-assert): a damaged
// SST file whose footer turns RocksDB's block checksums off made Debian's
// RocksDB assert while opening it (`size_ >= 2 * sizeof(uint32_t)` in
// Block::NumRestarts): the coordinator choosing a snapshot to restore
// aborted. Manifests now record each file's XXH3-64, checked before RocksDB
// reads a byte; and a file entry must be named server-<rank>.sst (it named
// any path, read relative to the snapshot directory).
TEST_F(SnapshotTest, WholeFileChecksumIsCheckedBeforeRocksDbReadsTheFile) {
  std::string dir = Write(6, true, /*file_checksums=*/true);
  Manifest m;
  ASSERT_TRUE(ReadManifest(dir, &m).ok());
  ASSERT_EQ(m.files.size(), 2u);
  EXPECT_NE(m.files[0].checksum, 0u);
  ASSERT_TRUE(Verify(dir, m).ok()) << Verify(dir, m).ToString();
  const std::string file = dir + "/" + ServerFileName(0);
  {
    // The footer's first byte: RocksDB's checksum type.
    std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(0, std::ios::end);
    const auto size = static_cast<std::streamoff>(f.tellg());
    f.seekp(size - 53);
    f.put(0);
  }
  Status s = Verify(dir, m);
  EXPECT_EQ(s.code(), Code::kBadMessage);
  EXPECT_NE(s.message().find("server-0.sst fails its whole-file checksum"), std::string::npos) << s.ToString();

  m.files[1].name = "../" + ServerFileName(1);
  ASSERT_TRUE(WriteManifest(dir, m).ok());
  s = ReadManifest(dir, &m);
  EXPECT_EQ(s.code(), Code::kBadMessage);
  EXPECT_NE(s.message().find("is not named server-1.sst"), std::string::npos) << s.ToString();
}

// Found by fuzzing (tests/fuzz/crashes/snapshot/): an empty MANIFEST was
// copied with memcpy from a null pointer (UBSan: "null pointer passed as
// argument 1"); it is refused as corrupt before any copy.
TEST_F(SnapshotTest, EmptyManifestIsCorrupt) {
  std::string dir = Write(4);
  std::ofstream(dir + "/MANIFEST", std::ios::trunc).flush();
  Manifest m;
  Status s = ReadManifest(dir, &m);
  EXPECT_EQ(s.code(), Code::kBadMessage);
  EXPECT_NE(s.message().find("empty"), std::string::npos) << s.message();
}

}  // namespace
}  // namespace shardps::snapshot
