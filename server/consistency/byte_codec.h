// ByteWriter / ByteReader: the plain little-endian encoding of a replica
// group's state in a fill (re-replication, docs/fault-tolerance.md): fixed-
// width integers, arrays of them, and ZeroMQ messages, appended to a
// string; the reader checks every length against what is left and says what
// was cut short.
//
// Thread: none of its own.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <zmq.hpp>

#include "shardps/status.h"

namespace shardps {

class ByteWriter {
 public:
  explicit ByteWriter(std::string* out) : out_(out) {}
  template <typename T>
  void Put(T v) {
    static_assert(std::is_trivially_copyable_v<T>);
    out_->append(reinterpret_cast<const char*>(&v), sizeof v);
  }
  template <typename T, typename A>
  void PutArray(const std::vector<T, A>& v) {
    Put<uint64_t>(v.size());
    out_->append(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
  }
  void PutBytes(std::string_view b) {
    Put<uint64_t>(b.size());
    out_->append(b.data(), b.size());
  }
  void PutFrames(const std::vector<zmq::message_t>& frames) {
    Put<uint32_t>(static_cast<uint32_t>(frames.size()));
    for (const auto& f : frames) PutBytes(f.to_string_view());
  }

 private:
  std::string* out_;
};

class ByteReader {
 public:
  // `what` names the encoded thing in errors.
  ByteReader(std::string_view in, std::string what) : in_(in), what_(std::move(what)) {}
  template <typename T>
  bool Get(T* v) {
    static_assert(std::is_trivially_copyable_v<T>);
    if (!Need(sizeof(T))) return false;
    std::memcpy(v, in_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return true;
  }
  template <typename T, typename A>
  bool GetArray(std::vector<T, A>* v, uint64_t max_count) {
    uint64_t n = 0;
    if (!Get(&n)) return false;
    if (n > max_count || n > (in_.size() - at_) / sizeof(T)) return Fail("an array of " + std::to_string(n));
    v->resize(n);
    if (n) std::memcpy(v->data(), in_.data() + at_, n * sizeof(T));
    at_ += n * sizeof(T);
    return true;
  }
  bool GetBytes(std::string_view* b) {
    uint64_t n = 0;
    if (!Get(&n)) return false;
    if (!Need(n)) return false;
    *b = in_.substr(at_, n);
    at_ += n;
    return true;
  }
  bool GetFrames(std::vector<zmq::message_t>* frames) {
    uint32_t n = 0;
    if (!Get(&n)) return false;
    if (n > 1024) return Fail(std::to_string(n) + " frames");
    frames->clear();
    for (uint32_t i = 0; i < n; ++i) {
      std::string_view b;
      if (!GetBytes(&b)) return false;
      frames->emplace_back(b.data(), b.size());
    }
    return true;
  }
  bool done() const { return at_ == in_.size(); }
  // OK when everything was read and nothing failed; else what was wrong.
  Status Finish() const {
    if (!error_.empty()) return Status::BadMessage(what_ + ": " + error_);
    if (!done()) return Status::BadMessage(what_ + ": " + std::to_string(in_.size() - at_) + " bytes left over");
    return Status::OK();
  }
  bool Fail(const std::string& why) {
    if (error_.empty()) error_ = why + " at byte " + std::to_string(at_) + " of " + std::to_string(in_.size());
    at_ = in_.size();
    return false;
  }

 private:
  bool Need(uint64_t n) {
    if (n <= in_.size() - at_) return true;
    return Fail("cut short (" + std::to_string(n) + " bytes wanted)");
  }
  std::string_view in_;
  std::string what_;
  size_t at_ = 0;
  std::string error_;
};

}  // namespace shardps
