#include "common/net/handshake.h"

#include <cstdint>
#include <cstdio>
#include <cstring>

#include "common/net/net.h"

namespace shardps {

zmq::socket_t WatchHandshakes(zmq::context_t& ctx, zmq::socket_t& s, const std::string& inproc_name) {
  if (zmq_socket_monitor(s.handle(), inproc_name.c_str(), kHandshakeEvents) != 0)
    throw zmq::error_t();
  zmq::socket_t pair(ctx, zmq::socket_type::pair);
  pair.set(zmq::sockopt::linger, 0);
  pair.connect(inproc_name);
  return pair;
}

Handshake ReadHandshakeEvent(zmq::socket_t& monitor, const KeyFile* key, std::string* why) {
  zmq::message_t ev, addr;
  if (!monitor.recv(ev, zmq::recv_flags::dontwait)) return Handshake::kNone;
  if (ev.more()) (void)monitor.recv(addr, zmq::recv_flags::none);
  if (ev.size() < 6) return Handshake::kDropped;
  uint16_t event;
  uint32_t value;
  std::memcpy(&event, ev.data(), 2);
  std::memcpy(&value, static_cast<const char*>(ev.data()) + 2, 4);
  char hex[16];
  std::snprintf(hex, sizeof hex, "0x%x", value);
  switch (event) {
    case ZMQ_EVENT_HANDSHAKE_SUCCEEDED: return Handshake::kSucceeded;
    case ZMQ_EVENT_HANDSHAKE_FAILED_AUTH:
      *why = key ? "it refused this " + std::string(KeyRoleName(key->role)) + " key (ZAP status " +
                       std::to_string(value) + "): the key is not on the job's access list"
                 : "it refused this client (ZAP status " + std::to_string(value) + ")";
      return Handshake::kRefused;
    case ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL:
      if (value == ZMQ_PROTOCOL_ERROR_ZMTP_MECHANISM_MISMATCH) {
        *why = key ? "security is off there (no CURVE), and this client has a key"
                   : "security is on there and this client has no key: it needs one of the job's keys (worker.key for a worker or trainer, observer.key or admin.key for tools) through --key, --run-dir, ClientOptions.key_file or $SHARDPS_KEY";
        return Handshake::kRefused;
      }
      *why = std::string("the handshake failed (ZMTP protocol error ") + hex + ")" +
             (key ? ": does the peer hold this job's server key?" : "");
      return key ? Handshake::kRefused : Handshake::kDropped;
    default:
      *why = "the connection closed during the handshake";
      return Handshake::kDropped;
  }
}

std::string DroppedHandshakesWhy(const KeyFile* key) {
  return "the connection closed during the handshake " + std::to_string(kDropsToRefuse) + " times in a row: " +
         (key ? "the peer does not hold this job's server key, or its security is off"
              : "security may be on there, and this client has no key: it would need one of the job's keys (worker.key for a worker or trainer, observer.key or admin.key for tools) through --key, --run-dir, ClientOptions.key_file or $SHARDPS_KEY");
}

bool HandshakeRefused(zmq::socket_t& monitor, const KeyFile* key, int* drops, std::string* why) {
  for (Handshake h; (h = ReadHandshakeEvent(monitor, key, why)) != Handshake::kNone;) {
    if (h == Handshake::kSucceeded) *drops = 0;
    if (h == Handshake::kDropped && ++*drops >= kDropsToRefuse) {
      *why = DroppedHandshakesWhy(key);
      return true;
    }
    if (h == Handshake::kRefused) return true;
  }
  return false;
}

namespace {
// Sends `frames` as one message if the socket takes it now; false (nothing
// sent) when it would block. Once the first frame is taken, ZeroMQ takes
// the rest of the message: its limits apply to whole messages.
bool SendIfReady(zmq::socket_t& sock, std::vector<zmq::message_t>& frames) {
  for (size_t i = 0; i < frames.size(); ++i) {
    const auto more = i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none;
    if (!sock.send(frames[i], more | zmq::send_flags::dontwait).has_value()) return false;
  }
  return true;
}
}  // namespace

Status RequestReply(zmq::socket_t& sock, zmq::socket_t& monitor, const KeyFile* key,
                    std::vector<zmq::message_t>& request, Clock::time_point deadline, const std::string& peer,
                    std::vector<zmq::message_t>* reply) {
  bool sent = false;
  int drops = 0;  // handshakes dropped in a row
  for (;;) {
    if (!sent) sent = SendIfReady(sock, request);
    if (std::string why; HandshakeRefused(monitor, key, &drops, &why))
      return Status::PermissionDenied(peer + ": " + why);
    zmq::pollitem_t items[] = {{sock.handle(), 0, static_cast<short>(sent ? ZMQ_POLLIN : ZMQ_POLLOUT), 0},
                               {monitor.handle(), 0, ZMQ_POLLIN, 0}};
    const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
    if (left.count() <= 0 || Poll(items, 2, left) < 0)
      return Status::Timeout(sent ? "no answer from " + peer : "could not send to " + peer + " (no connection)");
    if (sent && (items[0].revents & ZMQ_POLLIN) && RecvMultipart(sock, reply)) return Status::OK();
  }
}

Status RequestReply(zmq::socket_t& sock, zmq::socket_t& monitor, const KeyFile* key, zmq::message_t& request,
                    Clock::time_point deadline, const std::string& peer, zmq::message_t* reply) {
  std::vector<zmq::message_t> frames, replies;
  frames.push_back(std::move(request));
  Status s = RequestReply(sock, monitor, key, frames, deadline, peer, &replies);
  if (s.ok()) *reply = std::move(replies[0]);
  return s;
}

}  // namespace shardps
