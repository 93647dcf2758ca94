#include "client/python/criteo_reader.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

namespace shardps::python {
namespace {

// A Criteo line: label, 13 integers, 26 hex categories (some empty).
std::string Line(int i) {
  std::string s = std::to_string(i % 2);
  for (int f = 0; f < 13; ++f) s += "\t" + (f == 3 ? std::string() : std::to_string(i + f));
  for (int f = 0; f < 26; ++f) s += "\t" + (f == 5 ? std::string() : std::to_string(1000 + i * 26 + f));
  return s + "\n";
}

std::string WriteLog(int lines, int bad_line = -1) {
  char tmpl[] = "/tmp/criteo_reader_test.XXXXXX";
  const int fd = mkstemp(tmpl);
  EXPECT_GE(fd, 0);
  close(fd);
  std::ofstream f(tmpl);
  for (int i = 0; i < lines; ++i) f << (i == bad_line ? std::string("1\tx\n") : Line(i));
  return tmpl;
}

TEST(CriteoReader, ReadsEveryLineInOrderWithoutShuffle) {
  const std::string path = WriteLog(10);
  CriteoReaderOptions o;
  o.path = path;
  o.batch = 4;
  o.shuffle = false;
  o.last_partial = true;
  o.rows = 0;
  std::unique_ptr<CriteoReader> r;
  ASSERT_TRUE(CriteoReader::Open(o, &r).ok());
  EXPECT_EQ(r->lines(), 10u);
  EXPECT_EQ(r->steps(), 3u);
  std::vector<uint32_t> sizes;
  CriteoBatch b;
  bool got = true;
  int line = 0;
  while (r->Next(&b, &got).ok() && got) {
    sizes.push_back(b.size);
    for (uint32_t j = 0; j < b.size; ++j, ++line) {
      EXPECT_EQ(b.labels[j], line % 2);
      EXPECT_FLOAT_EQ(b.dense[j * 13], std::log1p(static_cast<float>(line)));
      EXPECT_EQ(b.dense[j * 13 + 3], 0.0f);  // missing
      // Category 0: hex "1000 + 26 line" as written, its own row (+ 1), feature 0.
      EXPECT_EQ(b.keys[j * 26], static_cast<int64_t>(std::stoull(std::to_string(1000 + line * 26), nullptr, 16) + 1));
      EXPECT_EQ(b.keys[j * 26 + 5], int64_t{5} << 56);  // missing: row 0 of feature 5
    }
  }
  EXPECT_EQ(sizes, (std::vector<uint32_t>{4, 4, 2}));
  std::remove(path.c_str());
}

// Destroyed while its thread waits to hand over more batches: it stops and
// joins at once.
TEST(CriteoReader, StopsWhileAhead) {
  const std::string path = WriteLog(200);
  CriteoReaderOptions o;
  o.path = path;
  o.batch = 2;
  o.ahead = 1;
  std::unique_ptr<CriteoReader> r;
  ASSERT_TRUE(CriteoReader::Open(o, &r).ok());
  CriteoBatch b;
  bool got = false;
  ASSERT_TRUE(r->Next(&b, &got).ok());
  EXPECT_TRUE(got);
  r.reset();
  std::remove(path.c_str());
}

TEST(CriteoReader, AMalformedLineIsNamedOnce) {
  const std::string path = WriteLog(6, 4);
  CriteoReaderOptions o;
  o.path = path;
  o.batch = 3;
  o.shuffle = false;
  std::unique_ptr<CriteoReader> r;
  ASSERT_TRUE(CriteoReader::Open(o, &r).ok());
  CriteoBatch b;
  bool got = false;
  ASSERT_TRUE(r->Next(&b, &got).ok());
  ASSERT_TRUE(got);
  Status s = r->Next(&b, &got);
  EXPECT_FALSE(got);
  EXPECT_NE(s.message().find(path + ":5: "), std::string::npos) << s.ToString();
  EXPECT_TRUE(r->Next(&b, &got).ok());  // then the end
  EXPECT_FALSE(got);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace shardps::python
