#include "worker/data/data.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <fstream>
#include <algorithm>
#include <map>
#include <set>
#include <unistd.h>

namespace shardps::worker {
namespace {

std::vector<uint8_t> Idx(int dims, std::vector<uint32_t> sizes, size_t payload) {
  std::vector<uint8_t> b = {0, 0, 8, static_cast<uint8_t>(dims)};
  for (uint32_t s : sizes) {
    b.push_back(s >> 24);
    b.push_back(s >> 16);
    b.push_back(s >> 8);
    b.push_back(s);
  }
  for (size_t i = 0; i < payload; ++i) b.push_back(static_cast<uint8_t>(i % 10));
  return b;
}

TEST(Idx, ParsesAndRefusesBadFiles) {
  std::vector<uint32_t> dims;
  const uint8_t* data;
  auto good = Idx(3, {2, 2, 3}, 12);
  ASSERT_TRUE(ParseIdx(good, "x", 3, &dims, &data).ok());
  EXPECT_EQ(dims, (std::vector<uint32_t>{2, 2, 3}));
  EXPECT_EQ(data[11], 1);
  auto truncated = Idx(3, {2, 2, 3}, 11);
  EXPECT_NE(ParseIdx(truncated, "x", 3, &dims, &data).message().find("truncated"), std::string::npos);
  auto bad_magic = good;
  bad_magic[2] = 9;
  EXPECT_NE(ParseIdx(bad_magic, "x", 3, &dims, &data).message().find("magic"), std::string::npos);
  EXPECT_NE(ParseIdx(good, "x", 1, &dims, &data).message().find("3 dimensions"), std::string::npos);
  EXPECT_FALSE(ParseIdx({0, 0}, "x", 1, &dims, &data).ok());
}

TEST(FashionMnist, MissingAndCorruptFilesAreClearErrors) {
  Dataset d;
  Status s = LoadFashionMnist("/nonexistent", true, &d);
  EXPECT_NE(s.message().find("/nonexistent/train-images-idx3-ubyte"), std::string::npos) << s.ToString();
  char tmpl[] = "/tmp/shardps-data-XXXXXX";
  ASSERT_TRUE(mkdtemp(tmpl));
  std::string dir = tmpl;
  // A corrupt gzip file.
  {
    std::ofstream f(dir + "/train-images-idx3-ubyte.gz", std::ios::binary);
    f << "\x1f\x8b\x08\x00garbage that is not deflate data at all";
  }
  {
    auto labels = Idx(1, {2}, 2);
    std::ofstream f(dir + "/train-labels-idx1-ubyte", std::ios::binary);
    f.write(reinterpret_cast<const char*>(labels.data()), labels.size());
  }
  s = LoadFashionMnist(dir, true, &d);
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("train-images-idx3-ubyte.gz"), std::string::npos) << s.ToString();
  // Plain (uncompressed) files with mismatched counts.
  std::remove((dir + "/train-images-idx3-ubyte.gz").c_str());
  {
    auto images = Idx(3, {3, 2, 2}, 12);
    std::ofstream f(dir + "/train-images-idx3-ubyte", std::ios::binary);
    f.write(reinterpret_cast<const char*>(images.data()), images.size());
  }
  s = LoadFashionMnist(dir, true, &d);
  EXPECT_NE(s.message().find("3 images but"), std::string::npos) << s.ToString();
  EXPECT_FALSE(d.loaded);  // what the worker reads again on its next try
  std::system(("rm -rf " + dir).c_str());
}

TEST(FashionMnist, TheDebianPackageLoads) {
  Dataset d;
  Status s = LoadFashionMnist(kFashionMnistDir, false, &d, 500);
  if (!s.ok()) GTEST_SKIP() << "dataset-fashion-mnist not installed: " << s.ToString();
  EXPECT_TRUE(d.loaded);
  EXPECT_EQ(d.rows, 500);
  EXPECT_EQ(d.cols, 784);
  std::set<float> classes(d.y.begin(), d.y.end());
  EXPECT_EQ(classes.size(), 10u);
  float mx = *std::max_element(d.x.begin(), d.x.end());
  EXPECT_LE(mx, 1.0f);
  EXPECT_GT(mx, 0.5f);
}

TEST(EpochShard, RanksPartitionTheEpochAndMatchOneProcess) {
  const uint32_t n = 103;
  auto all = EpochShard(n, 0, 1, 9, 2, true);
  auto r0 = EpochShard(n, 0, 2, 9, 2, true), r1 = EpochShard(n, 1, 2, 9, 2, true);
  EXPECT_EQ(r0.size() + r1.size(), n);
  // Batches of b per rank at step t == batch of 2b for one process.
  const int b = 5;
  for (int t = 0; t < 10; ++t) {
    std::multiset<uint32_t> two(all.begin() + t * 2 * b, all.begin() + (t + 1) * 2 * b);
    std::multiset<uint32_t> parts(r0.begin() + t * b, r0.begin() + (t + 1) * b);
    parts.insert(r1.begin() + t * b, r1.begin() + (t + 1) * b);
    EXPECT_EQ(two, parts);
  }
  EXPECT_NE(EpochShard(n, 0, 1, 9, 3, true), all);  // reshuffled per epoch
  auto plain = EpochShard(n, 0, 1, 9, 3, false);
  EXPECT_EQ(plain[5], 5u);
}

TEST(Clicks, DeterministicZipfAndKnownBayesAccuracy) {
  ClickLogOptions o;
  ClickBatch a, b;
  GenerateClicks(o, 0, 100, 2000, &a);
  GenerateClicks(o, 0, 100, 2000, &b);
  EXPECT_EQ(a.ids, b.ids);
  EXPECT_EQ(a.labels, b.labels);
  ASSERT_EQ(a.offsets.size(), 2001u);
  EXPECT_EQ(a.ids.size(), 2000u * o.ids_per_example);
  // Heavy head: the most frequent id appears far more than uniform would.
  std::map<uint64_t, int> freq;
  for (auto id : a.ids) {
    ASSERT_LT(id, o.id_space);
    freq[id]++;
  }
  int top = 0;
  for (auto& [id, c] : freq) top = std::max(top, c);
  EXPECT_GT(top, 100);
  EXPECT_GT(a.bayes_accuracy, 0.6);
  EXPECT_LT(a.bayes_accuracy, 1.0);
  GenerateClicks(o, 1, 100, 10, &b);  // the test stream differs
  EXPECT_NE(std::vector<uint64_t>(a.ids.begin(), a.ids.begin() + 20), std::vector<uint64_t>(b.ids.begin(), b.ids.begin() + 20));
}

}  // namespace
}  // namespace shardps::worker
