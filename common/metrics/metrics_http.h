// Serves a metrics::Registry over HTTP for Prometheus to scrape:
//   GET /metrics  -> 200, Content-Type: text/plain; version=0.0.4; charset=utf-8
//   other paths   -> 404 with a short text body
//   other methods -> 405 (HEAD is answered like GET, without the body)
//
//   metrics::MetricsServer http(registry);
//   if (Status s = http.Start("0.0.0.0", 9100); !s.ok()) { ... s.ToString() ... }
//   LOG_INFO << "metrics at " << http.url();
//   ...
//   http.Stop();  // or let the destructor do it
//
// The server runs on threads of its own (one accepting, two answering); it
// never runs anything on the caller's threads. Rendering takes the
// registry's creation mutex, never blocks the threads that update metrics.
// Connections are closed after each response; a connection must send its
// request within 1 s and each read/write times out after 2 s, so Stop()
// returns within a few seconds even with a stuck client (at once when no
// request is in progress).
//
// Side effect: constructing the underlying HTTP server (cpp-httplib) sets
// SIGPIPE to SIG_IGN for the whole process, at Start().
//
// This header deliberately does not include httplib.h (only metrics_http.cc
// does).
#pragma once

#include <memory>
#include <string>

#include "shardps/status.h"

namespace shardps::metrics {

class Registry;

// Whether `address` binds every interface ("", 0.0.0.0, ::).
bool IsWildcard(const std::string& address);
// "http://HOST:PORT/metrics" (an IPv6 host in brackets).
std::string Url(const std::string& host, int port);

class MetricsServer {
 public:
  // `registry` must outlive this object.
  explicit MetricsServer(const Registry& registry);
  ~MetricsServer();  // Stop()
  MetricsServer(const MetricsServer&) = delete;
  MetricsServer& operator=(const MetricsServer&) = delete;

  // Binds address:port (port 0: a free port, see port()) and starts serving.
  // `address` is a numeric IPv4/IPv6 address or a host name ("0.0.0.0" or
  // "::" for all interfaces, "" means all interfaces too). Fails with
  // Unavailable naming address:port and the reason (address in use, not a
  // local address, unknown host...), InvalidArgument for a port outside
  // 0..65535, Conflict if already started. Can be called again after Stop().
  // Start, Stop, port and url are not meant to be called concurrently with
  // one another (one owning thread).
  Status Start(const std::string& address, int port);

  // Stops accepting, finishes or times out the connections in progress and
  // joins the server threads. Idempotent; a no-op when not started.
  void Stop();

  bool running() const;
  // The bound port (the real one when started with port 0); 0 when stopped.
  int port() const;
  // "http://ADDRESS:PORT/metrics" (IPv6 addresses in brackets); empty when
  // stopped.
  std::string url() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardps::metrics
