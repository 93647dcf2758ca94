#include "common/net.h"

#include <malloc.h>

#include <cstdio>
#include <fstream>

namespace shardps {

bool RecvMultipart(zmq::socket_t& s, std::vector<zmq::message_t>* frames, bool dontwait) {
  frames->clear();
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
    frames->push_back(std::move(part));
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

std::string LastEndpoint(zmq::socket_t& s) {
  std::string ep = s.get(zmq::sockopt::last_endpoint);
  // A wildcard bind reports 0.0.0.0; peers on this host dial loopback.
  const std::string any = "tcp://0.0.0.0:";
  if (ep.rfind(any, 0) == 0) ep = "tcp://127.0.0.1:" + ep.substr(any.size());
  return ep;
}

Status WriteFileAtomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return Status::InvalidArgument("cannot write '" + tmp + "'");
    f << text;
    if (!f.good()) return Status::Internal("write to '" + tmp + "' failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return Status::Internal("cannot rename '" + tmp + "' to '" + path + "'");
  return Status::OK();
}

void TuneAllocatorForLargeMessages() {
  // Blocks up to 32 MiB (glibc's maximum) come from the heap, and the heap is
  // not trimmed below 1 GiB, so freed message buffers are reused warm.
  mallopt(M_MMAP_THRESHOLD, 32 * 1024 * 1024);
  mallopt(M_TRIM_THRESHOLD, 1024 * 1024 * 1024);
}

}  // namespace shardps
