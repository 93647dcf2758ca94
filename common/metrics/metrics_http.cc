// The only translation unit that includes httplib.h.
//
// Debian 12's libcpp-httplib-dev is cpp-httplib 0.11.4 in "split" form: the
// header only declares, the code is in libcpp-httplib.so, built with
// CPPHTTPLIB_OPENSSL_SUPPORT, _ZLIB_SUPPORT and _BROTLI_SUPPORT. Those macros
// change class layouts, so this file must be compiled with the flags of
// pkg-config's cpp-httplib (meson: dependency('cpp-httplib')), never with the
// header alone.
#include "common/metrics/metrics_http.h"

#include <httplib.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <system_error>
#include <thread>

#include "common/base/log.h"
#include "common/metrics/metrics.h"

namespace shardps::metrics {
namespace {

constexpr char kContentType[] = "text/plain; version=0.0.4; charset=utf-8";
constexpr size_t kWorkerThreads = 2;  // answering threads (+1 accepting)
constexpr int kIoTimeoutSec = 2;      // read / write
constexpr int kRequestWaitSec = 1;    // from accept to the first request byte

std::string ErrnoText(int err) { return std::error_code(err, std::generic_category()).message(); }

std::string HostPort(const std::string& address, int port) {
  std::string host = address.empty() ? "0.0.0.0" : address;
  if (host.find(':') != std::string::npos) host = "[" + host + "]";
  return host + ":" + std::to_string(port);
}

// httplib 0.11 binds with SO_REUSEPORT (two processes would then share one
// port without an error) and reports a failed bind as a bare `false`. So the
// socket is bound here and handed to httplib through its protected
// svr_sock_, which listen_after_bind() then serves.
class AdoptingServer : public httplib::Server {
 public:
  void Adopt(int fd) { svr_sock_ = fd; }
};

struct Bound {
  int fd = -1;
  int port = 0;
  std::string error;
};

Bound BindAndListen(const std::string& address, int port) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* res = nullptr;
  std::string service = std::to_string(port);
  int rc = getaddrinfo(address.empty() ? nullptr : address.c_str(), service.c_str(), &hints, &res);
  if (rc != 0) {
    Bound b;
    b.error = std::string("cannot resolve the address: ") +
              (rc == EAI_SYSTEM ? ErrnoText(errno) : gai_strerror(rc));
    return b;
  }
  Bound b;
  for (addrinfo* ai = res; ai; ai = ai->ai_next) {
    int fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      b.error = "socket: " + ErrnoText(errno);
      continue;
    }
    int one = 1, zero = 0;
    // Rebinding right after a restart (TIME_WAIT) is fine; sharing is not.
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (ai->ai_family == AF_INET6) setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) != 0) {
      b.error = ErrnoText(errno);
      ::close(fd);
      continue;
    }
    if (::listen(fd, 64) != 0) {
      b.error = "listen: " + ErrnoText(errno);
      ::close(fd);
      continue;
    }
    sockaddr_storage ss{};
    socklen_t len = sizeof(ss);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&ss), &len) != 0) {
      b.error = "getsockname: " + ErrnoText(errno);
      ::close(fd);
      continue;
    }
    b.port = ss.ss_family == AF_INET6 ? ntohs(reinterpret_cast<sockaddr_in6*>(&ss)->sin6_port)
                                      : ntohs(reinterpret_cast<sockaddr_in*>(&ss)->sin_port);
    b.fd = fd;
    b.error.clear();
    break;
  }
  freeaddrinfo(res);
  if (b.fd < 0 && b.error.empty()) b.error = "no usable address";
  return b;
}

}  // namespace

struct MetricsServer::Impl {
  explicit Impl(const Registry& r) : registry(r) {}
  const Registry& registry;
  std::unique_ptr<AdoptingServer> server;
  std::thread thread;
  std::atomic<bool> exited{false};  // the accept loop returned
  std::atomic<bool> stopping{false};
  std::string address;
  int port = 0;
};

MetricsServer::MetricsServer(const Registry& registry)
    : impl_(std::make_unique<Impl>(registry)) {}

MetricsServer::~MetricsServer() { Stop(); }

Status MetricsServer::Start(const std::string& address, int port) {
  Impl& m = *impl_;
  if (m.thread.joinable())
    return Status::Conflict("metrics server already running at " + url());
  if (port < 0 || port > 65535)
    return Status::InvalidArgument("metrics server: port " + std::to_string(port) +
                                   " is outside 0..65535");

  Bound b = BindAndListen(address, port);
  if (b.fd < 0)
    return Status::Unavailable("metrics server cannot listen on " + HostPort(address, port) +
                               ": " + b.error);

  auto svr = std::make_unique<AdoptingServer>();  // note: sets SIGPIPE to SIG_IGN
  svr->new_task_queue = [] { return new httplib::ThreadPool(kWorkerThreads); };
  // One request per connection, bounded waits: a stuck or idle client holds a
  // worker for at most a few seconds, and so does Stop().
  svr->set_keep_alive_max_count(1);
  svr->set_keep_alive_timeout(kRequestWaitSec);
  svr->set_read_timeout(kIoTimeoutSec, 0);
  svr->set_write_timeout(kIoTimeoutSec, 0);
  svr->set_payload_max_length(64 * 1024);
  const Registry* reg = &m.registry;
  svr->Get("/metrics", [reg](const httplib::Request&, httplib::Response& res) {
    res.body = reg->Render();
    res.set_header("Content-Type", kContentType);
  });
  // Other methods are refused before httplib reads a body (a POST without
  // Content-Length would otherwise be read until the client closes or the
  // read times out).
  svr->set_pre_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (req.method == "GET" || req.method == "HEAD") return httplib::Server::HandlerResponse::Unhandled;
    res.status = 405;
    res.set_header("Allow", "GET, HEAD");
    res.set_content("405 method not allowed: use GET /metrics\n", "text/plain; charset=utf-8");
    return httplib::Server::HandlerResponse::Handled;
  });
  svr->set_error_handler([](const httplib::Request&, httplib::Response& res) {
    if (res.status == 404)
      res.set_content("404 page not found: metrics are served at /metrics\n",
                      "text/plain; charset=utf-8");
  });
  svr->Adopt(b.fd);

  m.exited.store(false);
  m.stopping.store(false);
  m.server = std::move(svr);
  m.address = address;
  m.port = b.port;
  try {
    m.thread = std::thread([&m, s = m.server.get(), where = HostPort(address, b.port)] {
      bool ok = s->listen_after_bind();
      m.exited.store(true);
      if (!ok && !m.stopping.load()) {
        SHARDPS_LOG(kError) << "metrics server on " << where << " stopped: accept failed";
      }
    });
  } catch (const std::system_error& e) {
    ::close(b.fd);
    m.server.reset();
    m.port = 0;
    return Status::Internal(std::string("metrics server: cannot start its thread: ") + e.what());
  }
  // Server::stop() only acts once the accept loop has started: wait for it
  // (a thread start; microseconds) so that a Stop() right after cannot miss.
  while (!m.server->is_running() && !m.exited.load())
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  return Status::OK();
}

void MetricsServer::Stop() {
  Impl& m = *impl_;
  if (!m.thread.joinable()) return;
  m.stopping.store(true);
  // After the loop has exited on its own httplib has closed the socket
  // already; stop() would close that number again.
  if (!m.exited.load()) m.server->stop();
  m.thread.join();
  m.server.reset();
  m.port = 0;
}

bool MetricsServer::running() const { return impl_->thread.joinable() && !impl_->exited.load(); }

int MetricsServer::port() const { return impl_->thread.joinable() ? impl_->port : 0; }

bool IsWildcard(const std::string& address) {
  return address.empty() || address == "0.0.0.0" || address == "::" || address == "[::]";
}

std::string Url(const std::string& host, int port) { return "http://" + HostPort(host, port) + "/metrics"; }

std::string MetricsServer::url() const {
  if (!impl_->thread.joinable()) return {};
  return "http://" + HostPort(impl_->address, impl_->port) + "/metrics";
}

}  // namespace shardps::metrics
