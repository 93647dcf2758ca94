// The ZAP handler (ZeroMQ RFC 27) of a process whose sockets listen with
// CURVE, and the roles' permissions (docs/security.md).
#pragma once

#include <atomic>
#include <mutex>
#include <vector>
#include <optional>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "common/codec/wire.h"
#include "common/net/net.h"
#include "common/net/security.h"

namespace shardps {

// Admits a CURVE peer whose public key is on the access list, and names its
// role as the connection's User-Id (read back per message with PeerRole).
// Refused connections are logged with their address and the reason. Start
// it before binding a socket made with MakeCurveServer: it binds
// inproc://zeromq.zap.01 in `ctx`, one per context.
class ZapHandler {
 public:
  ZapHandler(zmq::context_t& ctx, AccessList access);
  ~ZapHandler();
  ZapHandler(const ZapHandler&) = delete;
  ZapHandler& operator=(const ZapHandler&) = delete;

  Status Start();
  // Also logs the connections to `s` (a socket made with MakeCurveServer)
  // that fail the CURVE handshake before ZAP is asked: no key (plaintext), or
  // a client holding another job's server key. Call from s's own thread.
  void Watch(zmq::socket_t& s, const std::string& label);
  uint64_t admitted() const { return admitted_.load(std::memory_order_relaxed); }
  uint64_t refused() const { return refused_.load(std::memory_order_relaxed); }

 private:
  void Loop(zmq::socket_t sock);
  void Serve(zmq::socket_t& sock);  // until stop_ or an exception
  void Refused(const std::string& what);

  struct Watched {
    std::string endpoint, label;
  };
  std::mutex mu_;
  std::vector<Watched> to_watch_;  // handed to the handler's thread
  std::vector<std::pair<zmq::socket_t, std::string>> monitors_;  // the handler's thread only
  int watch_seq_ = 0;
  // Refusals are logged one by one up to 20 a minute, then counted
  // (handler thread only).
  Clock::time_point window_{};
  int logged_ = 0;
  uint64_t unlogged_ = 0;
  zmq::context_t& ctx_;
  AccessList access_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::atomic<uint64_t> admitted_{0}, refused_{0};
};

// The role the ZAP handler gave the sender of `frame` (any frame received
// from a CURVE socket); nullopt on a plaintext socket.
std::optional<KeyRole> PeerRole(const zmq::message_t& frame);

// OK when a peer holding a key of `role` may send `type`, declaring itself
// `declared` (the header's role); else PermissionDenied saying who may.
Status Authorize(KeyRole role, wire::MsgType type, wire::Role declared);

}  // namespace shardps
