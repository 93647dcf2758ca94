#include "common/net/zap.h"

#include <cstring>
#include <vector>

#include "common/base/log.h"
#include "common/net/net.h"

namespace shardps {

ZapHandler::ZapHandler(zmq::context_t& ctx, AccessList access) : ctx_(ctx), access_(std::move(access)) {}

ZapHandler::~ZapHandler() {
  stop_.store(true);
  if (thread_.joinable()) thread_.join();
}

Status ZapHandler::Start() {
  zmq::socket_t sock(ctx_, zmq::socket_type::rep);
  sock.set(zmq::sockopt::linger, 0);
  try {
    sock.bind("inproc://zeromq.zap.01");
  } catch (const zmq::error_t& e) {
    return Status::Internal(std::string("cannot start the ZAP handler (inproc://zeromq.zap.01): ") + e.what());
  }
  thread_ = std::thread([this, s = std::move(sock)]() mutable { Loop(std::move(s)); });
  return Status::OK();
}

void ZapHandler::Watch(zmq::socket_t& s, const std::string& label) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string ep = "inproc://shardps-zap-watch-" + std::to_string(reinterpret_cast<uintptr_t>(this)) + "-" +
                         std::to_string(watch_seq_++);
  if (zmq_socket_monitor(s.handle(), ep.c_str(),
                         ZMQ_EVENT_HANDSHAKE_FAILED_PROTOCOL | ZMQ_EVENT_HANDSHAKE_FAILED_NO_DETAIL) == 0)
    to_watch_.push_back({ep, label});
}

void ZapHandler::Refused(const std::string& what) {
  refused_.fetch_add(1, std::memory_order_relaxed);
  const auto now = Clock::now();
  if (now - window_ > std::chrono::minutes(1)) {
    if (unlogged_) LOG_WARN << unlogged_ << " more connections refused in the last minute";
    window_ = now;
    logged_ = 0;
    unlogged_ = 0;
  }
  if (logged_ < 20) {
    ++logged_;
    LOG_WARN << what;
  } else {
    ++unlogged_;
  }
}

void ZapHandler::Loop(zmq::socket_t sock) {
  // An exception must not end the thread (std::terminate) nor leave the
  // sockets without their handler (every handshake would then fail): log it
  // and go on, with a fresh socket if the REP state machine was left
  // mid-request.
  while (!stop_.load()) {
    try {
      Serve(sock);
    } catch (const zmq::error_t& e) {
      if (e.num() == ETERM) return;
      LOG_ERROR << "ZAP handler: " << e.what() << "; restarting it";
      sock.close();
      sock = zmq::socket_t(ctx_, zmq::socket_type::rep);
      sock.set(zmq::sockopt::linger, 0);
      try {
        sock.bind("inproc://zeromq.zap.01");
      } catch (const zmq::error_t& b) {
        LOG_ERROR << "ZAP handler: cannot bind again (" << b.what() << "): every CURVE handshake now fails";
        return;
      }
    }
  }
}

void ZapHandler::Serve(zmq::socket_t& sock) {
  std::vector<zmq::message_t> req;
  while (!stop_.load()) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& w : to_watch_) {
        zmq::socket_t pair(ctx_, zmq::socket_type::pair);
        pair.set(zmq::sockopt::linger, 0);
        pair.connect(w.endpoint);
        monitors_.emplace_back(std::move(pair), w.label);
      }
      to_watch_.clear();
    }
    std::vector<zmq::pollitem_t> items{{sock.handle(), 0, ZMQ_POLLIN, 0}};
    for (auto& m : monitors_) items.push_back({m.first.handle(), 0, ZMQ_POLLIN, 0});
    if (Poll(items.data(), items.size(), Millis(100)) <= 0) continue;
    for (auto& [pair, label] : monitors_) {
      zmq::message_t ev, addr;
      while (pair.recv(ev, zmq::recv_flags::dontwait)) {
        if (ev.more()) (void)pair.recv(addr, zmq::recv_flags::none);
        uint32_t value = 0;
        if (ev.size() >= 6) std::memcpy(&value, static_cast<const char*>(ev.data()) + 2, 4);
        Refused("refused a connection to " + label + " (" + addr.to_string() +
                "): it failed the CURVE handshake (error " + std::to_string(value) +
                "): a client without a key, or holding another job's server key (security is on in this job: a client needs "
                "one of its keys, worker.key for workers, observer.key or admin.key for tools)");
      }
    }
    if (!RecvMultipart(sock, &req, true, 8)) continue;
    auto str = [&](size_t i) { return i < req.size() ? req[i].to_string() : std::string(); };
    // version, request id, domain, address, routing id, mechanism, credentials
    const std::string version = str(0), request_id = str(1), address = str(3), mechanism = str(5);
    std::string status = "400", text, user_id;
    if (version != "1.0") {
      text = "ZAP version '" + version + "'";
    } else if (mechanism != "CURVE") {
      text = "mechanism " + (mechanism.empty() ? std::string("(none)") : mechanism) + ": this job admits only CURVE";
    } else if (req.size() < 7 || req[6].size() != 32) {
      text = "no CURVE public key in the request";
    } else {
      char z85[41];
      zmq_z85_encode(z85, static_cast<const uint8_t*>(req[6].data()), 32);
      auto it = access_.keys.find(z85);
      if (it == access_.keys.end()) {
        text = std::string("key ") + z85 + " is not on the job's access list";
      } else {
        status = "200";
        text = "OK";
        user_id = std::string(KeyRoleName(it->second));
      }
    }
    if (status == "200") {
      admitted_.fetch_add(1, std::memory_order_relaxed);
      LOG_DEBUG << "admitted " << address << " as " << user_id;
    } else {
      Refused("refused a connection from " + (address.empty() ? std::string("?") : address) + ": " + text);
    }
    std::vector<zmq::message_t> rep;
    rep.emplace_back(std::string("1.0"));
    rep.emplace_back(request_id);
    rep.emplace_back(status);
    rep.emplace_back(text);
    rep.emplace_back(user_id);
    rep.emplace_back();  // metadata
    if (Status s = SendMultipart(sock, rep); !s.ok()) throw zmq::error_t();
  }
}

std::optional<KeyRole> PeerRole(const zmq::message_t& frame) {
  const char* v = zmq_msg_gets(const_cast<zmq_msg_t*>(frame.handle()), "User-Id");
  KeyRole r;
  if (v == nullptr || !ParseKeyRole(v, &r)) return std::nullopt;
  return r;
}

namespace {

using wire::MsgType;

// Bit per KeyRole.
constexpr unsigned kS = 1u << static_cast<int>(KeyRole::kServer);
constexpr unsigned kW = 1u << static_cast<int>(KeyRole::kWorker);
constexpr unsigned kO = 1u << static_cast<int>(KeyRole::kObserver);
constexpr unsigned kA = 1u << static_cast<int>(KeyRole::kAdmin);
constexpr unsigned kAny = kS | kW | kO | kA;

unsigned Allowed(MsgType type, wire::Role declared) {
  switch (type) {
    case MsgType::Register:
    case MsgType::Heartbeat:
      // A process is what its key says: only a server key joins as a server,
      // only a worker key as a worker (a clock the job waits for); anyone
      // admitted may join as an observer.
      switch (declared) {
        case wire::Role::Server: return kS;
        case wire::Role::Worker: return kW;
        case wire::Role::Observer: return kAny;
        default: return 0;
      }
    case MsgType::GetCluster:
    case MsgType::GetStatus: return kAny;
    case MsgType::Pull: return kW | kO | kA;
    // Whoever may send one data request may send several in an envelope:
    // each is authorized on its own as the envelope is opened.
    case MsgType::Envelope: return kW | kO | kA;
    case MsgType::Push:
    case MsgType::Tick:
    case MsgType::Join:
    case MsgType::Barrier:
    case MsgType::Leave:
    case MsgType::ClaimWork: return kW;
    // A trainer declares its model's tables (an existing table of the same
    // shape is returned, another shape is a Conflict; nothing is altered).
    case MsgType::CreateTable: return kW | kA;
    case MsgType::Shutdown:
    case MsgType::Stop:
    case MsgType::Rollback:
    case MsgType::DeclareDead:
    case MsgType::DrainServer:
    case MsgType::AddServer:
    case MsgType::Rebalance:
    case MsgType::MoveGroup:
    case MsgType::SnapshotNow: return kA;
    case MsgType::Filled:  // a server's copy of a group is filled (to the coordinator)
    case MsgType::SnapshotDone:
    case MsgType::Replicate:  // a primary's input for its backups (server to server)
    case MsgType::Reply: return kS;  // servers answering the coordinator, or a primary
    default: return 0;  // coordinator -> server messages are never received by a listener
  }
}

std::string Who(unsigned mask) {
  std::string s;
  for (KeyRole r : {KeyRole::kServer, KeyRole::kWorker, KeyRole::kObserver, KeyRole::kAdmin}) {
    if (!(mask & (1u << static_cast<int>(r)))) continue;
    if (!s.empty()) s += ", ";
    s += KeyRoleName(r);
  }
  return s.empty() ? "no key" : s;
}

}  // namespace

Status Authorize(KeyRole role, wire::MsgType type, wire::Role declared) {
  // Whatever the message, a process speaks as a worker (a rank whose clock
  // and liveness the job tracks) or as a server only with that role's key.
  if ((declared == wire::Role::Worker && role != KeyRole::kWorker) ||
      (declared == wire::Role::Server && role != KeyRole::kServer))
    return Status::PermissionDenied("a " + std::string(KeyRoleName(role)) + " key may not speak as a " +
                                    (declared == wire::Role::Worker ? "worker" : "server") + " (" +
                                    wire::EnumNameMsgType(type) + ")");
  const unsigned mask = Allowed(type, declared);
  if (mask & (1u << static_cast<int>(role))) return Status::OK();
  std::string what = wire::EnumNameMsgType(type);
  if (what.empty()) what = "message type " + std::to_string(static_cast<int>(type));
  if (type == MsgType::Register || type == MsgType::Heartbeat) {
    const char* as = wire::EnumNameRole(declared);
    what += std::string(" as ") + (*as ? as : "?");
  }
  return Status::PermissionDenied("a " + std::string(KeyRoleName(role)) + " key may not send " + what +
                                  " (allowed: " + Who(mask) + ")");
}

}  // namespace shardps
