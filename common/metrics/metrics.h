// Prometheus metrics: counters, gauges and histograms kept in a Registry and
// rendered in the text exposition format 0.0.4 (what GET /metrics serves, see
// common/metrics/metrics_http.h).
//
//   metrics::Registry reg;
//   auto& pushes = reg.GetCounter("shardps_push_requests_total",
//                                 "Push requests handled.", {{"table", "emb"}});
//   auto& lat = reg.GetHistogram("shardps_push_latency_seconds",
//                                "Push handling time.", metrics::LatencyBuckets());
//   ...                                       // on the event loop thread:
//   pushes.SingleWriterInc();
//   lat.SingleWriterObserve(seconds);
//   ...                                       // on the HTTP thread:
//   std::string text = reg.Render();
//
// Threads. Creating a series (Registry::Get*) takes the registry's mutex and
// may allocate; it is meant for start-up. Updating one never locks and never
// allocates: every value is a std::atomic used with relaxed ordering, so any
// thread may read it (Render) while another updates it.
//  - Add / Inc / Set / Observe are safe with any number of writer threads
//    (locked read-modify-write: fetch_add, or a compare-exchange loop for
//    doubles).
//  - SingleWriter* do a relaxed load and a store: no locked instruction, the
//    cheapest update, but correct ONLY while exactly one thread ever writes
//    that series (e.g. the server's event loop). Concurrent readers are fine;
//    a second writer loses updates.
//
// Errors. Bad metric or label names, a name reused with another type, help
// text or bucket layout throw std::invalid_argument from Registry::Get*.
//
// A Registry must outlive every reference it handed out and every
// MetricsServer serving it. References stay valid (series are never moved or
// removed).
#pragma once

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

namespace shardps::metrics {

// (name, value) pairs; the order given does not matter (a series is
// identified and rendered with its labels sorted by name).
using Labels = std::vector<std::pair<std::string, std::string>>;

// A monotonically increasing count (requests, bytes, errors...).
class Counter {
 public:
  // Any number of writer threads (lock xadd).
  void Inc() { Add(1); }
  void Add(uint64_t v) { v_.fetch_add(v, std::memory_order_relaxed); }
  // Exactly one writer thread (plain load + store).
  void SingleWriterInc() { SingleWriterAdd(1); }
  void SingleWriterAdd(uint64_t v) {
    v_.store(v_.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }
  uint64_t Value() const { return v_.load(std::memory_order_relaxed); }
  // A counter that mirrors a total kept elsewhere (a Registry collector,
  // one writer): the total, never lower than the last one set.
  void SetTotal(uint64_t v) { v_.store(v, std::memory_order_relaxed); }

 private:
  std::atomic<uint64_t> v_{0};
};

// A value that goes up and down (queue depth, bytes resident, a ratio...).
class Gauge {
 public:
  void Set(double v) { v_.store(v, std::memory_order_relaxed); }
  // Any number of writer threads (compare-exchange loop).
  void Add(double v) { v_.fetch_add(v, std::memory_order_relaxed); }
  void Sub(double v) { Add(-v); }
  // Exactly one writer thread (plain load + store).
  void SingleWriterAdd(double v) {
    v_.store(v_.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }
  double Value() const { return v_.load(std::memory_order_relaxed); }

 private:
  std::atomic<double> v_{0.0};
};

// Observations counted into buckets with fixed upper bounds (inclusive:
// bucket i holds bounds[i-1] < v <= bounds[i]), plus an implicit +Inf bucket,
// and their sum. Rendered as cumulative name_bucket{le="..."} lines,
// name_sum and name_count; name_count is rendered as the +Inf bucket so the
// two always agree. A NaN observation lands in the +Inf bucket.
class Histogram {
 public:
  // REQUIRES: bounds finite and strictly increasing (Registry checks).
  explicit Histogram(std::span<const double> bounds);

  // Any number of writer threads: 1 fetch_add + 1 compare-exchange loop.
  void Observe(double v) {
    buckets_[BucketOf(v)].fetch_add(1, std::memory_order_relaxed);
    sum_.fetch_add(v, std::memory_order_relaxed);
  }
  // Exactly one writer thread: loads and stores only.
  void SingleWriterObserve(double v) {
    auto& b = buckets_[BucketOf(v)];
    b.store(b.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
    sum_.store(sum_.load(std::memory_order_relaxed) + v, std::memory_order_relaxed);
  }

  size_t num_bounds() const { return n_; }
  double bound(size_t i) const { return bounds_[i]; }
  // Non-cumulative count of bucket i (i == num_bounds(): the +Inf bucket).
  uint64_t BucketCount(size_t i) const { return buckets_[i].load(std::memory_order_relaxed); }
  uint64_t Count() const;  // sum of all buckets
  double Sum() const { return sum_.load(std::memory_order_relaxed); }

 private:
  // First bucket whose bound is >= v (n_ for +Inf and NaN).
  size_t BucketOf(double v) const {
    size_t lo = 0, hi = n_;  // binary search, the bounds are sorted
    while (lo < hi) {
      size_t mid = (lo + hi) / 2;
      if (bounds_[mid] < v) lo = mid + 1; else hi = mid;
    }
    return v == v ? lo : n_;  // NaN compares false everywhere: count as +Inf
  }

  size_t n_;
  std::unique_ptr<double[]> bounds_;
  std::unique_ptr<std::atomic<uint64_t>[]> buckets_;  // n_ + 1
  std::atomic<double> sum_{0.0};
};

// Latency buckets in seconds, 50us .. 10s:
// 50us 100us 250us 500us 1ms 2.5ms 5ms 10ms 25ms 50ms 100ms 250ms 500ms 1s 2.5s 5s 10s.
std::vector<double> LatencyBuckets();
// start, start*factor, ... (count bounds). REQUIRES start > 0, factor > 1.
std::vector<double> ExponentialBuckets(double start, double factor, int count);

// Holds metric families and renders them. Not copyable or movable.
class Registry {
 public:
  Registry();
  ~Registry();
  Registry(const Registry&) = delete;
  Registry& operator=(const Registry&) = delete;

  // The series `name` with `labels`, created on first use; later calls with
  // the same name and labels return the same object. All series of a name
  // share one type, help text and (histograms) bucket bounds. A trailing
  // +Inf bound is accepted and dropped. Throws std::invalid_argument on a bad
  // name ([a-zA-Z_:][a-zA-Z0-9_:]*), a bad or repeated label name
  // ([a-zA-Z_][a-zA-Z0-9_]*, not starting "__"; "le" is reserved for
  // histograms), unsorted or non-finite bounds, or a mismatch with an
  // existing family.
  Counter& GetCounter(std::string_view name, std::string_view help, Labels labels = {});
  Gauge& GetGauge(std::string_view name, std::string_view help, Labels labels = {});
  Histogram& GetHistogram(std::string_view name, std::string_view help,
                          std::span<const double> bounds, Labels labels = {});

  // Text exposition format 0.0.4: families in creation order, each with one
  // "# HELP" and one "# TYPE" line, then its series in creation order.
  // Safe to call from any thread, concurrently with updates and creation.
  std::string Render() const;

  // `collect` runs at the start of every Render(), on the rendering thread
  // (the HTTP thread's), before the registry's mutex is taken: it copies
  // values kept elsewhere into this registry's series (say, a client's
  // counters), so a scrape reads them as they are now. One collector at a
  // time (a second call replaces it; an empty function removes it); calls
  // never overlap. Set it before serving, or while nothing renders.
  void SetCollector(std::function<void()> collect);

 private:
  enum class Type { kCounter, kGauge, kHistogram };
  struct Series;
  struct Family;
  Series& GetSeries(Type type, std::string_view name, std::string_view help,
                    std::span<const double> bounds, Labels labels);
  // The family `name`, created if new; throws if it exists with another
  // type, help or bounds, or would clash with a histogram's series names.
  // REQUIRES mu_ held.
  Family* FamilyLocked(Type type, std::string_view name, std::string_view help, std::vector<double> bounds,
                       const std::string& where);

  // Any thread: creation (Get*) and Render() take mu_; the series' values
  // are atomics updated without it.
  mutable std::mutex mu_;
  std::deque<Family> families_;                       // guarded by mu_; creation order
  std::unordered_map<std::string, Family*> by_name_;  // guarded by mu_
  mutable std::atomic<size_t> last_render_size_{0};       // reserve hint
  mutable std::mutex collect_mu_;                         // one collector run at a time
  std::function<void()> collect_;                         // guarded by collect_mu_
};

// Exposition helpers (exposed for tests).
// Label value: backslash, double quote and newline escaped.
std::string EscapeLabelValue(std::string_view v);
// HELP text: backslash and newline escaped.
std::string EscapeHelp(std::string_view v);
// A sample value as Prometheus writes it: shortest round-trip decimal,
// "+Inf", "-Inf", "NaN".
std::string FormatValue(double v);

}  // namespace shardps::metrics
