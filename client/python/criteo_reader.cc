#include "client/python/criteo_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>
#include <numeric>
#include <random>

#include "worker/data/criteo.h"

namespace shardps::python {

namespace {

// The lines of `path` (a last line without '\n' counts), read in blocks.
Status CountLines(const std::string& path, uint64_t* n) {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), &std::fclose);
  if (!f) return Status::InvalidArgument("cannot read '" + path + "': " + std::strerror(errno));
  std::vector<char> buf(1 << 20);
  *n = 0;
  char last = '\n';
  for (size_t got; (got = std::fread(buf.data(), 1, buf.size(), f.get())) > 0;) {
    *n += static_cast<uint64_t>(std::count(buf.data(), buf.data() + got, '\n'));
    last = buf[got - 1];
  }
  if (std::ferror(f.get())) return Status::InvalidArgument("cannot read '" + path + "': " + std::strerror(errno));
  if (last != '\n') ++*n;
  return Status::OK();
}

}  // namespace

void ResizeBatch(uint32_t n, CriteoBatch* b) {
  b->size = n;
  b->labels.resize(n);
  b->dense.resize(static_cast<size_t>(n) * worker::kCriteoIntegers);
  b->keys.resize(static_cast<size_t>(n) * worker::kCriteoCategories);
}

void PutExample(const worker::CriteoExample& e, uint64_t rows, size_t j, CriteoBatch* b) {
  b->labels[j] = e.label;
  std::copy_n(e.dense, worker::kCriteoIntegers, &b->dense[j * worker::kCriteoIntegers]);
  for (int c = 0; c < worker::kCriteoCategories; ++c)
    b->keys[j * worker::kCriteoCategories + c] = static_cast<int64_t>(worker::CriteoKey(e, c, rows));
}

Status CriteoReader::Open(const CriteoReaderOptions& o, std::unique_ptr<CriteoReader>* out) {
  if (o.batch == 0) return Status::InvalidArgument("batch must be at least 1");
  if (o.world == 0 || o.rank >= o.world)
    return Status::InvalidArgument("rank " + std::to_string(o.rank) + " is not below world " + std::to_string(o.world));
  if (o.chunk_batches == 0) return Status::InvalidArgument("chunk_batches must be at least 1");
  if (o.ahead == 0) return Status::InvalidArgument("ahead must be at least 1");
  std::unique_ptr<CriteoReader> r(new CriteoReader(o));
  SHARDPS_RETURN_IF_ERROR(CountLines(o.path, &r->lines_));
  const uint64_t per_step = static_cast<uint64_t>(o.batch) * o.world;
  if (o.steps >= 0) {
    r->steps_ = static_cast<uint64_t>(o.steps);
  } else {
    r->steps_ = r->lines_ / per_step + (o.last_partial && o.world == 1 && r->lines_ % per_step ? 1 : 0);
  }
  r->thread_ = std::thread([p = r.get()] { p->Run(); });
  *out = std::move(r);
  return Status::OK();
}

CriteoReader::~CriteoReader() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopping_ = true;
  }
  cv_.notify_all();
  if (thread_.joinable()) thread_.join();
}

bool CriteoReader::Put(CriteoBatch b) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return stopping_ || ready_.size() < o_.ahead; });
  if (stopping_) return false;
  ready_.push_back(std::move(b));
  cv_.notify_all();
  return true;
}

void CriteoReader::Run() {
  Status s = ReadAll();
  std::lock_guard<std::mutex> lock(mu_);
  error_ = std::move(s);
  done_ = true;
  cv_.notify_all();
}

Status CriteoReader::ReadAll() {
  std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(o_.path.c_str(), "rb"), &std::fclose);
  if (!f) return Status::InvalidArgument("cannot read '" + o_.path + "': " + std::strerror(errno));
  const uint64_t chunk_lines = static_cast<uint64_t>(o_.chunk_batches) * o_.world * o_.batch;
  std::vector<std::string> lines;
  std::vector<uint32_t> order;
  uint64_t k = 0, mine = 0, first_line = 0;  // the epoch's batch index; this worker's batches; the chunk's first line
  char* buf = nullptr;
  size_t cap = 0;
  struct Free {
    char** p;
    ~Free() { std::free(*p); }
  } free_buf{&buf};
  for (uint64_t chunk = 0; mine < steps_; ++chunk, first_line += lines.size()) {
    lines.clear();
    for (ssize_t n; lines.size() < chunk_lines && (n = ::getline(&buf, &cap, f.get())) > 0;) {
      std::string_view line(buf, static_cast<size_t>(n));
      if (!line.empty() && line.back() == '\n') line.remove_suffix(1);
      lines.emplace_back(line);
    }
    if (lines.empty()) break;
    order.resize(lines.size());
    std::iota(order.begin(), order.end(), 0u);
    if (o_.shuffle) {  // Fisher-Yates, the same on every worker
      std::mt19937_64 rng(o_.seed * 0x9E3779B97F4A7C15ull ^ o_.epoch * 0xC2B2AE3D27D4EB4Full ^ chunk);
      for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[rng() % i]);
    }
    const bool partial_ok = o_.last_partial && o_.world == 1;
    const size_t batches = partial_ok ? (lines.size() + o_.batch - 1) / o_.batch : lines.size() / o_.batch;
    for (size_t b = 0; b < batches && mine < steps_; ++b, ++k) {
      if (k % o_.world != o_.rank) continue;
      const size_t lo = b * o_.batch, hi = std::min<size_t>(lo + o_.batch, lines.size());
      CriteoBatch out;
      ResizeBatch(static_cast<uint32_t>(hi - lo), &out);
      worker::CriteoExample e;
      for (size_t i = lo; i < hi; ++i) {
        const uint32_t at = order[i];
        if (Status s = worker::ParseCriteoLine(lines[at], &e); !s.ok())
          return Status::InvalidArgument(o_.path + ":" + std::to_string(first_line + at + 1) + ": " + s.message());
        PutExample(e, o_.rows, i - lo, &out);
      }
      ++mine;
      if (!Put(std::move(out))) return Status::OK();
    }
  }
  if (std::ferror(f.get())) return Status::InvalidArgument("cannot read '" + o_.path + "': " + std::strerror(errno));
  return Status::OK();
}

Status CriteoReader::Next(CriteoBatch* out, bool* got) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !ready_.empty() || done_; });
  if (!ready_.empty()) {
    *out = std::move(ready_.front());
    ready_.pop_front();
    cv_.notify_all();
    *got = true;
    return Status::OK();
  }
  *got = false;
  Status s = std::move(error_);
  error_ = Status::OK();
  return s;
}

}  // namespace shardps::python
