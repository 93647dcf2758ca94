// The framing every fuzz target shares: an input is read front to back as
// small integers and length-prefixed frames ([u32 little-endian length]
// [bytes]; a length past the end takes what is left), so one input can hold
// a multipart message, or several messages, and the mutator can still
// change any byte. make_corpus.cc writes seeds in the same framing
// (FrameWriter).
#pragma once

#include <cstddef>
#include <cstdint>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

namespace shardps::fuzz {

class Reader {
 public:
  Reader(const uint8_t* data, size_t size) : p_(data), end_(data + size) {}
  bool empty() const { return p_ == end_; }
  size_t left() const { return static_cast<size_t>(end_ - p_); }
  uint8_t U8() { return p_ < end_ ? *p_++ : 0; }
  uint32_t U32() {
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(U8()) << (8 * i);
    return v;
  }
  // One frame: [u32 length][bytes], clipped to what is left.
  std::string_view Frame() {
    size_t n = U32();
    if (n > left()) n = left();
    std::string_view f(reinterpret_cast<const char*>(p_), n);
    p_ += n;
    return f;
  }
  // What is left, as one frame.
  std::string_view Rest() {
    std::string_view f(reinterpret_cast<const char*>(p_), left());
    p_ = end_;
    return f;
  }

 private:
  const uint8_t* p_;
  const uint8_t* end_;
};

// Builds inputs in that framing (the seed corpus).
class Writer {
 public:
  Writer& U8(uint8_t v) {
    out_.push_back(static_cast<char>(v));
    return *this;
  }
  Writer& U32(uint32_t v) {
    for (int i = 0; i < 4; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
    return *this;
  }
  Writer& Frame(const void* data, size_t n) {
    U32(static_cast<uint32_t>(n));
    out_.append(static_cast<const char*>(data), n);
    return *this;
  }
  Writer& Frame(std::string_view s) { return Frame(s.data(), s.size()); }
  Writer& Raw(std::string_view s) {
    out_.append(s);
    return *this;
  }
  const std::string& str() const { return out_; }

 private:
  std::string out_;
};

// A directory of this process's own, made on first use (under $TMPDIR, else
// /dev/shm where writable, else /tmp) and removed with everything in it
// when the process exits normally.
inline const std::string& TempDir(const char* name) {
  static std::string dir;
  if (dir.empty()) {
    const char* base = std::getenv("TMPDIR");
    std::string b = base && *base ? base : std::filesystem::is_directory("/dev/shm") ? "/dev/shm" : "/tmp";
    std::string t = b + "/shardps-fuzz-" + name + "-XXXXXX";
    if (!mkdtemp(t.data())) std::abort();
    dir = t;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(dir, ec);
    });
  }
  return dir;
}

}  // namespace shardps::fuzz
