// The Criteo TSV reader (worker/data/criteo.h): fields, missing values,
// negatives, malformed lines named by file, line and field, CRLF, an empty
// file, reading any range of a file larger than its buffer.
#include "worker/data/criteo.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <string>

namespace shardps::worker {
namespace {

// A line with label `label`, integer i = `i0 + i` (I2 = -2), categories
// C(f) = hex of f * 0x1000 + salt; `empty_c` leaves C3 empty, `empty_i` I5.
std::string Line(int label, int i0, int salt, bool empty_c = false, bool empty_i = false) {
  std::string s = std::to_string(label);
  for (int i = 0; i < kCriteoIntegers; ++i) {
    s += '\t';
    if (i == 4 && empty_i) continue;
    s += i == 1 ? "-2" : std::to_string(i0 + i);
  }
  for (int f = 0; f < kCriteoCategories; ++f) {
    s += '\t';
    if (f == 2 && empty_c) continue;
    char hex[16];
    std::snprintf(hex, sizeof hex, "%08x", f * 0x1000 + salt);
    s += hex;
  }
  return s;
}

class TempFile {
 public:
  explicit TempFile(const std::string& text) {
    char tmpl[] = "/tmp/criteo_test_XXXXXX";
    const int fd = mkstemp(tmpl);
    path_ = tmpl;
    ::close(fd);
    std::ofstream(path_, std::ios::binary) << text;
  }
  ~TempFile() { std::remove(path_.c_str()); }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

TEST(Criteo, ParsesEveryFieldMissingValuesAndNegatives) {
  CriteoExample e;
  ASSERT_TRUE(ParseCriteoLine(Line(1, 3, 7, true, true), &e).ok());
  EXPECT_EQ(e.label, 1.0f);
  EXPECT_FLOAT_EQ(e.dense[0], std::log1p(3.0f));
  EXPECT_EQ(e.dense[1], 0.0f);  // -2: log(1 + max(x, 0))
  EXPECT_EQ(e.dense[4], 0.0f);  // missing
  EXPECT_FLOAT_EQ(e.dense[12], std::log1p(15.0f));
  EXPECT_EQ(e.category[0], 7u);
  EXPECT_EQ(e.category[25], 25u * 0x1000 + 7);
  EXPECT_EQ(e.missing, 1u << 2);
  EXPECT_EQ(CriteoKey(e, 2, 1 << 20), 2ull << 56);  // missing: row 0 of feature 2
  EXPECT_EQ(CriteoKey(e, 1, 1 << 20), 1ull << 56 | ((0x1000 + 7) % ((1 << 20) - 1) + 1));
  EXPECT_EQ(CriteoKey(e, 1, 0), 1ull << 56 | (0x1000 + 7 + 1));
  // CRLF line ends.
  ASSERT_TRUE(ParseCriteoLine(Line(0, 1, 1) + "\r", &e).ok());
  EXPECT_EQ(e.label, 0.0f);
  EXPECT_EQ(e.category[25], 25u * 0x1000 + 1);
}

void ExpectRefused(const std::string& line, const std::string& words) {
  CriteoExample e;
  Status s = ParseCriteoLine(line, &e);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << line;
  EXPECT_NE(s.message().find(words), std::string::npos) << s.ToString();
}

TEST(Criteo, MalformedLinesSayWhichFieldAndWhy) {
  ExpectRefused("1\t2\t3", "3 fields, expected 40");
  ExpectRefused(Line(1, 0, 0) + "\textra", "41 fields, expected 40");
  ExpectRefused("", "field 1 (label): '' is not a label");
  ExpectRefused("2" + Line(1, 0, 0).substr(1), "field 1 (label): '2'");
  std::string bad_int = Line(1, 0, 0);
  bad_int.replace(bad_int.find('\t') + 1, 1, "x");
  ExpectRefused(bad_int, "field 2 (I1): 'x' is not an integer");
  std::string big = Line(1, 0, 0);
  big.replace(big.find('\t') + 1, 1, "99999999999999999999");
  ExpectRefused(big, "field 2 (I1)");
  std::string bad_cat = Line(1, 0, 0);
  const size_t c2 = bad_cat.find("00001000");
  bad_cat.replace(c2, 8, "xyz");
  ExpectRefused(bad_cat, "field 16 (C2): 'xyz' is not hexadecimal");
  std::string neg_cat = Line(1, 0, 0);
  neg_cat.replace(neg_cat.find("00001000"), 8, "-1");
  ExpectRefused(neg_cat, "field 16 (C2): '-1' is not hexadecimal");
}

TEST(Criteo, AnEmptyFileHasNoExamples) {
  TempFile f("");
  std::unique_ptr<CriteoFile> file;
  ASSERT_TRUE(CriteoFile::Open(f.path(), {}, &file).ok());
  EXPECT_EQ(file->examples(), 0u);
  std::vector<CriteoExample> out;
  EXPECT_TRUE(file->Read(0, 0, &out).ok());
  EXPECT_EQ(file->Read(0, 1, &out).code(), Code::kOutOfRange);
}

TEST(Criteo, AMissingFileIsNamed) {
  std::unique_ptr<CriteoFile> file;
  Status s = CriteoFile::Open("/no/such/clicks.tsv", {}, &file);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("/no/such/clicks.tsv"), std::string::npos) << s.ToString();
}

TEST(Criteo, ReadsAnyRangeOfALargeFileAndALastLineWithoutNewline) {
  // 20000 lines of about 300 bytes: several index blocks and buffer fills.
  std::string text;
  const int n = 20000;
  for (int i = 0; i < n; ++i) text += Line(i % 2, i, i) + (i + 1 < n ? "\n" : "");
  TempFile f(text);
  std::unique_ptr<CriteoFile> file;
  ASSERT_TRUE(CriteoFile::Open(f.path(), {}, &file).ok());
  ASSERT_EQ(file->examples(), static_cast<uint64_t>(n));
  for (auto [b, e] : {std::pair{0, 10}, {10, 20}, {19990, 20000}, {4095, 4097}, {8192, 8193}, {5, 6}, {12345, 13001}}) {
    std::vector<CriteoExample> out;
    ASSERT_TRUE(file->Read(b, e, &out).ok()) << b;
    ASSERT_EQ(out.size(), static_cast<size_t>(e - b));
    for (int i = b; i < e; ++i) {
      EXPECT_EQ(out[i - b].category[0], static_cast<uint64_t>(i)) << i;
      EXPECT_EQ(out[i - b].label, static_cast<float>(i % 2));
    }
  }
}

TEST(Criteo, AMalformedLineIsNamedOrSkippedAndCounted) {
  const std::string text = Line(1, 0, 0) + "\n" + Line(0, 0, 1) + "\n1\t2\n" + Line(1, 0, 3) + "\r\n";
  TempFile f(text);
  std::unique_ptr<CriteoFile> file;
  ASSERT_TRUE(CriteoFile::Open(f.path(), {}, &file).ok());
  EXPECT_EQ(file->examples(), 4u);
  std::vector<CriteoExample> out;
  Status s = file->Read(0, 4, &out);
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find(f.path() + ":3: 2 fields, expected 40"), std::string::npos) << s.ToString();
  CriteoOptions skip;
  skip.skip_malformed = true;
  ASSERT_TRUE(CriteoFile::Open(f.path(), skip, &file).ok());
  out.clear();
  ASSERT_TRUE(file->Read(0, 4, &out).ok());
  ASSERT_EQ(out.size(), 3u);
  EXPECT_EQ(out[2].category[0], 3u);
  EXPECT_EQ(file->skipped(), 1u);
}

}  // namespace
}  // namespace shardps::worker
