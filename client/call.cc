#include "client/call.h"

#include <algorithm>
#include <cstring>

#include "client/row_cache.h"
#include "common/codec/half.h"
#include "common/codec/wire.h"

namespace shardps {
namespace detail {

void StampBook::Offer(uint32_t table, uint64_t issued, std::shared_ptr<const std::vector<uint64_t>> v) {
  std::lock_guard<std::mutex> lock(mu);
  Entry& e = latest[table];
  if (issued >= e.issued) e = {issued, std::move(v)};
}

std::shared_ptr<const std::vector<uint64_t>> StampBook::Get(uint32_t table) {
  std::lock_guard<std::mutex> lock(mu);
  auto it = latest.find(table);
  return it == latest.end() ? nullptr : it->second.versions;
}

void Call::PartDone(const Status& s, bool clocks, int64_t minc, int64_t maxc, int server, uint64_t version) {
  std::lock_guard<std::mutex> lock(mu);
  if (!s.ok() && status.ok()) status = s;
  if (s.ok() && versions.empty()) staleness = std::max(staleness, version);
  if (clocks && server >= 0 && static_cast<size_t>(server) < versions.size())
    versions[server] = versions[server] == kNoVersion ? version : std::max(versions[server], version);
  if (clocks) {
    min_clock = std::min(min_clock, minc);
    max_clock = std::max(max_clock, maxc);
  }
  if (--parts_left == 0 && DoneLocked()) cv.notify_all();
}

void Call::FrameFreed() {
  std::lock_guard<std::mutex> lock(mu);
  if (--frees_left == 0 && DoneLocked()) cv.notify_all();
}

std::shared_ptr<Call> FailedCall(Status s) {
  auto c = std::make_shared<Call>();
  c->status = std::move(s);
  return c;
}

// ZeroMQ's free function of a borrowed frame (named in tools/tsan.supp: it
// runs on libzmq's own I/O thread).
static void ReleaseFrame(void*, void* hint) {
  auto* holder = static_cast<std::shared_ptr<Call>*>(hint);
  (*holder)->FrameFreed();
  delete holder;
}

zmq::message_t Borrow(const void* data, size_t size, const std::shared_ptr<Call>& call) {
  if (size < kBorrowThreshold) return zmq::message_t(data, size);
  {
    std::lock_guard<std::mutex> lock(call->mu);
    call->frees_left++;
  }
  return zmq::message_t(const_cast<void*>(data), size, &ReleaseFrame, new std::shared_ptr<Call>(call));
}

namespace {
// `cols` values of `dtype` at `src` as float32 at `dst`.
void ValuesToFloat(const uint8_t* src, DType dtype, size_t cols, float* dst) {
  if (dtype == DType::kF32) return (void)std::memcpy(dst, src, cols * sizeof(float));
  // A frame may start at any address: 16-bit values are read aligned.
  std::vector<uint16_t> aligned;
  const uint16_t* h = reinterpret_cast<const uint16_t*>(src);
  if (reinterpret_cast<uintptr_t>(src) % alignof(uint16_t)) {
    aligned.resize(cols);
    std::memcpy(aligned.data(), src, cols * sizeof(uint16_t));
    h = aligned.data();
  }
  if (dtype == DType::kBF16)
    Bf16ToFloat(h, dst, cols);
  else
    F16ToFloat(h, dst, cols);
}
}  // namespace

Status PlaceValues(const Dest& d, std::vector<zmq::message_t>& frames, const std::string& peer) {
  const uint64_t reply_rows = !d.offsets.empty() ? d.offsets.size() - 1 : d.positions.size();
  const uint64_t want = d.positions.empty() ? d.floats * DTypeBytes(d.dtype) : reply_rows * d.cols * DTypeBytes(d.dtype);
  uint64_t got = 0;
  for (size_t i = 1; i < frames.size(); ++i) got += frames[i].size();
  if (frames.size() < 2 || got != want || (!d.positions.empty() && frames.size() != 2))
    return Status::BadMessage(peer + " answered a pull with " + std::to_string(got) + " bytes of values in " +
                              std::to_string(frames.size() - 1) + " frames, expected " + std::to_string(want));
  for (size_t i = 1; i < frames.size() && d.dtype != DType::kF32; ++i)
    if (frames[i].size() % 2)
      return Status::BadMessage(peer + " answered a 16-bit pull with a frame of " + std::to_string(frames[i].size()) +
                                " bytes");
  // A 16-bit row range, widened frame after frame as it is placed (no
  // more passes than float32's copy).
  auto widen = [&](float* dst) {
    for (size_t i = 1; i < frames.size(); ++i) {
      const size_t n = frames[i].size() / 2;
      ValuesToFloat(static_cast<const uint8_t*>(frames[i].data()), d.dtype, n, dst);
      dst += n;
    }
  };
  if (d.view && d.dtype != DType::kF32) {
    // PullView of 16-bit values: widened once, into a float32 frame kept.
    zmq::message_t m(d.floats * sizeof(float));
    widen(static_cast<float*>(m.data()));
    d.view->parts[d.view_offset].push_back(std::move(m));
  } else if (d.view) {
    // PullView: keep the frames, no copy.
    auto& kept = d.view->parts[d.view_offset];
    for (size_t i = 1; i < frames.size(); ++i) kept.push_back(std::move(frames[i]));
  } else if (d.positions.empty() && d.dtype != DType::kF32) {
    widen(d.out);
  } else if (d.positions.empty()) {
    // A row range may come as one frame per run of partitions, in order.
    auto* dst = reinterpret_cast<uint8_t*>(d.out);
    for (size_t i = 1; i < frames.size(); ++i) {
      std::memcpy(dst, frames[i].data(), frames[i].size());
      dst += frames[i].size();
    }
  } else if (d.offsets.empty()) {
    const auto* src = static_cast<const uint8_t*>(frames[1].data());
    const size_t row = d.cols * DTypeBytes(d.dtype);
    for (size_t i = 0; i < d.positions.size(); ++i)
      ValuesToFloat(src + i * row, d.dtype, d.cols, d.out + static_cast<size_t>(d.positions[i]) * d.cols);
  } else {
    // One reply row for every place of its key: converted once, copied to the rest.
    const auto* src = static_cast<const uint8_t*>(frames[1].data());
    const size_t row = d.cols * DTypeBytes(d.dtype);
    for (size_t i = 0; i + 1 < d.offsets.size(); ++i) {
      float* first = d.out + static_cast<size_t>(d.positions[d.offsets[i]]) * d.cols;
      ValuesToFloat(src + i * row, d.dtype, d.cols, first);
      if (d.cache) d.cache->Put(d.cache_table, d.cache_keys[i], d.cache_clock, first, d.cols);
      for (uint32_t k = d.offsets[i] + 1; k < d.offsets[i + 1]; ++k)
        std::memcpy(d.out + static_cast<size_t>(d.positions[k]) * d.cols, first, d.cols * sizeof(float));
    }
  }
  return Status::OK();
}

}  // namespace detail

// ---- Request, PullStamp, PulledRows: the public handles on the above ----

Status Request::Wait(std::chrono::milliseconds timeout) {
  if (!call_) return Status::OK();  // a default-constructed Request: nothing to wait for
  std::unique_lock<std::mutex> lock(call_->mu);
  if (!call_->cv.wait_for(lock, timeout, [&] { return call_->DoneLocked(); }))
    return Status::Timeout(std::string(call_->op) + " not answered within " + std::to_string(timeout.count()) +
                           " ms (" + std::to_string(call_->parts_left) + " server replies outstanding)");
  if (call_->status.ok() && !call_->stamp && !call_->versions.empty()) {
    // The caller now reads these values: later pushes of the table are
    // computed on them (unless a later-issued pull was waited on already).
    call_->stamp = std::make_shared<const std::vector<uint64_t>>(call_->versions);
    if (auto book = call_->book.lock()) book->Offer(call_->table, call_->issued, call_->stamp);
  }
  return call_->status;
}

uint64_t Request::staleness() const {
  if (!call_) return 0;
  std::lock_guard<std::mutex> lock(call_->mu);
  return call_->staleness;
}

int64_t PullStamp::UpdatesSince(const PullStamp& earlier) const {
  if (!versions_ || !earlier.versions_ || table_ != earlier.table_ ||
      versions_->size() != earlier.versions_->size())
    return -1;
  constexpr int kCountBits = wire::kVersionCountBits;  // below the server's incarnation tag
  constexpr uint64_t kCount = (1ull << kCountBits) - 1;
  int64_t most = -1;
  for (size_t i = 0; i < versions_->size(); ++i) {
    const uint64_t now = (*versions_)[i], then = (*earlier.versions_)[i];
    if (now == detail::kNoVersion && then == detail::kNoVersion) continue;  // a server neither read
    if (now == detail::kNoVersion || then == detail::kNoVersion || now >> kCountBits != then >> kCountBits) return -1;
    if ((now & kCount) < (then & kCount)) return -1;  // `earlier` is the later one
    most = std::max(most, static_cast<int64_t>((now & kCount) - (then & kCount)));
  }
  return most;
}

PullStamp Request::stamp() const {
  PullStamp s;
  if (!call_) return s;
  std::lock_guard<std::mutex> lock(call_->mu);
  if (!call_->stamp) return s;  // not a pull, or no Wait() returned OK yet
  s.table_ = call_->table;
  s.versions_ = call_->stamp;
  return s;
}

Status Request::Wait() {
  if (!call_) return Status::OK();
  return Wait(call_->default_timeout.count() > 0 ? call_->default_timeout : std::chrono::milliseconds(120000));
}

bool Request::Done() const {
  if (!call_) return true;
  std::lock_guard<std::mutex> lock(call_->mu);
  return call_->DoneLocked();
}

int64_t Request::min_clock() const {
  if (!call_) return 0;
  std::lock_guard<std::mutex> lock(call_->mu);
  return call_->min_clock;
}

int64_t Request::max_clock() const {
  if (!call_) return 0;
  std::lock_guard<std::mutex> lock(call_->mu);
  return call_->max_clock;
}

PulledRows::PulledRows() = default;
PulledRows::~PulledRows() = default;
PulledRows::PulledRows(PulledRows&&) noexcept = default;
PulledRows& PulledRows::operator=(PulledRows&&) noexcept = default;

std::vector<std::span<const float>> PulledRows::pieces() const {
  std::vector<std::span<const float>> out;
  if (!frames_) return out;
  for (const auto& [offset, frames] : frames_->parts)
    for (const auto& f : frames) out.emplace_back(static_cast<const float*>(f.data()), f.size() / sizeof(float));
  return out;
}

uint64_t PulledRows::floats() const {
  uint64_t n = 0;
  for (const auto& p : pieces()) n += p.size();
  return n;
}

Status PulledRows::CopyTo(std::span<float> out) const {
  if (out.size() != floats())
    return Status::SizeMismatch("output array has " + std::to_string(out.size()) + " floats, the pulled rows " +
                                std::to_string(floats()));
  float* dst = out.data();
  for (const auto& p : pieces()) {
    std::memcpy(dst, p.data(), p.size_bytes());
    dst += p.size();
  }
  return Status::OK();
}

}  // namespace shardps
