#include "common/net/net.h"

#include <arpa/inet.h>
#include <malloc.h>
#include <netdb.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

namespace shardps {

bool RecvMultipart(zmq::socket_t& s, std::vector<zmq::message_t>* frames, bool dontwait, size_t max_frames,
                   size_t* dropped) {
  frames->clear();
  if (dropped) *dropped = 0;
  zmq::message_t m;
  try {
    auto r = s.recv(m, dontwait ? zmq::recv_flags::dontwait : zmq::recv_flags::none);
    if (!r) return false;
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return false;
    throw;
  }
  bool more = m.more();
  frames->push_back(std::move(m));
  while (more) {
    zmq::message_t part;
    (void)s.recv(part, zmq::recv_flags::none);  // the rest of a message is already here
    more = part.more();
    if (frames->size() < max_frames) {
      frames->push_back(std::move(part));
    } else if (dropped) {
      ++*dropped;
    }
  }
  return true;
}

Status SendMultipart(zmq::socket_t& s, std::vector<zmq::message_t>& frames) {
  try {
    for (size_t i = 0; i < frames.size(); ++i) {
      auto flags = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
      if (!s.send(frames[i], flags | zmq::send_flags::dontwait))
        return Status::Unavailable("send would block (peer not keeping up)");
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == EHOSTUNREACH) return Status::Unavailable("peer is gone (EHOSTUNREACH)");
    return Status::Unavailable(std::string("send failed: ") + e.what());
  }
  return Status::OK();
}

int Poll(zmq::pollitem_t* items, size_t n, Millis timeout) {
  try {
    return zmq::poll(items, n, timeout);
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return 0;
    throw;
  }
}

std::string BindSpec(const std::string& endpoint) {
  if (endpoint.size() > 2 && endpoint.compare(endpoint.size() - 2, 2, ":0") == 0)
    return endpoint.substr(0, endpoint.size() - 1) + "*";
  return endpoint;
}

namespace {
// Splits tcp://HOST:PORT (HOST may be [v6]); false if it is not that form.
bool SplitTcp(const std::string& ep, std::string* host, std::string* port) {
  const std::string tcp = "tcp://";
  if (ep.rfind(tcp, 0) != 0) return false;
  const size_t colon = ep.rfind(':');
  if (colon == std::string::npos || colon < tcp.size()) return false;
  *host = ep.substr(tcp.size(), colon - tcp.size());
  *port = ep.substr(colon + 1);
  return !host->empty() && !port->empty();
}

Status ResolveIPv4(const std::string& host, sockaddr_in* out) {
  addrinfo hints{};
  hints.ai_family = AF_INET;
  hints.ai_socktype = SOCK_DGRAM;
  addrinfo* res = nullptr;
  int rc = getaddrinfo(host.c_str(), "9", &hints, &res);
  if (rc != 0 || !res)
    return Status::InvalidArgument("cannot resolve '" + host + "': " + gai_strerror(rc));
  std::memcpy(out, res->ai_addr, sizeof *out);
  freeaddrinfo(res);
  return Status::OK();
}
}  // namespace

std::vector<std::string> CoordinatorEndpoints(const std::string& list) {
  std::vector<std::string> out;
  for (size_t b = 0; b <= list.size();) {
    size_t e = list.find(',', b);
    if (e == std::string::npos) e = list.size();
    if (e > b) out.push_back(list.substr(b, e - b));
    b = e + 1;
  }
  return out;
}

void ConnectCoordinators(zmq::socket_t& s, const std::string& list) {
  const std::vector<std::string> all = CoordinatorEndpoints(list);
  if (all.size() > 1) {
    s.set(zmq::sockopt::immediate, 1);
    // A leader that stops answering (stopped, cut off) loses its
    // connection within 1.5 s: what is sent meanwhile waits for a
    // connection, and the new leader's handshake has the unanswered
    // requests sent again.
    s.set(zmq::sockopt::heartbeat_ivl, 500);
    s.set(zmq::sockopt::heartbeat_timeout, 1500);
  }
  for (const auto& e : all) s.connect(e);
}

Status CheckConnectEndpoint(const std::string& endpoint) {
  if (endpoint.find(',') != std::string::npos) {
    const std::vector<std::string> all = CoordinatorEndpoints(endpoint);
    if (all.empty()) return Status::InvalidArgument("'" + endpoint + "' names no endpoint");
    for (const auto& e : all) SHARDPS_RETURN_IF_ERROR(CheckConnectEndpoint(e));
    return Status::OK();
  }
  if (endpoint.rfind("ipc://", 0) == 0 || endpoint.rfind("inproc://", 0) == 0) return Status::OK();
  std::string host, port;
  if (!SplitTcp(endpoint, &host, &port))
    return Status::InvalidArgument("'" + endpoint + "' is not tcp://HOST:PORT (or ipc://PATH)");
  char* end = nullptr;
  const long p = std::strtol(port.c_str(), &end, 10);
  if (*end != '\0' || p < 1 || p > 65535)
    return Status::InvalidArgument("'" + endpoint + "': port '" + port + "' is not a number in 1..65535");
  if (host.size() > 2 && host.front() == '[' && host.back() == ']') host = host.substr(1, host.size() - 2);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* res = nullptr;
  const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &res);
  if (res) freeaddrinfo(res);
  if (rc != 0)
    return Status::InvalidArgument("'" + endpoint + "': host '" + host + "' does not resolve (" + gai_strerror(rc) +
                                   ")");
  return Status::OK();
}

std::string HostName() {
  char buf[256] = {};
  if (gethostname(buf, sizeof buf - 1) != 0) return "unknown";
  return buf;
}

Status LocalAddressTowards(const std::string& endpoints, std::string* addr) {
  const std::string endpoint = endpoints.substr(0, endpoints.find(','));  // (a list of coordinators: the first)
  std::string host = endpoint, port;
  if (endpoint.rfind("tcp://", 0) == 0 && !SplitTcp(endpoint, &host, &port))
    return Status::InvalidArgument("'" + endpoint + "' is not tcp://HOST:PORT");
  sockaddr_in peer{};
  Status s = ResolveIPv4(host, &peer);
  if (!s.ok()) return s;
  // A UDP connect() sends nothing: it only asks the kernel for the route.
  int fd = ::socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Internal(std::string("socket: ") + std::strerror(errno));
  sockaddr_in local{};
  socklen_t len = sizeof local;
  const bool ok = ::connect(fd, reinterpret_cast<sockaddr*>(&peer), sizeof peer) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&local), &len) == 0;
  const int err = errno;
  ::close(fd);
  if (!ok) return Status::Unavailable("no route from this host to '" + host + "': " + std::strerror(err));
  char buf[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &local.sin_addr, buf, sizeof buf);
  *addr = buf;
  return Status::OK();
}

Status AdvertisedEndpoint(zmq::socket_t& sock, const std::string& advertise, const std::string& route_to,
                          std::string* out) {
  std::string ep = sock.get(zmq::sockopt::last_endpoint), host, port;
  if (!SplitTcp(ep, &host, &port)) {  // ipc://, inproc://: as bound
    *out = ep;
    return Status::OK();
  }
  if (!advertise.empty()) {
    sockaddr_in a{};
    Status s = ResolveIPv4(advertise, &a);
    if (!s.ok()) return Status::InvalidArgument("--advertise: " + s.message());
    *out = "tcp://" + advertise + ":" + port;
    return Status::OK();
  }
  if (host == "0.0.0.0" || host == "*") {
    std::string addr = "127.0.0.1";
    if (!route_to.empty()) {
      Status s = LocalAddressTowards(route_to, &addr);
      if (!s.ok()) return Status::Unavailable("cannot choose an address to advertise: " + s.message() +
                                              " (pass --advertise HOST)");
    }
    *out = "tcp://" + addr + ":" + port;
    return Status::OK();
  }
  *out = ep;
  return Status::OK();
}

std::string LastEndpoint(zmq::socket_t& s) {
  std::string ep;
  if (!AdvertisedEndpoint(s, "", "", &ep).ok()) ep = s.get(zmq::sockopt::last_endpoint);
  return ep;
}

void TuneAllocatorForLargeMessages() {
  // Blocks up to 32 MiB (glibc's maximum) come from the heap, and the heap is
  // not trimmed below 1 GiB, so freed message buffers are reused warm.
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024);
}

}  // namespace shardps
