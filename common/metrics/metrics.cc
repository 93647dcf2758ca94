#include "common/metrics/metrics.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <stdexcept>

namespace shardps::metrics {

// ---------------------------------------------------------------- Histogram

Histogram::Histogram(std::span<const double> bounds)
    : n_(bounds.size()),
      bounds_(std::make_unique<double[]>(bounds.size())),
      buckets_(std::make_unique<std::atomic<uint64_t>[]>(bounds.size() + 1)) {
  std::copy(bounds.begin(), bounds.end(), bounds_.get());
}

uint64_t Histogram::Count() const {
  uint64_t c = 0;
  for (size_t i = 0; i <= n_; ++i) c += BucketCount(i);
  return c;
}

std::vector<double> LatencyBuckets() {
  return {50e-6, 100e-6, 250e-6, 500e-6, 1e-3, 2.5e-3, 5e-3, 10e-3, 25e-3,
          50e-3, 100e-3, 250e-3, 500e-3, 1.0,  2.5,    5.0,  10.0};
}

std::vector<double> ExponentialBuckets(double start, double factor, int count) {
  if (!(start > 0) || !(factor > 1) || count < 1)
    throw std::invalid_argument("ExponentialBuckets: needs start > 0, factor > 1, count >= 1");
  std::vector<double> b(static_cast<size_t>(count));
  for (int i = 0; i < count; ++i) b[i] = i == 0 ? start : b[i - 1] * factor;
  return b;
}

// ---------------------------------------------------------------- formatting

std::string EscapeLabelValue(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '"': out += "\\\""; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

std::string EscapeHelp(std::string_view v) {
  std::string out;
  out.reserve(v.size());
  for (char c : v) {
    switch (c) {
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      default: out += c;
    }
  }
  return out;
}

namespace {

void AppendValue(std::string& out, double v) {
  if (std::isnan(v)) {
    out += "NaN";
  } else if (std::isinf(v)) {
    out += v > 0 ? "+Inf" : "-Inf";
  } else {
    // As Go's strconv.FormatFloat(v, 'g', -1, 64), which the reference
    // client (client_golang) writes values and `le` labels with: the
    // shortest digits that round-trip, in exponent form when the decimal
    // exponent is < -4 or >= 6 ("5e-05", "0.0001", "123456", "1e+06").
    char buf[40];
    auto r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::scientific);
    const char* e = std::find(buf, r.ptr, 'e');
    int exp = 0;
    std::from_chars(e + 1 + (e[1] == '+'), r.ptr, exp);
    if (exp < -4 || exp >= 6) {
      out.append(buf, r.ptr);
    } else {
      r = std::to_chars(buf, buf + sizeof(buf), v, std::chars_format::fixed);
      out.append(buf, r.ptr);
    }
  }
}

void AppendValue(std::string& out, uint64_t v) {
  char buf[24];
  auto r = std::to_chars(buf, buf + sizeof(buf), v);
  out.append(buf, r.ptr);
}

bool ValidMetricName(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

bool ValidLabelName(std::string_view s) {
  if (s.empty()) return false;
  for (size_t i = 0; i < s.size(); ++i) {
    char c = s[i];
    bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' ||
              (i > 0 && c >= '0' && c <= '9');
    if (!ok) return false;
  }
  return true;
}

constexpr std::string_view kHistogramSuffixes[] = {"_bucket", "_sum", "_count"};

}  // namespace

std::string FormatValue(double v) {
  std::string s;
  AppendValue(s, v);
  return s;
}

// ---------------------------------------------------------------- Registry

struct Registry::Series {
  std::string labels_text;    // `{a="x",b="y"}` or empty
  std::string bucket_prefix;  // histograms: `name_bucket{a="x",le="`
  std::unique_ptr<Counter> counter;
  std::unique_ptr<Gauge> gauge;
  std::unique_ptr<Histogram> histogram;
};

struct Registry::Family {
  std::string name;
  std::string help;
  Type type;
  std::string header;                // "# HELP ...\n# TYPE ...\n"
  std::vector<double> bounds;        // histograms
  std::vector<std::string> le_text;  // formatted bounds
  std::deque<Series> series;         // creation order
  std::unordered_map<std::string, Series*> by_labels;  // key: labels_text
};

Registry::Registry() = default;
Registry::~Registry() = default;

Counter& Registry::GetCounter(std::string_view name, std::string_view help, Labels labels) {
  return *GetSeries(Type::kCounter, name, help, {}, std::move(labels)).counter;
}

Gauge& Registry::GetGauge(std::string_view name, std::string_view help, Labels labels) {
  return *GetSeries(Type::kGauge, name, help, {}, std::move(labels)).gauge;
}

Histogram& Registry::GetHistogram(std::string_view name, std::string_view help,
                                  std::span<const double> bounds, Labels labels) {
  return *GetSeries(Type::kHistogram, name, help, bounds, std::move(labels)).histogram;
}

namespace {

// Sorts `labels` by name and checks every name; throws naming the first bad one.
void CheckLabels(bool histogram, const std::string& where, Labels& labels) {
  std::sort(labels.begin(), labels.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  for (size_t i = 0; i < labels.size(); ++i) {
    const std::string& k = labels[i].first;
    if (!ValidLabelName(k))
      throw std::invalid_argument(where + "invalid label name '" + k + "' (must match [a-zA-Z_][a-zA-Z0-9_]*)");
    if (k.starts_with("__"))
      throw std::invalid_argument(where + "label name '" + k + "' is reserved (starts with __)");
    if (histogram && k == "le")
      throw std::invalid_argument(where + "label name 'le' is reserved for histogram buckets");
    if (i > 0 && labels[i - 1].first == k) throw std::invalid_argument(where + "label '" + k + "' given twice");
  }
}

// A histogram's bounds without a trailing +Inf; throws unless finite and
// strictly increasing.
std::vector<double> CheckedBounds(const std::string& where, std::span<const double> in) {
  std::vector<double> bounds(in.begin(), in.end());
  if (!bounds.empty() && bounds.back() == INFINITY) bounds.pop_back();
  for (size_t i = 0; i < bounds.size(); ++i) {
    if (!std::isfinite(bounds[i])) throw std::invalid_argument(where + "histogram bounds must be finite");
    if (i > 0 && !(bounds[i - 1] < bounds[i]))
      throw std::invalid_argument(where + "histogram bounds must be strictly increasing");
  }
  return bounds;
}

// a="x",b="y" for sorted labels.
std::string InnerLabelsText(const Labels& labels) {
  std::string inner;
  for (const auto& [k, v] : labels) {
    if (!inner.empty()) inner += ',';
    inner += k;
    inner += "=\"";
    inner += EscapeLabelValue(v);
    inner += '"';
  }
  return inner;
}

}  // namespace

Registry::Series& Registry::GetSeries(Type type, std::string_view name, std::string_view help,
                                      std::span<const double> bounds_in, Labels labels) {
  const std::string where = "metric '" + std::string(name) + "': ";
  if (!ValidMetricName(name))
    throw std::invalid_argument(where + "invalid metric name (must match [a-zA-Z_:][a-zA-Z0-9_:]*)");
  CheckLabels(type == Type::kHistogram, where, labels);
  std::vector<double> bounds = type == Type::kHistogram ? CheckedBounds(where, bounds_in) : std::vector<double>{};
  const std::string inner = InnerLabelsText(labels);
  std::string labels_text = inner.empty() ? std::string() : "{" + inner + "}";

  std::lock_guard<std::mutex> lock(mu_);
  Family* fam = FamilyLocked(type, name, help, std::move(bounds), where);
  auto sit = fam->by_labels.find(labels_text);
  if (sit != fam->by_labels.end()) return *sit->second;

  Series& s = fam->series.emplace_back();
  s.labels_text = std::move(labels_text);
  switch (type) {
    case Type::kCounter: s.counter = std::make_unique<Counter>(); break;
    case Type::kGauge: s.gauge = std::make_unique<Gauge>(); break;
    case Type::kHistogram:
      s.histogram = std::make_unique<Histogram>(fam->bounds);
      s.bucket_prefix = fam->name + "_bucket{" + inner + (inner.empty() ? "" : ",") + "le=\"";
      break;
  }
  fam->by_labels.emplace(s.labels_text, &s);
  return s;
}

Registry::Family* Registry::FamilyLocked(Type type, std::string_view name, std::string_view help,
                                         std::vector<double> bounds, const std::string& where) {
  if (auto it = by_name_.find(std::string(name)); it != by_name_.end()) {
    Family* fam = it->second;
    if (fam->type != type) throw std::invalid_argument(where + "already registered with another type");
    if (fam->help != help) throw std::invalid_argument(where + "already registered with another help text");
    if (fam->bounds != bounds) throw std::invalid_argument(where + "already registered with other histogram bounds");
    return fam;
  }
  // A histogram `x` renders x_bucket, x_sum and x_count: keep those names free.
  for (std::string_view suf : kHistogramSuffixes) {
    if (type == Type::kHistogram && by_name_.count(std::string(name) + std::string(suf)))
      throw std::invalid_argument(where + "clashes with the existing metric '" + std::string(name) +
                                  std::string(suf) + "'");
    if (name.ends_with(suf)) {
      auto base = by_name_.find(std::string(name.substr(0, name.size() - suf.size())));
      if (base != by_name_.end() && base->second->type == Type::kHistogram)
        throw std::invalid_argument(where + "clashes with the series of histogram '" + base->first + "'");
    }
  }
  Family* fam = &families_.emplace_back();
  fam->name = std::string(name);
  fam->help = std::string(help);
  fam->type = type;
  fam->header = "# HELP " + fam->name + " " + EscapeHelp(help) + "\n# TYPE " + fam->name +
                (type == Type::kCounter ? " counter\n" : type == Type::kGauge ? " gauge\n" : " histogram\n");
  fam->bounds = std::move(bounds);
  for (double b : fam->bounds) fam->le_text.push_back(FormatValue(b));
  by_name_.emplace(fam->name, fam);
  return fam;
}

void Registry::SetCollector(std::function<void()> collect) {
  std::lock_guard<std::mutex> lock(collect_mu_);
  collect_ = std::move(collect);
}

std::string Registry::Render() const {
  {
    std::lock_guard<std::mutex> lock(collect_mu_);
    if (collect_) collect_();
  }
  std::string out;
  out.reserve(last_render_size_.load(std::memory_order_relaxed) + 256);
  std::lock_guard<std::mutex> lock(mu_);
  for (const Family& f : families_) {
    out += f.header;
    for (const Series& s : f.series) {
      switch (f.type) {
        case Type::kCounter:
          out += f.name;
          out += s.labels_text;
          out += ' ';
          AppendValue(out, s.counter->Value());
          out += '\n';
          break;
        case Type::kGauge:
          out += f.name;
          out += s.labels_text;
          out += ' ';
          AppendValue(out, s.gauge->Value());
          out += '\n';
          break;
        case Type::kHistogram: {
          const Histogram& h = *s.histogram;
          // Buckets and sum are read one by one while writers may go on, so
          // _sum can be off by the observations in flight; _count is the +Inf
          // bucket, so those two always agree.
          double sum = h.Sum();
          uint64_t cum = 0;
          for (size_t i = 0; i <= h.num_bounds(); ++i) {
            cum += h.BucketCount(i);
            out += s.bucket_prefix;
            out += i < h.num_bounds() ? std::string_view(f.le_text[i]) : std::string_view("+Inf");
            out += "\"} ";
            AppendValue(out, cum);
            out += '\n';
          }
          out += f.name;
          out += "_sum";
          out += s.labels_text;
          out += ' ';
          AppendValue(out, sum);
          out += '\n';
          out += f.name;
          out += "_count";
          out += s.labels_text;
          out += ' ';
          AppendValue(out, cum);  // == the +Inf bucket, always
          out += '\n';
          break;
        }
      }
    }
  }
  last_render_size_.store(out.size(), std::memory_order_relaxed);
  return out;
}

}  // namespace shardps::metrics
