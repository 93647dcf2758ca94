// Criteo display-advertising click logs (TSV), read from disk a block at a
// time: one example a line, 40 tab-separated fields —
//   label (0 or 1), I1..I13 (integer counts; may be empty, may be negative),
//   C1..C26 (categories as hexadecimal hashes, usually 8 digits; may be empty)
// — with '\n' or "\r\n" line ends. An empty field is missing.
//
// CriteoFile indexes a file once (the byte offset of every 4096th line) and
// then reads any range of examples [begin, end) without loading the rest:
// the examples of a work-pool grant (worker/trainers/dlrm_trainer.h). A malformed
// line is an error naming the file, the line and the field; with
// `skip_malformed` it is skipped and counted instead.
//
// Thread-safety: a CriteoFile is used by one thread at a time.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "shardps/status.h"

namespace shardps::worker {

inline constexpr int kCriteoIntegers = 13;
inline constexpr int kCriteoCategories = 26;
inline constexpr int kCriteoFields = 1 + kCriteoIntegers + kCriteoCategories;

// One parsed line.
struct CriteoExample {
  float label = 0;                        // 0 or 1
  float dense[kCriteoIntegers] = {};      // log(1 + max(x, 0)); missing 0
  uint64_t category[kCriteoCategories] = {};  // the hash as written (up to 16 hex digits)
  uint32_t missing = 0;                   // bit f: category f was empty
};

// Parses one line (without its '\n'; a trailing '\r' is dropped). On error
// InvalidArgument saying which field and what is wrong, e.g.
// "field 16 (C2): 'xyz' is not hexadecimal".
Status ParseCriteoLine(std::string_view line, CriteoExample* out);
// "label", "I1".."I13", "C1".."C26" for fields 1..40.
std::string CriteoFieldName(int field);

// The embedding-table key of category `f` of `e`: one sparse table holds
// every feature, each in its own key space (the feature in the top byte).
// A missing category is row 0 of its feature; with hash_rows > 0 the hash is
// folded into rows 1 .. hash_rows - 1 as a fixed-size table would
// (../shared/bench/torch_dlrm.py does the same); with 0 (or 1) each value
// keeps a row of its own (hash + 1, for hashes below 2^56 - 1).
inline uint64_t CriteoKey(const CriteoExample& e, int f, uint64_t hash_rows) {
  uint64_t row = 0;
  if (!(e.missing >> f & 1))
    row = e.category[f] % (hash_rows > 1 ? hash_rows - 1 : (1ull << 56) - 1) + 1;
  return static_cast<uint64_t>(f) << 56 | row;
}

struct CriteoOptions {
  bool skip_malformed = false;  // skip and count malformed lines instead of failing
};

class CriteoFile {
 public:
  // Opens and indexes `path`. NotFound-like errors name the file.
  static Status Open(const std::string& path, const CriteoOptions& o, std::unique_ptr<CriteoFile>* out);
  ~CriteoFile();
  CriteoFile(const CriteoFile&) = delete;
  CriteoFile& operator=(const CriteoFile&) = delete;

  const std::string& path() const { return path_; }
  // Lines in the file (a last line without '\n' counts; a file ending in
  // '\n' has no empty last line).
  uint64_t examples() const { return lines_; }
  // Appends examples [begin, end) (of examples()) to `out`. Reading on from
  // where the last read ended continues without seeking. With
  // skip_malformed a bad line adds nothing and counts in skipped().
  Status Read(uint64_t begin, uint64_t end, std::vector<CriteoExample>* out);
  uint64_t skipped() const { return skipped_; }

 private:
  static constexpr uint64_t kIndexEvery = 4096;
  CriteoFile() = default;
  Status Index();
  Status Seek(uint64_t line);
  // The next line (without '\n'), or false at the end of the file.
  bool NextLine(std::string_view* line, Status* error);

  std::string path_;
  CriteoOptions opts_;
  int fd_ = -1;
  uint64_t size_ = 0;
  uint64_t lines_ = 0;
  std::vector<uint64_t> index_;  // byte offset of line i * kIndexEvery
  std::vector<char> buf_;        // bytes [buf_at_, buf_at_ + buf_len_) of the file
  uint64_t buf_at_ = 0;
  size_t buf_len_ = 0, buf_pos_ = 0;
  uint64_t line_ = 0;            // the line NextLine returns next
  uint64_t skipped_ = 0;
  std::string carry_;            // a line that straddles two buffer fills
};

}  // namespace shardps::worker
