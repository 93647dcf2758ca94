#include "common/metrics/metrics.h"

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#if SHARDPS_METRICS_HTTP
#include "common/metrics/metrics_http.h"
#endif

namespace shardps::metrics {
namespace {

TEST(Metrics, RendersEachTypeExactly) {
  Registry reg;
  // Labels are sorted by name whatever order they are given in.
  Counter& push = reg.GetCounter("req_total", "Requests handled.", {{"table", "emb"}, {"op", "push"}});
  Counter& pull = reg.GetCounter("req_total", "Requests handled.", {{"op", "pull"}, {"table", "emb"}});
  Gauge& depth = reg.GetGauge("queue_depth", "Items waiting.");
  const double bounds[] = {0.5, 1.0, 2.5};
  Histogram& lat = reg.GetHistogram("lat_seconds", "Latency.", bounds);
  Histogram& lat_x = reg.GetHistogram("lat_by_op_seconds", "Latency by op.", bounds, {{"op", "x"}});

  push.Add(2);
  push.Inc();
  pull.SingleWriterInc();
  depth.Set(2);
  depth.Add(-4.5);
  depth.SingleWriterAdd(1);
  for (double v : {0.25, 0.5, 1.0, 4.0}) lat.Observe(v);  // 0.5 and 1.0 are on bounds: le is inclusive
  lat_x.SingleWriterObserve(3.0);

  EXPECT_EQ(reg.Render(),
            "# HELP req_total Requests handled.\n"
            "# TYPE req_total counter\n"
            "req_total{op=\"push\",table=\"emb\"} 3\n"
            "req_total{op=\"pull\",table=\"emb\"} 1\n"
            "# HELP queue_depth Items waiting.\n"
            "# TYPE queue_depth gauge\n"
            "queue_depth -1.5\n"
            "# HELP lat_seconds Latency.\n"
            "# TYPE lat_seconds histogram\n"
            "lat_seconds_bucket{le=\"0.5\"} 2\n"
            "lat_seconds_bucket{le=\"1\"} 3\n"
            "lat_seconds_bucket{le=\"2.5\"} 3\n"
            "lat_seconds_bucket{le=\"+Inf\"} 4\n"
            "lat_seconds_sum 5.75\n"
            "lat_seconds_count 4\n"
            "# HELP lat_by_op_seconds Latency by op.\n"
            "# TYPE lat_by_op_seconds histogram\n"
            "lat_by_op_seconds_bucket{op=\"x\",le=\"0.5\"} 0\n"
            "lat_by_op_seconds_bucket{op=\"x\",le=\"1\"} 0\n"
            "lat_by_op_seconds_bucket{op=\"x\",le=\"2.5\"} 0\n"
            "lat_by_op_seconds_bucket{op=\"x\",le=\"+Inf\"} 1\n"
            "lat_by_op_seconds_sum{op=\"x\"} 3\n"
            "lat_by_op_seconds_count{op=\"x\"} 1\n");
}

TEST(Metrics, EmptyRegistryAndUnusedFamilies) {
  Registry reg;
  EXPECT_EQ(reg.Render(), "");
  reg.GetCounter("c_total", "");
  EXPECT_EQ(reg.Render(), "# HELP c_total \n# TYPE c_total counter\nc_total 0\n");
}

TEST(Metrics, ACollectorCopiesValuesInAtEachRender) {
  Registry reg;
  Counter& total = reg.GetCounter("done_total", "Done.");
  Gauge& now = reg.GetGauge("now", "Now.");
  uint64_t kept = 5;  // a total kept elsewhere
  int runs = 0;
  reg.SetCollector([&] {
    ++runs;
    total.SetTotal(kept);
    now.Set(static_cast<double>(kept) / 2);
  });
  EXPECT_EQ(reg.Render(), "# HELP done_total Done.\n# TYPE done_total counter\ndone_total 5\n"
                          "# HELP now Now.\n# TYPE now gauge\nnow 2.5\n");
  kept = 9;
  EXPECT_NE(reg.Render().find("done_total 9\n"), std::string::npos);
  EXPECT_EQ(runs, 2);
  reg.SetCollector({});  // removed: the values stay as last copied
  kept = 11;
  EXPECT_NE(reg.Render().find("done_total 9\n"), std::string::npos);
  EXPECT_EQ(runs, 2);
}

TEST(Metrics, HistogramBucketsAreCumulative) {
  Registry reg;
  auto bounds = LatencyBuckets();
  ASSERT_EQ(bounds.size(), 17u);
  EXPECT_EQ(bounds.front(), 50e-6);
  EXPECT_EQ(bounds.back(), 10.0);
  Histogram& h = reg.GetHistogram("op_seconds", "Op time.", bounds);
  // One observation exactly on each bound, one just above each, one past the last.
  for (double b : bounds) {
    h.SingleWriterObserve(b);
    h.SingleWriterObserve(std::nextafter(b, INFINITY));
  }
  h.SingleWriterObserve(INFINITY);
  h.SingleWriterObserve(NAN);  // counted in +Inf
  h.SingleWriterObserve(-1);   // first bucket
  EXPECT_EQ(h.BucketCount(0), 2u);
  for (size_t i = 1; i < bounds.size(); ++i) EXPECT_EQ(h.BucketCount(i), 2u) << i;
  EXPECT_EQ(h.BucketCount(bounds.size()), 3u);
  EXPECT_EQ(h.Count(), 2 * bounds.size() + 3);

  std::string text = reg.Render();
  EXPECT_NE(text.find("op_seconds_bucket{le=\"5e-05\"} 2\n"), std::string::npos) << text;
  EXPECT_NE(text.find("op_seconds_bucket{le=\"0.0001\"} 4\n"), std::string::npos) << text;
  EXPECT_NE(text.find("op_seconds_bucket{le=\"0.00025\"} 6\n"), std::string::npos) << text;
  EXPECT_NE(text.find("op_seconds_bucket{le=\"10\"} 34\n"), std::string::npos) << text;
  EXPECT_NE(text.find("op_seconds_bucket{le=\"+Inf\"} 37\n"), std::string::npos) << text;
  EXPECT_NE(text.find("op_seconds_sum NaN\n"), std::string::npos) << text;
  EXPECT_NE(text.find("op_seconds_count 37\n"), std::string::npos) << text;

  // A trailing +Inf bound is accepted and not repeated.
  const double with_inf[] = {1.0, INFINITY};
  reg.GetHistogram("h2", "", with_inf).Observe(2);
  text = reg.Render();
  EXPECT_NE(text.find("h2_bucket{le=\"1\"} 0\nh2_bucket{le=\"+Inf\"} 1\nh2_sum 2\nh2_count 1\n"),
            std::string::npos)
      << text;
  EXPECT_EQ(ExponentialBuckets(1e-3, 10, 4), (std::vector<double>{1e-3, 1e-2, 1e-1, 1}));
}

TEST(Metrics, FormatsValuesLikePrometheus) {
  EXPECT_EQ(FormatValue(0), "0");
  EXPECT_EQ(FormatValue(3), "3");
  EXPECT_EQ(FormatValue(-1.5), "-1.5");
  EXPECT_EQ(FormatValue(0.1), "0.1");
  EXPECT_EQ(FormatValue(1e-05), "1e-05");
  EXPECT_EQ(FormatValue(0.0001), "0.0001");
  EXPECT_EQ(FormatValue(0.00025), "0.00025");
  EXPECT_EQ(FormatValue(123456.5), "123456.5");
  EXPECT_EQ(FormatValue(1e6), "1e+06");
  EXPECT_EQ(FormatValue(1234567.0), "1.234567e+06");
  EXPECT_EQ(FormatValue(-2.5e-7), "-2.5e-07");
  EXPECT_EQ(FormatValue(1e300), "1e+300");
  EXPECT_EQ(FormatValue(INFINITY), "+Inf");
  EXPECT_EQ(FormatValue(-INFINITY), "-Inf");
  EXPECT_EQ(FormatValue(NAN), "NaN");
  EXPECT_EQ(std::stod(FormatValue(0.1 + 0.2)), 0.1 + 0.2);  // round-trips
}

TEST(Metrics, EscapesLabelValuesAndHelp) {
  EXPECT_EQ(EscapeLabelValue("a\\b\"c\nd"), "a\\\\b\\\"c\\nd");
  EXPECT_EQ(EscapeHelp("a\\b\"c\nd"), "a\\\\b\"c\\nd");  // quotes stay in HELP
  Registry reg;
  reg.GetCounter("x_total", "Line one\nback\\slash \"q\"", {{"path", "C:\\tmp\n\"x\""}}).Inc();
  EXPECT_EQ(reg.Render(),
            "# HELP x_total Line one\\nback\\\\slash \"q\"\n"
            "# TYPE x_total counter\n"
            "x_total{path=\"C:\\\\tmp\\n\\\"x\\\"\"} 1\n");
}

TEST(Metrics, SameNameAndLabelsGiveTheSameSeries) {
  Registry reg;
  Counter& a = reg.GetCounter("c_total", "h", {{"a", "1"}, {"b", "2"}});
  Counter& b = reg.GetCounter("c_total", "h", {{"b", "2"}, {"a", "1"}});
  Counter& c = reg.GetCounter("c_total", "h", {{"a", "1"}, {"b", "3"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &c);
  EXPECT_EQ(&reg.GetGauge("g", "h"), &reg.GetGauge("g", "h"));
  const double bounds[] = {1, 2};
  EXPECT_EQ(&reg.GetHistogram("h", "h", bounds), &reg.GetHistogram("h", "h", bounds));
}

TEST(Metrics, RefusesBadNamesAndMismatches) {
  Registry reg;
  for (const char* bad : {"", "1abc", "a-b", "a b", "é", "a.b", "a{b}"}) {
    EXPECT_THROW(reg.GetCounter(bad, "h"), std::invalid_argument) << bad;
  }
  EXPECT_NO_THROW(reg.GetCounter("ok:name_1", "h"));
  EXPECT_NO_THROW(reg.GetCounter("_ok", "h"));
  try {
    reg.GetGauge("bad-name", "h");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("bad-name"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("[a-zA-Z_:][a-zA-Z0-9_:]*"), std::string::npos) << e.what();
  }
  // Label names.
  EXPECT_THROW(reg.GetCounter("l_total", "h", {{"1x", "v"}}), std::invalid_argument);
  EXPECT_THROW(reg.GetCounter("l_total", "h", {{"a:b", "v"}}), std::invalid_argument);
  EXPECT_THROW(reg.GetCounter("l_total", "h", {{"__name__", "v"}}), std::invalid_argument);
  EXPECT_THROW(reg.GetCounter("l_total", "h", {{"a", "v"}, {"a", "w"}}), std::invalid_argument);
  EXPECT_NO_THROW(reg.GetCounter("l_total", "h", {{"le", "v"}}));  // only reserved in histograms
  const double bounds[] = {1, 2};
  EXPECT_THROW(reg.GetHistogram("hl", "h", bounds, {{"le", "1"}}), std::invalid_argument);
  // Bounds.
  const double unsorted[] = {2, 1};
  const double dup[] = {1, 1};
  const double nan[] = {1, NAN};
  const double inf_mid[] = {1, INFINITY, 3};
  EXPECT_THROW(reg.GetHistogram("hb", "h", unsorted), std::invalid_argument);
  EXPECT_THROW(reg.GetHistogram("hb", "h", dup), std::invalid_argument);
  EXPECT_THROW(reg.GetHistogram("hb", "h", nan), std::invalid_argument);
  EXPECT_THROW(reg.GetHistogram("hb", "h", inf_mid), std::invalid_argument);
  // One family, one type, help and layout.
  reg.GetCounter("m", "help");
  EXPECT_THROW(reg.GetGauge("m", "help"), std::invalid_argument);
  EXPECT_THROW(reg.GetCounter("m", "other help"), std::invalid_argument);
  reg.GetHistogram("hh", "h", bounds);
  const double other[] = {1, 3};
  EXPECT_THROW(reg.GetHistogram("hh", "h", other, {{"a", "b"}}), std::invalid_argument);
  // A histogram's derived series names are taken.
  EXPECT_THROW(reg.GetCounter("hh_count", "h"), std::invalid_argument);
  EXPECT_THROW(reg.GetGauge("hh_sum", "h"), std::invalid_argument);
  reg.GetGauge("z_bucket", "h");
  EXPECT_THROW(reg.GetHistogram("z", "h", bounds), std::invalid_argument);
  // Failed registrations leave nothing behind.
  EXPECT_EQ(reg.Render().find("hb"), std::string::npos);
}

// Parses a rendered histogram and checks it is self-consistent: buckets
// non-decreasing, +Inf bucket == _count. Returns _count.
uint64_t CheckHistogramText(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  std::string line;
  uint64_t prev = 0, inf = 0, count = ~0ull;
  int buckets = 0;
  while (std::getline(in, line)) {
    if (line.rfind(name + "_bucket{", 0) == 0) {
      uint64_t v = std::stoull(line.substr(line.rfind(' ') + 1));
      EXPECT_GE(v, prev) << line;
      prev = v;
      ++buckets;
      if (line.find("le=\"+Inf\"") != std::string::npos) inf = v;
    } else if (line.rfind(name + "_count ", 0) == 0) {
      count = std::stoull(line.substr(line.rfind(' ') + 1));
    }
  }
  EXPECT_EQ(buckets, 18);
  EXPECT_EQ(inf, count);
  return count;
}

TEST(Metrics, ObserveOnOneThreadWhileRenderingOnAnother) {
  Registry reg;
  Histogram& h = reg.GetHistogram("lat_seconds", "Latency.", LatencyBuckets());
  Counter& c = reg.GetCounter("ops_total", "Ops.");
  // The writer runs until the reader has rendered (and checked) 300 times
  // while it was writing.
  std::atomic<bool> started{false}, stop{false};
  uint64_t written = 0;
  std::thread writer([&] {
    uint64_t i = 0;
    for (; !stop.load(std::memory_order_relaxed) || i < 1000; ++i) {
      h.SingleWriterObserve(static_cast<double>(i % 1000) * 1e-5);  // 0 .. 9.99 ms
      c.SingleWriterInc();
      if (i == 1000) started = true;
    }
    written = i;
  });
  while (!started.load()) std::this_thread::yield();
  uint64_t last = 0;
  for (int r = 0; r < 300; ++r) {
    uint64_t n = CheckHistogramText(reg.Render(), "lat_seconds");
    EXPECT_GE(n, last);
    last = n;
  }
  stop = true;
  writer.join();
  EXPECT_GE(written, last);  // equal when the writer was not scheduled after the last render
  EXPECT_EQ(h.Count(), written);
  EXPECT_EQ(c.Value(), written);
  EXPECT_EQ(CheckHistogramText(reg.Render(), "lat_seconds"), written);
  double expected_sum = 0;
  uint64_t first_bucket = 0;  // le=5e-05 holds k*1e-5 for k = 0..5
  for (uint64_t i = 0; i < written; ++i) {
    double v = static_cast<double>(i % 1000) * 1e-5;
    expected_sum += v;
    first_bucket += v <= 50e-6;
  }
  EXPECT_DOUBLE_EQ(h.Sum(), expected_sum);
  EXPECT_EQ(h.BucketCount(0), first_bucket);
}

TEST(Metrics, MultiWriterUpdatesAreNotLost) {
  Registry reg;
  Counter& c = reg.GetCounter("c_total", "h");
  Gauge& g = reg.GetGauge("g", "h");
  const double bounds[] = {1.0};
  Histogram& h = reg.GetHistogram("h", "h", bounds);
  constexpr int kThreads = 4, kN = 50000;
  std::vector<std::thread> ts;
  for (int t = 0; t < kThreads; ++t)
    ts.emplace_back([&] {
      for (int i = 0; i < kN; ++i) {
        c.Inc();
        g.Add(1);
        h.Observe(0.5);
      }
    });
  for (auto& t : ts) t.join();
  EXPECT_EQ(c.Value(), uint64_t{kThreads * kN});
  EXPECT_EQ(g.Value(), double{kThreads * kN});
  EXPECT_EQ(h.Count(), uint64_t{kThreads * kN});
  EXPECT_EQ(h.Sum(), 0.5 * kThreads * kN);
}

TEST(Metrics, CreationWhileRendering) {
  Registry reg;
  std::atomic<bool> done{false};
  std::thread creator([&] {
    for (int i = 0; i < 1000; ++i) {
      reg.GetCounter("c_total", "h", {{"i", std::to_string(i)}}).Inc();
      if (i % 100 == 0) reg.GetGauge(std::string("g").append(std::to_string(i)), "h").Set(i);
    }
    done = true;
  });
  while (!done.load()) {
    (void)reg.Render();
    std::this_thread::yield();
  }
  creator.join();
  std::string text = reg.Render();
  EXPECT_NE(text.find("c_total{i=\"999\"} 1\n"), std::string::npos);
  EXPECT_NE(text.find("g900 900\n"), std::string::npos);
}

#if SHARDPS_METRICS_HTTP

struct Reply {
  int status = 0;
  std::string head;  // status line and headers
  std::string body;
  std::string Header(const std::string& name) const {  // case-insensitive name
    std::string lower_head = head, key = "\r\n" + name + ":";
    for (auto& ch : lower_head) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    for (auto& ch : key) ch = static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
    size_t p = lower_head.find(key);
    if (p == std::string::npos) return {};
    p += key.size();
    size_t e = head.find("\r\n", p);
    std::string v = head.substr(p, e - p);
    while (!v.empty() && v.front() == ' ') v.erase(0, 1);
    return v;
  }
};

// A plain HTTP/1.1 GET over a TCP socket; reads to EOF (Connection: close).
bool HttpGet(int port, const std::string& path, Reply* out, const char* method = "GET") {
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  timeval tv{5, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    ::close(fd);
    return false;
  }
  std::string req = std::string(method) + " " + path +
                    " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  if (::send(fd, req.data(), req.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(req.size())) {
    ::close(fd);
    return false;
  }
  std::string raw;
  char buf[4096];
  for (;;) {
    ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) break;
    raw.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  size_t sep = raw.find("\r\n\r\n");
  if (sep == std::string::npos || raw.compare(0, 9, "HTTP/1.1 ") != 0) return false;
  out->head = raw.substr(0, sep);
  out->body = raw.substr(sep + 4);
  out->status = std::stoi(raw.substr(9, 3));
  return true;
}

TEST(MetricsHttp, ServesMetricsAnd404) {
  Registry reg;
  reg.GetCounter("served_total", "Served.", {{"k", "v\"q"}}).Add(7);
  const double bounds[] = {0.1};
  reg.GetHistogram("t_seconds", "T.", bounds).Observe(0.05);

  MetricsServer http(reg);
  EXPECT_EQ(http.port(), 0);
  EXPECT_EQ(http.url(), "");
  Status s = http.Start("127.0.0.1", 0);
  ASSERT_TRUE(s.ok()) << s.ToString();
  ASSERT_GT(http.port(), 0);
  EXPECT_TRUE(http.running());
  EXPECT_EQ(http.url(), "http://127.0.0.1:" + std::to_string(http.port()) + "/metrics");

  Reply r;
  ASSERT_TRUE(HttpGet(http.port(), "/metrics", &r));
  EXPECT_EQ(r.status, 200) << r.head;
  EXPECT_EQ(r.Header("Content-Type"), "text/plain; version=0.0.4; charset=utf-8") << r.head;
  EXPECT_EQ(r.Header("Content-Length"), std::to_string(r.body.size())) << r.head;
  EXPECT_EQ(r.body, reg.Render());
  EXPECT_NE(r.body.find("served_total{k=\"v\\\"q\"} 7\n"), std::string::npos) << r.body;

  // Scrapes see live values.
  reg.GetCounter("served_total", "Served.", {{"k", "v\"q"}}).Inc();
  ASSERT_TRUE(HttpGet(http.port(), "/metrics?x=1", &r));
  EXPECT_EQ(r.status, 200);
  EXPECT_NE(r.body.find("served_total{k=\"v\\\"q\"} 8\n"), std::string::npos) << r.body;

  ASSERT_TRUE(HttpGet(http.port(), "/metrics", &r, "HEAD"));
  EXPECT_EQ(r.status, 200);
  EXPECT_EQ(r.body, "");

  for (const char* path : {"/", "/metricsx", "/foo/metrics"}) {
    ASSERT_TRUE(HttpGet(http.port(), path, &r)) << path;
    EXPECT_EQ(r.status, 404) << path;
    EXPECT_NE(r.body.find("/metrics"), std::string::npos) << r.body;
  }

  // Other methods: refused at once, without waiting for a body.
  auto t_post = std::chrono::steady_clock::now();
  ASSERT_TRUE(HttpGet(http.port(), "/metrics", &r, "POST"));
  EXPECT_EQ(r.status, 405) << r.head;
  EXPECT_EQ(r.Header("Allow"), "GET, HEAD");
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t_post).count(), 1.0);

  // Starting twice is refused; the first keeps serving.
  Status again = http.Start("127.0.0.1", 0);
  EXPECT_EQ(again.code(), Code::kConflict) << again.ToString();
  EXPECT_TRUE(HttpGet(http.port(), "/metrics", &r));

  int port = http.port();
  auto t0 = std::chrono::steady_clock::now();
  http.Stop();
  double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(stop_s, 1.0);
  EXPECT_FALSE(http.running());
  EXPECT_EQ(http.port(), 0);
  EXPECT_FALSE(HttpGet(port, "/metrics", &r));  // nothing listens any more
  http.Stop();                                   // idempotent

  // Restart on the same port (SO_REUSEADDR) after Stop.
  s = http.Start("127.0.0.1", port);
  ASSERT_TRUE(s.ok()) << s.ToString();
  EXPECT_EQ(http.port(), port);
  ASSERT_TRUE(HttpGet(port, "/metrics", &r));
  EXPECT_EQ(r.status, 200);
}  // the destructor stops it

TEST(MetricsHttp, StopWithAnIdleClientConnectedIsBounded) {
  Registry reg;
  MetricsServer http(reg);
  ASSERT_TRUE(http.Start("127.0.0.1", 0).ok());
  // A client that connects and sends nothing.
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(http.port()));
  inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
  ASSERT_EQ(::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  auto t0 = std::chrono::steady_clock::now();
  http.Stop();
  double stop_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(stop_s, 5.0);
  ::close(fd);
}

TEST(MetricsHttp, BindFailuresNameTheAddressAndTheReason) {
  Registry reg;
  MetricsServer http(reg);
  // 192.0.2.1 (TEST-NET-1) is not an address of this machine.
  Status s = http.Start("192.0.2.1", 0);
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("192.0.2.1:0"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("assign requested address"), std::string::npos) << s.ToString();
  EXPECT_EQ(http.port(), 0);
  EXPECT_FALSE(http.running());

  s = http.Start("127.0.0.1", 70000);
  EXPECT_EQ(s.code(), Code::kInvalidArgument) << s.ToString();

  // A port another server holds: refused, not shared (no SO_REUSEPORT).
  MetricsServer first(reg);
  ASSERT_TRUE(first.Start("127.0.0.1", 0).ok());
  s = http.Start("127.0.0.1", first.port());
  EXPECT_EQ(s.code(), Code::kUnavailable) << s.ToString();
  EXPECT_NE(s.message().find("127.0.0.1:" + std::to_string(first.port())), std::string::npos);
  EXPECT_NE(s.message().find("in use"), std::string::npos) << s.ToString();
}

#endif  // SHARDPS_METRICS_HTTP

}  // namespace
}  // namespace shardps::metrics
