#include "server/server_start.h"

#include <unistd.h>

#include <atomic>
#include <vector>

#include "common/base/log.h"
#include "common/base/wait_note.h"
#include "common/codec/wire.h"
#include "common/net/handshake.h"
#include "common/net/net.h"
#include "common/net/security.h"
#include "common/net/zap.h"

namespace shardps {

ServerStart::~ServerStart() { zmq_socket_monitor(coord_.handle(), nullptr, 0); }

Status ServerStart::Open(std::unique_ptr<ZapHandler>* zap, std::string* endpoint) {
  try {
    data_.set(zmq::sockopt::router_mandatory, 1);
    // A replica stream's connection (a fixed routing id per server) that
    // comes again takes over from the old one rather than being ignored.
    data_.set(zmq::sockopt::router_handover, 1);
    data_.set(zmq::sockopt::linger, 0);
    // Outgoing: at most this many replies queued per client. A client that
    // stops reading has further replies dropped (logged; it times out)
    // instead of held in this server's memory. 8192 is twice what a client
    // may have queued here (rcvhwm), so a reading client never hits it.
    data_.set(zmq::sockopt::sndhwm, 8192);
    // Incoming: at most this many messages queued per client before ZeroMQ
    // stops reading that connection (TCP pushes back on the client).
    data_.set(zmq::sockopt::rcvhwm, 4096);
    // Frames past twice the request limit drop the connection; anything in
    // between gets a TooLarge reply.
    data_.set(zmq::sockopt::maxmsgsize, static_cast<int64_t>(2 * opts_.max_request_bytes + (1 << 20)));
    if (opts_.security.enabled) {
      *zap = std::make_unique<ZapHandler>(ctx_, opts_.security.access);
      if (Status s = (*zap)->Start(); !s.ok()) return s;
      if (Status s = MakeCurveServer(data_, opts_.security.key); !s.ok()) return s;
      (*zap)->Watch(data_, "this server");
      MakeCurveClient(coord_, opts_.security.key);
    }
    data_.bind(BindSpec(opts_.bind));
    coord_.set(zmq::sockopt::linger, 0);
    static std::atomic<int> monitors{0};
    monitor_ = WatchHandshakes(ctx_, coord_, "inproc://shardps-server-registers-" + std::to_string(monitors++));
    ConnectCoordinators(coord_, opts_.coordinator);
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument("server cannot bind '" + opts_.bind + "' or reach coordinator '" +
                                   opts_.coordinator + "': " + e.what());
  }
  return AdvertisedEndpoint(data_, opts_.advertise, opts_.coordinator, endpoint);
}

Status ServerStart::Register(const std::string& endpoint, uint64_t request_id, uint32_t* rank, ClusterView* view,
                             const std::atomic<bool>* stop) {
  flatbuffers::FlatBufferBuilder fbb;
  auto ep = fbb.CreateString(endpoint);
  auto host = fbb.CreateString(HostName());
  auto url = fbb.CreateString(opts_.metrics_url);
  auto req = wire::CreateRegisterRequest(fbb, wire::Role::Server, opts_.rank, ep, host,
                                         static_cast<uint32_t>(::getpid()), url, opts_.memory_budget);
  wire::Fields f;
  f.type = wire::MsgType::Register;
  f.request_id = request_id;
  f.role = wire::Role::Server;
  zmq::message_t m = wire::Encode(fbb, f, wire::Body::RegisterRequest, req.Union());
  zmq::message_t again;
  again.copy(m);
  // Not a blocking send: a handshake that fails with a protocol error (keys
  // here, none there) takes the DEALER's only pipe away, and a blocking send
  // would then wait forever instead of failing below. Unsent, it is tried
  // again after the first poll.
  const bool sent = coord_.send(m, zmq::send_flags::dontwait).has_value();

  const auto deadline = Clock::now() + opts_.register_timeout;
  auto resend = Clock::now() + Millis(sent ? 2000 : 0);
  std::vector<zmq::message_t> frames;
  std::vector<uint64_t> scratch;
  const KeyFile* key = opts_.security.enabled ? &opts_.security.key : nullptr;
  int drops = 0;  // handshakes dropped in a row
  WaitNote note("coordinator", opts_.coordinator, "this server's registration", Clock::now(), deadline);
  while (Clock::now() < deadline) {
    if (stop && stop->load())
      return Status::Unavailable("stopped (SIGINT or SIGTERM) while waiting for coordinator " + opts_.coordinator +
                                 " to answer the registration");
    note.Check();
    zmq::pollitem_t items[] = {{coord_.handle(), 0, ZMQ_POLLIN, 0}, {monitor_.handle(), 0, ZMQ_POLLIN, 0}};
    Poll(items, 2, Millis(100));
    if (std::string why; HandshakeRefused(monitor_, key, &drops, &why))
      return Status::PermissionDenied("coordinator " + opts_.coordinator + " refused this server: " + why);
    if (Clock::now() >= resend) {
      // Unanswered: a coordinator that restarted lost it. Sent again (the
      // same request: registering twice from here is harmless).
      zmq::message_t copy;
      copy.copy(again);
      coord_.send(copy, zmq::send_flags::dontwait);
      resend = Clock::now() + Millis(2000);
    }
    if (!RecvMultipart(coord_, &frames)) continue;
    const wire::Header* h = nullptr;
    Status s = wire::ParseHeader(frames[0], scratch, &h);
    if (!s.ok()) return Status::Internal("coordinator sent a bad reply: " + s.ToString());
    if (h->type() != wire::MsgType::Reply || h->request_id() != request_id) continue;
    s = wire::ReplyStatus(h);
    if (!s.ok()) return Status(s.code(), "coordinator refused registration: " + s.message());
    if (s = wire::DecodeCluster(h->body_as_ClusterInfo(), view); !s.ok()) return s;
    *rank = static_cast<uint32_t>(h->rank());
    return Status::OK();
  }
  return Status::Timeout("no answer from coordinator " + opts_.coordinator + " within " +
                         std::to_string(opts_.register_timeout.count()) + " ms" +
                         (opts_.security.enabled
                              ? " (security on: does the coordinator run with this job's keys, and list this "
                                "server.key in its access list?)"
                              : ""));
}

}  // namespace shardps
