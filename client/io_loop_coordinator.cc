// The client's connection to its job's coordinator (or coordinators: a
// leader and its standbys, docs/fault-tolerance.md): IoLoop's part.
#include "client/io_loop.h"
#include "common/base/log.h"
#include "common/net/net.h"

namespace shardps::detail {

Status IoLoop::ConnectCoordinator() {
  try {
    coord = zmq::socket_t(ctx, zmq::socket_type::dealer);
    coord.set(zmq::sockopt::linger, 0);
    coord.set(zmq::sockopt::sndhwm, 0);
    Secure(coord, -1);
    ConnectCoordinators(coord, opts.coordinator);
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument("cannot connect to coordinator '" + opts.coordinator + "': " + e.what());
  }
  return Status::OK();
}

bool IoLoop::HoldForCoordinator(std::vector<zmq::message_t>& frames) {
  // Given several coordinators (a leader and standbys), the socket sends
  // only on a connection made: none yet (the leader not up, or just lost).
  // The request waits for one, its deadline running. (Whatever ZMQ_EVENTS
  // says now: a connection made, or lost, since the send failed changes
  // nothing; the next loop pass sends it.)
  if (CoordinatorEndpoints(opts.coordinator).size() < 2) return false;
  // (Not said of the first request: its connection is still being made.)
  if (coord_waiting.empty() && sends > 1)
    LOG_INFO << "no coordinator of " << opts.coordinator << " leads yet: requests wait for one";
  coord_waiting.push_back(std::move(frames));
  return true;
}

void IoLoop::SendHeldForCoordinator() {
  while (!coord_waiting.empty() && SendMultipart(coord, coord_waiting.front()).ok()) coord_waiting.pop_front();
}

}  // namespace shardps::detail
