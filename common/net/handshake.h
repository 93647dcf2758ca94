// Watching a dialing socket's handshakes, and one request/reply over a
// socket that may be refused during its handshake: networking that knows
// what a refused CURVE handshake means (the keys are common/net/security.h's).
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include <zmq.hpp>

#include "common/net/security.h"
#include "shardps/status.h"

namespace shardps {

// zmq_socket_monitor on a dialing socket: what a handshake failure means,
// for a client with `key` (nullptr: none).
constexpr int kHandshakeEvents = ZMQ_EVENT_HANDSHAKE_FAILED_AUTH | ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL |
                                 ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL | ZMQ_EVENT_HANDSHAKE_SUCCEEDED;
// Starts monitoring `s` and returns the PAIR socket its events arrive on.
zmq::socket_t WatchHandshakes(zmq::context_t& ctx, zmq::socket_t& s, const std::string& inproc_name);
// What a monitor reported about one handshake.
enum class Handshake {
  kNone,       // nothing to read
  kSucceeded,
  kRefused,    // a definite failure: a refused key, a mechanism mismatch
  kDropped,    // the connection closed during the handshake, no reason
               // given (libzmq says so for any drop: a peer restarting, a
               // wrong server key, ...); refuse after kDropsToRefuse in a row
};
constexpr int kDropsToRefuse = 3;
// Reads one event (non-blocking). For kRefused and kDropped, *why says what
// it means in words.
Handshake ReadHandshakeEvent(zmq::socket_t& monitor, const KeyFile* key, std::string* why);
// Why kDropsToRefuse drops in a row are taken as a refusal.
std::string DroppedHandshakesWhy(const KeyFile* key);
// Reads every event `monitor` holds; true when one refuses this client (or
// is the kDropsToRefuse-th dropped handshake in a row, counted in *drops
// across calls), with *why in words.
bool HandshakeRefused(zmq::socket_t& monitor, const KeyFile* key, int* drops, std::string* why);
// One request on `sock` (a DEALER watched by `monitor`, WatchHandshakes) and
// its first reply, by `deadline`. PermissionDenied when `peer` refuses this
// client's handshake (`key`: the client's key, nullptr none), with why in
// words; Timeout when nothing comes. The request is never sent blocking: a
// handshake that fails with a protocol error (security on there, no key
// here) takes the DEALER's pipe away for good, and a blocking send would
// then wait forever.
Status RequestReply(zmq::socket_t& sock, zmq::socket_t& monitor, const KeyFile* key, zmq::message_t& request,
                    std::chrono::steady_clock::time_point deadline, const std::string& peer, zmq::message_t* reply);
// The same for a request of several frames (sent as one message) and a
// reply of several (every frame of the first message that arrives).
Status RequestReply(zmq::socket_t& sock, zmq::socket_t& monitor, const KeyFile* key,
                    std::vector<zmq::message_t>& request, std::chrono::steady_clock::time_point deadline,
                    const std::string& peer, std::vector<zmq::message_t>* reply);

}  // namespace shardps
