// ServerStart: how a server starts (Server::Start), apart from how it
// serves: its data socket configured (queue and size limits, CURVE with the
// ZAP handler admitting the access list) and bound, its endpoint as clients
// should dial it, the coordinator connection dialled with its handshakes
// watched, and the registration: Register sent (again every 2 s while
// unanswered: a coordinator that restarted lost it) until the
// coordinator's reply, the register timeout, or a refused handshake (keys
// here and none there, or the other way round, or a key the coordinator
// does not admit), which fails the start at once with the reason.
//
// Thread: the thread that calls Server::Start (and then runs the server's
// loop); it borrows the server's two sockets for the start only.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include <zmq.hpp>

#include "common/cluster/cluster.h"
#include "server/server_options.h"
#include "shardps/status.h"

namespace shardps {

class ZapHandler;

class ServerStart {
 public:
  ServerStart(zmq::context_t& ctx, const ServerOptions& opts, zmq::socket_t& data, zmq::socket_t& coord)
      : ctx_(ctx), opts_(opts), data_(data), coord_(coord) {}
  ~ServerStart();  // stops watching the coordinator connection's handshakes
  ServerStart(const ServerStart&) = delete;
  ServerStart& operator=(const ServerStart&) = delete;

  // Configures and binds the data socket (with security on, *zap is the
  // ZAP handler started for it, which must outlive the sockets) and dials
  // the coordinator. *endpoint: where clients reach the data socket.
  Status Open(std::unique_ptr<ZapHandler>* zap, std::string* endpoint);
  // REQUIRES: Open succeeded. Registers this server's `endpoint` (request
  // `request_id`) and waits for the coordinator's answer: on OK, the rank
  // it gave this server and the cluster as it is. Gives up (Unavailable)
  // as soon as *stop is set (SIGINT, SIGTERM), when given.
  Status Register(const std::string& endpoint, uint64_t request_id, uint32_t* rank, ClusterView* view,
                  const std::atomic<bool>* stop = nullptr);

 private:
  zmq::context_t& ctx_;
  const ServerOptions& opts_;
  zmq::socket_t& data_;
  zmq::socket_t& coord_;
  zmq::socket_t monitor_;  // the coordinator connection's handshake events
};

}  // namespace shardps
