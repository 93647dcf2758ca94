#include "worker/data/criteo.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <cmath>
#include <cstring>

namespace shardps::worker {

namespace {

constexpr size_t kBufferBytes = 1 << 20;

std::string Shown(std::string_view v) {
  std::string s(v.substr(0, 40));
  if (v.size() > 40) s += "...";
  return "'" + s + "'";
}

Status FieldError(int field, std::string_view value, const std::string& what) {
  return Status::InvalidArgument("field " + std::to_string(field) + " (" + CriteoFieldName(field) + "): " +
                                 Shown(value) + " " + what);
}

Status ParseInteger(int field, std::string_view v, float* out) {
  if (v.empty()) {
    *out = 0.0f;
    return Status::OK();
  }
  int64_t x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x);
  if (ec == std::errc::result_out_of_range) return FieldError(field, v, "is out of range");
  if (ec != std::errc() || end != v.data() + v.size()) return FieldError(field, v, "is not an integer");
  *out = x > 0 ? static_cast<float>(std::log1p(static_cast<double>(x))) : 0.0f;
  return Status::OK();
}

Status ParseCategory(int field, std::string_view v, uint64_t* out) {
  if (v.size() > 16) return FieldError(field, v, "has more than 16 hexadecimal digits");
  uint64_t x = 0;
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), x, 16);
  if (ec != std::errc() || end != v.data() + v.size() || v[0] == '-' || v[0] == '+')
    return FieldError(field, v, "is not hexadecimal");
  *out = x;
  return Status::OK();
}

}  // namespace

std::string CriteoFieldName(int field) {
  if (field == 1) return "label";
  if (field <= 1 + kCriteoIntegers) return "I" + std::to_string(field - 1);
  return "C" + std::to_string(field - 1 - kCriteoIntegers);
}

Status ParseCriteoLine(std::string_view line, CriteoExample* out) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  *out = CriteoExample{};
  int field = 0;
  size_t pos = 0;
  for (;;) {
    const size_t tab = line.find('\t', pos);
    const std::string_view v = line.substr(pos, tab == std::string_view::npos ? std::string_view::npos : tab - pos);
    if (++field > kCriteoFields) break;
    if (field == 1) {
      if (v != "0" && v != "1") return FieldError(1, v, "is not a label (0 or 1)");
      out->label = v == "1" ? 1.0f : 0.0f;
    } else if (field <= 1 + kCriteoIntegers) {
      SHARDPS_RETURN_IF_ERROR(ParseInteger(field, v, &out->dense[field - 2]));
    } else {
      const int f = field - 2 - kCriteoIntegers;
      if (v.empty())
        out->missing |= 1u << f;
      else
        SHARDPS_RETURN_IF_ERROR(ParseCategory(field, v, &out->category[f]));
    }
    if (tab == std::string_view::npos) break;
    pos = tab + 1;
  }
  if (field != kCriteoFields) {
    const size_t fields = 1 + static_cast<size_t>(std::count(line.begin(), line.end(), '\t'));
    return Status::InvalidArgument(std::to_string(fields) + " fields, expected " + std::to_string(kCriteoFields) +
                                   " (label, 13 integers, 26 categories)");
  }
  return Status::OK();
}

Status CriteoFile::Open(const std::string& path, const CriteoOptions& o, std::unique_ptr<CriteoFile>* out) {
  std::unique_ptr<CriteoFile> f(new CriteoFile());
  f->path_ = path;
  f->opts_ = o;
  f->fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (f->fd_ < 0) return Status::InvalidArgument("cannot open click log '" + path + "': " + std::strerror(errno));
  struct stat st;
  if (fstat(f->fd_, &st) != 0 || !S_ISREG(st.st_mode))
    return Status::InvalidArgument("click log '" + path + "' is not a regular file");
  f->size_ = static_cast<uint64_t>(st.st_size);
  f->buf_.resize(kBufferBytes);
  SHARDPS_RETURN_IF_ERROR(f->Index());
  *out = std::move(f);
  return Status::OK();
}

CriteoFile::~CriteoFile() {
  if (fd_ >= 0) ::close(fd_);
}

Status CriteoFile::Index() {
  index_.assign(1, 0);
  uint64_t at = 0, lines = 0;
  bool open_line = false;  // bytes since the last '\n'
  while (at < size_) {
    const ssize_t n = ::pread(fd_, buf_.data(), buf_.size(), static_cast<off_t>(at));
    if (n < 0) return Status::InvalidArgument("reading click log '" + path_ + "': " + std::strerror(errno));
    if (n == 0) break;
    for (const char *p = buf_.data(), *end = p + n; p < end;) {
      const char* nl = static_cast<const char*>(std::memchr(p, '\n', end - p));
      if (!nl) {
        open_line = true;
        break;
      }
      ++lines;
      open_line = false;
      if (lines % kIndexEvery == 0) index_.push_back(at + static_cast<uint64_t>(nl + 1 - buf_.data()));
      p = nl + 1;
    }
    at += static_cast<uint64_t>(n);
  }
  lines_ = lines + (open_line ? 1 : 0);
  return Seek(0);
}

Status CriteoFile::Seek(uint64_t line) {
  const uint64_t block = line / kIndexEvery;
  buf_at_ = index_[block];
  buf_len_ = buf_pos_ = 0;
  carry_.clear();
  line_ = block * kIndexEvery;
  Status error;
  std::string_view skipped;
  while (line_ < line)
    if (!NextLine(&skipped, &error)) return error.ok() ? Status::Internal("click log index past its end") : error;
  return Status::OK();
}

bool CriteoFile::NextLine(std::string_view* line, Status* error) {
  carry_.clear();
  for (;;) {
    if (buf_pos_ == buf_len_) {
      if (buf_at_ >= size_) {
        if (carry_.empty()) return false;
        *line = carry_;  // a last line without '\n'
        ++line_;
        return true;
      }
      const ssize_t n = ::pread(fd_, buf_.data(), buf_.size(), static_cast<off_t>(buf_at_));
      if (n <= 0) {
        *error = Status::InvalidArgument("reading click log '" + path_ + "': " +
                                         (n < 0 ? std::strerror(errno) : "the file got shorter"));
        return false;
      }
      buf_at_ += static_cast<uint64_t>(n);
      buf_len_ = static_cast<size_t>(n);
      buf_pos_ = 0;
    }
    const char* start = buf_.data() + buf_pos_;
    const char* nl = static_cast<const char*>(std::memchr(start, '\n', buf_len_ - buf_pos_));
    if (!nl) {
      carry_.append(start, buf_len_ - buf_pos_);
      buf_pos_ = buf_len_;
      continue;
    }
    const size_t len = static_cast<size_t>(nl - start);
    buf_pos_ += len + 1;
    ++line_;
    if (carry_.empty()) {
      *line = std::string_view(start, len);
    } else {
      carry_.append(start, len);
      *line = carry_;
    }
    return true;
  }
}

Status CriteoFile::Read(uint64_t begin, uint64_t end, std::vector<CriteoExample>* out) {
  if (begin > end || end > lines_)
    return Status::OutOfRange("examples [" + std::to_string(begin) + ", " + std::to_string(end) + ") of click log '" +
                              path_ + "' with " + std::to_string(lines_) + " examples");
  if (begin != line_) SHARDPS_RETURN_IF_ERROR(Seek(begin));
  out->reserve(out->size() + (end - begin));
  std::string_view line;
  Status error;
  while (line_ < end) {
    if (!NextLine(&line, &error))
      return error.ok() ? Status::Internal("click log '" + path_ + "' ended before its indexed lines") : error;
    CriteoExample e;
    Status s = ParseCriteoLine(line, &e);
    if (s.ok()) {
      out->push_back(e);
    } else if (opts_.skip_malformed) {
      ++skipped_;
    } else {
      return Status::InvalidArgument(path_ + ":" + std::to_string(line_) + ": " + s.message());
    }
  }
  return Status::OK();
}

}  // namespace shardps::worker
