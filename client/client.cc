#include "shardps/client.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <limits>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "common/cluster.h"
#include "common/handshake.h"
#include "common/log.h"
#include "common/net.h"
#include "common/security.h"
#include "common/wire.h"

namespace shardps {
namespace detail {

constexpr uint64_t kNoVersion = ~0ull;
// RangeRequest's clock_ahead for Client::PullCurrent: clock() - 1, at least 0.
constexpr int64_t kPreviousClock = INT64_MIN;

// Per table, the versions of the latest-issued pull a caller waited on: what
// a Push without an explicit stamp was computed on.
struct StampBook {
  std::mutex mu;
  struct Entry {
    uint64_t issued = 0;
    std::shared_ptr<const std::vector<uint64_t>> versions;
  };
  std::unordered_map<uint32_t, Entry> latest;
  void Offer(uint32_t table, uint64_t issued, std::shared_ptr<const std::vector<uint64_t>> v) {
    std::lock_guard<std::mutex> lock(mu);
    Entry& e = latest[table];
    if (issued >= e.issued) e = {issued, std::move(v)};
  }
  std::shared_ptr<const std::vector<uint64_t>> Get(uint32_t table) {
    std::lock_guard<std::mutex> lock(mu);
    auto it = latest.find(table);
    return it == latest.end() ? nullptr : it->second.versions;
  }
};

// The shared state of one request: how many server replies (parts) and
// borrowed frames are still outstanding, and the outcome.
struct Call {
  std::mutex mu;
  std::condition_variable cv;
  int parts_left = 0;
  int frees_left = 0;
  Status status;
  int64_t min_clock = std::numeric_limits<int64_t>::max();
  int64_t max_clock = std::numeric_limits<int64_t>::min();
  zmq::message_t reply;  // control requests: the reply header
  const char* op = "";
  std::chrono::milliseconds default_timeout{0};
  // Pulls: the version of the rows each server sent (kNoVersion: none), and
  // where a successful Wait() records them as the table's latest pull.
  std::vector<uint64_t> versions;
  uint64_t staleness = 0;  // pushes: the largest a server reported
  uint32_t table = 0;
  uint64_t issued = 0;
  std::weak_ptr<StampBook> book;
  std::shared_ptr<const std::vector<uint64_t>> stamp;  // `versions`, once a Wait() returned OK

  bool DoneLocked() const { return parts_left == 0 && (frees_left == 0 || !status.ok()); }
  void PartDone(const Status& s, bool clocks, int64_t minc, int64_t maxc, int server = -1,
                uint64_t version = 0) {
    std::lock_guard<std::mutex> lock(mu);
    if (!s.ok() && status.ok()) status = s;
    if (s.ok() && versions.empty()) staleness = std::max(staleness, version);
    if (clocks && server >= 0 && static_cast<size_t>(server) < versions.size())
      versions[server] = versions[server] == kNoVersion ? version : std::max(versions[server], version);
    if (clocks) {
      min_clock = std::min(min_clock, minc);
      max_clock = std::max(max_clock, maxc);
    }
    if (--parts_left == 0 && DoneLocked()) cv.notify_all();
  }
  void FrameFreed() {
    std::lock_guard<std::mutex> lock(mu);
    if (--frees_left == 0 && DoneLocked()) cv.notify_all();
  }
};

namespace {

std::shared_ptr<Call> FailedCall(Status s) {
  auto c = std::make_shared<Call>();
  c->status = std::move(s);
  return c;
}

// Frames at least this large are sent straight from the caller's memory;
// smaller ones are copied (cheaper than tracking their lifetime).
constexpr size_t kBorrowThreshold = 4096;

void ReleaseFrame(void*, void* hint) {
  auto* holder = static_cast<std::shared_ptr<Call>*>(hint);
  (*holder)->FrameFreed();
  delete holder;
}

zmq::message_t Borrow(const void* data, size_t size, const std::shared_ptr<Call>& call) {
  if (size < kBorrowThreshold) return zmq::message_t(data, size);
  {
    std::lock_guard<std::mutex> lock(call->mu);
    call->frees_left++;
  }
  return zmq::message_t(const_cast<void*>(data), size, &ReleaseFrame, new std::shared_ptr<Call>(call));
}

}  // namespace

// A PullView's received frames by the offset (in floats) of their rows in
// the request. Written by the I/O thread before it completes the request's
// part, read by the caller after Wait().
struct PulledFrames {
  std::map<uint64_t, std::vector<zmq::message_t>> parts;
};

// Where the values of a pull reply go.
struct Dest {
  std::shared_ptr<PulledFrames> view;  // PullView: keep the frames here
  uint64_t view_offset = 0;            // ... at this offset (floats)
  float* out = nullptr;             // contiguous: out[0 .. floats)
  uint64_t floats = 0;
  std::vector<uint32_t> positions;  // scattered: reply row i -> out row positions[i]
  uint32_t cols = 0;
  bool keep_reply = false;          // control request: keep the reply header
  bool clocks = false;              // a pull: aggregate min/max clock
};

struct Outgoing {
  enum Kind { kSend, kConnect, kStop } kind = kSend;
  int target = -1;  // server rank, or -1 for the coordinator
  uint64_t request_id = 0;
  std::vector<zmq::message_t> frames;
  std::shared_ptr<Call> call;
  Dest dest;
  Millis timeout{0};
  std::vector<std::string> endpoints;  // kConnect
};

class ClientImpl {
 public:
  explicit ClientImpl(const ClientOptions& o) : opts_(o), ctx_(1) {}
  ~ClientImpl() { Stop(); }

  Status Start() {
    std::string key_path = opts_.key_file;
    if (key_path.empty()) {
      const char* env = std::getenv("SHARDPS_KEY");
      if (env && *env) key_path = env;
    }
    if (!key_path.empty()) {
      KeyFile k;
      if (Status s = LoadKeyFile(key_path, &k); !s.ok()) return s;
      if (k.role == KeyRole::kServer)
        return Status::InvalidArgument("key file '" + key_path +
                                       "' is the job's server key; a client uses worker.key, observer.key or admin.key");
      key_ = std::move(k);
    }
    efd_ = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (efd_ < 0) return Status::Internal("eventfd failed");
    try {
      coord_ = zmq::socket_t(ctx_, zmq::socket_type::dealer);
      coord_.set(zmq::sockopt::linger, 0);
      coord_.set(zmq::sockopt::sndhwm, 0);
      Secure(coord_, -1);
      coord_.connect(opts_.coordinator);
    } catch (const zmq::error_t& e) {
      return Status::InvalidArgument("cannot connect to coordinator '" + opts_.coordinator + "': " + e.what());
    }
    io_ = std::thread([this] { IoLoop(); });
    return Status::OK();
  }

  void Stop() {
    if (!io_.joinable()) return;
    Outgoing o;
    o.kind = Outgoing::kStop;
    Enqueue(std::move(o));
    io_.join();
    ::close(efd_);
  }

  // Queues `o` for the I/O thread; `finish(o)` runs under the queue lock
  // (so what it numbers is numbered in send order). Fails the call if the
  // client is closed.
  template <typename Finish>
  void Enqueue(Outgoing&& o, Finish&& finish) {
    bool wake;
    {
      std::lock_guard<std::mutex> lock(qmu_);
      if (stopping_ && o.kind != Outgoing::kStop) {
        if (o.call) o.call->PartDone(Status::Unavailable("client is closed"), false, 0, 0);
        return;
      }
      if (o.kind == Outgoing::kStop) stopping_ = true;
      finish(o);
      wake = queue_.empty();
      queue_.push_back(std::move(o));
    }
    if (wake) {  // the I/O thread drains the whole queue once woken
      uint64_t one = 1;
      ssize_t n = ::write(efd_, &one, sizeof one);
      (void)n;
    }
  }
  void Enqueue(Outgoing&& o) {
    Enqueue(std::move(o), [](Outgoing&) {});
  }

  // A coordinator's reply: the message and its parsed header (pointing into
  // msg or scratch).
  struct CoordReply {
    zmq::message_t msg;
    std::vector<uint64_t> scratch;
    const wire::Header* h = nullptr;
  };
  // A request to the coordinator with one header frame; waits for its reply.
  Status CoordinatorCall(flatbuffers::FlatBufferBuilder& fbb, wire::Fields f, wire::Body body_type,
                         flatbuffers::Offset<void> body, Millis timeout, CoordReply* r) {
    auto call = std::make_shared<Call>();
    call->parts_left = 1;
    call->op = "coordinator request";
    Outgoing o;
    o.target = -1;
    o.request_id = f.request_id = next_id_.fetch_add(1);
    f.role = role_wire();
    f.rank = rank_;
    o.frames.push_back(wire::Encode(fbb, f, body_type, body));
    zmq::message_t copy;
    copy.copy(o.frames.back());
    o.call = call;
    o.dest.keep_reply = true;
    o.timeout = timeout;
    const uint64_t id = o.request_id;
    uint64_t gen = coord_reconnects_.load();
    Enqueue(std::move(o));
    // A coordinator that restarted (on its saved state) lost the requests
    // it had not answered: each is sent again, with its request id, when
    // the connection comes back (what it asks is idempotent: a claim of the
    // same clock or sequence number gets the same grant).
    const auto deadline = Clock::now() + timeout + Millis(1000);
    Status s;
    for (;;) {
      const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
      s = Request(call).Wait(std::clamp(left, Millis(1), Millis(200)));
      if (s.code() != Code::kTimeout || Request(call).Done() || Clock::now() >= deadline) break;
      if (coord_reconnects_.load() == gen) continue;
      gen = coord_reconnects_.load();
      Outgoing again;
      again.target = -1;
      again.request_id = id;
      again.frames.emplace_back();
      again.frames.back().copy(copy);
      again.call = call;
      again.dest.keep_reply = true;
      again.timeout = std::chrono::duration_cast<Millis>(deadline - Clock::now());
      LOG_INFO << "coordinator connection re-established: request " << id << " sent again";
      Enqueue(std::move(again));
    }
    if (!s.ok()) return s;
    r->msg = std::move(call->reply);
    return wire::ParseHeader(r->msg, r->scratch, &r->h);
  }

  wire::Role role_wire() const {
    return opts_.role == ClientRole::kWorker ? wire::Role::Worker : wire::Role::Observer;
  }

  Status Register() {
    CoordReply reply;
    // A restarted worker whose old process the coordinator has not declared
    // dead yet is told NotReady: it asks again until connect_timeout.
    const auto deadline = Clock::now() + opts_.connect_timeout;
    Status s;
    for (bool said = false;; said = true) {
      flatbuffers::FlatBufferBuilder fbb;
      auto host = fbb.CreateString(HostName());
      auto req = wire::CreateRegisterRequest(fbb, role_wire(), opts_.role == ClientRole::kWorker ? opts_.rank : -1,
                                             0, host, static_cast<uint32_t>(::getpid()));
      wire::Fields f;
      f.type = wire::MsgType::Register;
      const auto left = std::chrono::duration_cast<Millis>(deadline - Clock::now());
      s = CoordinatorCall(fbb, f, wire::Body::RegisterRequest, req.Union(), std::max(left, Millis(1)), &reply);
      if (s.code() != Code::kNotReady || Clock::now() + Millis(200) >= deadline) break;
      if (!said) {
        LOG_INFO << s.message() << ": waiting";
      }
      std::this_thread::sleep_for(Millis(200));
    }
    if (!s.ok()) {
      if (s.code() == Code::kTimeout)
        return Status::Timeout("no answer from coordinator " + opts_.coordinator + " within " +
                               std::to_string(opts_.connect_timeout.count()) + " ms");
      return Status(s.code(), "registration refused: " + s.message());
    }
    if (opts_.role == ClientRole::kWorker) rank_ = reply.h->rank();
    return Status::OK();
  }

  Status RefreshCluster(Millis timeout) {
    flatbuffers::FlatBufferBuilder fbb;
    wire::Fields f;
    f.type = wire::MsgType::GetCluster;
    CoordReply reply;
    Status s = CoordinatorCall(fbb, f, wire::Body::NONE, {}, timeout, &reply);
    if (!s.ok()) {
      if (s.code() == Code::kTimeout)
        return Status::Timeout("the cluster did not become ready (every server registered and holding the map) within " +
                               std::to_string(timeout.count()) + " ms");
      return s;
    }
    ClusterView v;
    s = wire::DecodeCluster(reply.h->body_as_ClusterInfo(), &v);
    if (!s.ok()) return s;
    bool connect = false;
    {
      std::lock_guard<std::mutex> lock(vmu_);
      connect = !view_.complete() || view_.servers != v.servers;
      view_ = std::move(v);
      map_ = std::make_shared<const ShardMap>(view_.map);
    }
    if (connect) {
      Outgoing o;
      o.kind = Outgoing::kConnect;
      {
        std::lock_guard<std::mutex> lock(vmu_);
        o.endpoints = view_.servers;
      }
      {
        std::lock_guard<std::mutex> lock(qmu_);
        seq_.resize(o.endpoints.size(), 0);
      }
      Enqueue(std::move(o));
    }
    return Status::OK();
  }

  Status GetTable(std::string_view name, Table* out) {
    for (int attempt = 0; attempt < 2; ++attempt) {
      {
        std::lock_guard<std::mutex> lock(vmu_);
        for (const auto& t : view_.tables)
          if (t.name == name) {
            out->id = t.id;
            out->spec = t;
            return Status::OK();
          }
      }
      if (attempt == 0) {
        Status s = RefreshCluster(opts_.request_timeout);
        if (!s.ok()) return s;
      }
    }
    std::string known;
    {
      std::lock_guard<std::mutex> lock(vmu_);
      for (const auto& t : view_.tables) known += (known.empty() ? "'" : ", '") + t.name + "'";
    }
    return Status::UnknownTable("table '" + std::string(name) + "' is not defined (known: " +
                                (known.empty() ? "none" : known) + ")");
  }

  Status CreateTable(const TableSpec& spec, Table* out) {
    Status s = spec.Validate();
    if (!s.ok()) return s;
    flatbuffers::FlatBufferBuilder fbb;
    auto body = wire::BuildTableSpec(fbb, spec);
    wire::Fields f;
    f.type = wire::MsgType::CreateTable;
    CoordReply reply;
    s = CoordinatorCall(fbb, f, wire::Body::TableSpec, body.Union(), opts_.request_timeout, &reply);
    if (!s.ok()) return s;
    TableSpec t;
    s = wire::DecodeTableSpec(reply.h->body_as_TableSpec(), &t);
    if (!s.ok()) return s;
    {
      std::lock_guard<std::mutex> lock(vmu_);
      if (view_.tables.size() <= t.id) view_.tables.resize(t.id + 1);
      view_.tables[t.id] = t;
    }
    out->id = t.id;
    out->spec = t;
    return Status::OK();
  }

  // Checks that `t` is a table of this job; copies the shard map out.
  // (The map is shared, not copied: it can hold a million partitions.)
  Status Resolve(const Table& t, std::shared_ptr<const ShardMap>* map, uint32_t* servers = nullptr) {
    std::lock_guard<std::mutex> lock(vmu_);
    if (t.id >= view_.tables.size() || view_.tables[t.id].name != t.spec.name)
      return Status::UnknownTable("table '" + t.spec.name + "' (id " + std::to_string(t.id) +
                                  ") is not a table of this job");
    *map = map_;
    if (servers) *servers = view_.num_servers;
    return Status::OK();
  }

  // A pull's call records the versions each server read, for stamps.
  std::shared_ptr<Call> NewDataCall(bool push, const Table& t, uint32_t servers) {
    auto call = std::make_shared<Call>();
    call->op = push ? "push" : "pull";
    call->default_timeout = opts_.request_timeout;
    if (!push) {
      call->versions.assign(servers, kNoVersion);
      call->table = t.id;
      call->issued = pulls_issued_.fetch_add(1, std::memory_order_relaxed) + 1;
      call->book = book_;
    }
    return call;
  }

  // The versions each step's gradient was computed on: its stamp, or (none
  // given) the latest pull of the table a caller waited on.
  std::vector<std::shared_ptr<const std::vector<uint64_t>>> StepBases(const Table& t, const PushStep* steps,
                                                                      uint32_t nsteps) {
    std::vector<std::shared_ptr<const std::vector<uint64_t>>> out(std::max<uint32_t>(1, nsteps));
    if (opts_.role != ClientRole::kWorker) return out;  // only workers' staleness is weighed
    if (!steps) {
      out[0] = book_->Get(t.id);
      return out;
    }
    for (uint32_t j = 0; j < nsteps; ++j)
      if (steps[j].based_on.table_ == t.id) out[j] = steps[j].based_on.versions_;
    return out;
  }
  // Server `sv`'s base version per step, or empty when one is unknown.
  static std::vector<uint64_t> BasesFor(const std::vector<std::shared_ptr<const std::vector<uint64_t>>>& bases,
                                        uint32_t sv) {
    std::vector<uint64_t> out;
    for (const auto& b : bases) {
      if (!b || sv >= b->size() || (*b)[sv] == kNoVersion) return {};
      out.push_back((*b)[sv]);
    }
    return out;
  }

  shardps::Request RangeRequest(bool push, const Table& t, RowRange r, float* data, uint64_t floats,
                               int64_t clock_ahead = 0, std::shared_ptr<PulledFrames> view = nullptr,
                               const PushStep* steps = nullptr, uint32_t nsteps = 0) {
    std::shared_ptr<const ShardMap> map_ref;
    uint32_t servers = 0;
    Status s = Resolve(t, &map_ref, &servers);
    if (!s.ok()) return shardps::Request(FailedCall(s));
    const ShardMap& map = *map_ref;
    if (t.spec.kind != TableKind::kDense)
      return shardps::Request(FailedCall(Status::InvalidArgument(
          "table '" + t.spec.name + "' is sparse: address it by ids, not a row range")));
    if (r.begin >= r.end || r.end > t.spec.rows)
      return shardps::Request(FailedCall(Status::OutOfRange(
          "rows [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ") of table '" +
          t.spec.name + "' with " + std::to_string(t.spec.rows) + " rows")));
    const uint64_t cols = t.spec.cols;
    if (floats != (r.end - r.begin) * cols)
      return shardps::Request(FailedCall(Status::SizeMismatch(
          std::string(push ? "gradient" : "output") + " array has " + std::to_string(floats) +
          " floats, rows [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ") x " +
          std::to_string(cols) + " cols need " + std::to_string((r.end - r.begin) * cols))));
    // Split by partition, merging neighbours on the same server up to
    // max_message_bytes, so a server applies one chunk while the next is
    // still on the wire (and each chunk is still in cache when applied).
    struct Seg {
      uint32_t server;
      uint64_t begin, end;
    };
    std::vector<Seg> segs;
    const uint32_t P = map.partitions();
    for (uint64_t row = r.begin; row < r.end;) {
      uint32_t p = PartitionOfRow(row, t.spec.rows, P);
      uint64_t stop = std::min(r.end, PartitionRowBegin(p + 1, t.spec.rows, P));
      if (!segs.empty() && segs.back().server == map.owner[p] && segs.back().end == row && (stop - segs.back().begin) * cols * 4 <= opts_.max_message_bytes)
        segs.back().end = stop;
      else
        segs.push_back({map.owner[p], row, stop});
      row = stop;
    }
    auto call = NewDataCall(push, t, servers);
    call->parts_left = static_cast<int>(segs.size());
    const auto bases = push ? StepBases(t, steps, nsteps) : decltype(StepBases(t, steps, nsteps)){};
    // One read for every part (another thread may tick meanwhile).
    const int64_t now = clock_.load(std::memory_order_relaxed);
    const int64_t clock = clock_ahead == kPreviousClock ? std::max<int64_t>(0, now - 1) : now + clock_ahead;
    thread_local flatbuffers::FlatBufferBuilder fbb;
    for (const auto& sg : segs) {
      Outgoing o;
      o.target = static_cast<int>(sg.server);
      o.call = call;
      o.timeout = opts_.request_timeout;
      float* seg_data = data + (sg.begin - r.begin) * cols;
      const uint64_t seg_floats = (sg.end - sg.begin) * cols;
      wire::Fields f;
      f.type = push ? wire::MsgType::Push : wire::MsgType::Pull;
      f.role = role_wire();
      f.rank = rank_;
      f.table = t.id;
      f.clock = clock;
      f.row_begin = sg.begin;
      f.row_end = sg.end;
      std::vector<uint64_t> seg_bases;
      if (push) {
        seg_bases = BasesFor(bases, sg.server);
        f.base_versions = seg_bases;
      }
      if (push && steps) {
        // One frame per step: each step's rows of this segment.
        f.steps = nsteps;
        std::vector<zmq::message_t> extra;
        for (uint32_t j = 0; j < nsteps; ++j)
          extra.push_back(Borrow(steps[j].grads.data() + (sg.begin - r.begin) * cols, seg_floats * 4, call));
        EnqueueFrames(std::move(o), f, std::move(extra), true, fbb);
        continue;
      }
      if (!push) {
        o.dest.out = seg_data;
        o.dest.floats = seg_floats;
        o.dest.clocks = true;
        if (view) {
          o.dest.out = nullptr;
          o.dest.view = view;
          o.dest.view_offset = (sg.begin - r.begin) * cols;
        }
      }
      EnqueueData(std::move(o), f, push ? seg_data : nullptr, seg_floats * 4, nullptr, 0, fbb);
    }
    return shardps::Request(call);
  }

  shardps::Request PushSteps(const Table& t, RowRange rows, std::span<const PushStep> steps) {
    if (steps.empty() || steps.size() > kMaxPushSteps)
      return shardps::Request(FailedCall(Status::InvalidArgument(
          "PushSteps takes 1 to " + std::to_string(kMaxPushSteps) + " steps, got " + std::to_string(steps.size()))));
    for (size_t j = 1; j < steps.size(); ++j)
      if (steps[j].grads.size() != steps[0].grads.size())
        return shardps::Request(FailedCall(Status::SizeMismatch(
            "step " + std::to_string(j) + " has " + std::to_string(steps[j].grads.size()) + " floats, step 0 " +
            std::to_string(steps[0].grads.size()))));
    return RangeRequest(true, t, rows, const_cast<float*>(steps[0].grads.data()), steps[0].grads.size(), 0, nullptr,
                        steps.data(), static_cast<uint32_t>(steps.size()));
  }

  shardps::Request KeysRequest(bool push, const Table& t, std::span<const uint64_t> keys, float* data,
                               uint64_t floats) {
    std::shared_ptr<const ShardMap> map_ref;
    uint32_t servers = 0;
    Status s = Resolve(t, &map_ref, &servers);
    if (!s.ok()) return shardps::Request(FailedCall(s));
    const ShardMap& map = *map_ref;
    const uint64_t cols = t.spec.cols, n = keys.size();
    if (floats != n * cols)
      return shardps::Request(FailedCall(Status::SizeMismatch(
          std::string(push ? "gradient" : "output") + " array has " + std::to_string(floats) +
          " floats, " + std::to_string(n) + " keys x " + std::to_string(cols) + " cols need " +
          std::to_string(n * cols))));
    auto call = NewDataCall(push, t, servers);
    if (n == 0) return shardps::Request(call);
    const auto bases = push ? StepBases(t, nullptr, 0) : decltype(StepBases(t, nullptr, 0)){};
    const uint32_t P = map.partitions();
    const bool dense = t.spec.kind == TableKind::kDense;
    std::vector<uint32_t> server(n);
    for (uint64_t i = 0; i < n; ++i) {
      if (dense && keys[i] >= t.spec.rows)
        return shardps::Request(FailedCall(Status::OutOfRange(
            "row id " + std::to_string(keys[i]) + " (key " + std::to_string(i) + ") is outside table '" +
            t.spec.name + "' with " + std::to_string(t.spec.rows) + " rows")));
      server[i] = map.owner[dense ? PartitionOfRow(keys[i], t.spec.rows, P) : PartitionOfId(keys[i], P)];
    }
    thread_local flatbuffers::FlatBufferBuilder fbb;
    std::vector<uint64_t> seg_bases;
    auto make_fields = [&](uint64_t count, uint32_t sv) {
      wire::Fields f;
      if (push) {
        seg_bases = BasesFor(bases, sv);
        f.base_versions = seg_bases;
      }
      f.type = push ? wire::MsgType::Push : wire::MsgType::Pull;
      f.role = role_wire();
      f.rank = rank_;
      f.table = t.id;
      f.clock = clock_.load(std::memory_order_relaxed);
      f.key_count = count;
      return f;
    };
    if (std::all_of(server.begin(), server.end(), [&](uint32_t x) { return x == server[0]; })) {
      call->parts_left = 1;
      Outgoing o;
      o.target = static_cast<int>(server[0]);
      o.call = call;
      o.timeout = opts_.request_timeout;
      if (!push) {
        o.dest.out = data;
        o.dest.floats = floats;
        o.dest.clocks = true;
      }
      EnqueueData(std::move(o), make_fields(n, server[0]), push ? data : nullptr, floats * 4, keys.data(), n * 8, fbb);
      return shardps::Request(call);
    }
    // Group by server: gather keys (and gradients) into per-server frames.
    std::vector<std::vector<uint32_t>> pos(*std::max_element(server.begin(), server.end()) + 1);
    for (uint64_t i = 0; i < n; ++i) pos[server[i]].push_back(static_cast<uint32_t>(i));
    int parts = 0;
    for (const auto& p : pos) parts += !p.empty();
    call->parts_left = parts;
    for (uint32_t sv = 0; sv < pos.size(); ++sv) {
      if (pos[sv].empty()) continue;
      const uint64_t m = pos[sv].size();
      zmq::message_t kf(m * 8);
      auto* kp = static_cast<uint64_t*>(kf.data());
      for (uint64_t i = 0; i < m; ++i) kp[i] = keys[pos[sv][i]];
      Outgoing o;
      o.target = static_cast<int>(sv);
      o.call = call;
      o.timeout = opts_.request_timeout;
      std::vector<zmq::message_t> extra;
      extra.push_back(std::move(kf));
      if (push) {
        zmq::message_t vf(m * cols * 4);
        auto* vp = static_cast<float*>(vf.data());
        for (uint64_t i = 0; i < m; ++i)
          std::memcpy(vp + i * cols, data + pos[sv][i] * cols, cols * 4);
        extra.push_back(std::move(vf));
      } else {
        o.dest.out = data;
        o.dest.positions = std::move(pos[sv]);
        o.dest.cols = static_cast<uint32_t>(cols);
        o.dest.clocks = true;
      }
      EnqueueFrames(std::move(o), make_fields(m, sv), std::move(extra), push, fbb);
    }
    return shardps::Request(call);
  }

  // Builds the header (with this worker's next push sequence number for the
  // server, assigned in send order) and queues the request.
  void EnqueueData(Outgoing&& o, wire::Fields f, const float* values, uint64_t value_bytes,
                   const uint64_t* keys, uint64_t key_bytes, flatbuffers::FlatBufferBuilder& fbb) {
    std::vector<zmq::message_t> extra;
    if (keys) extra.push_back(Borrow(keys, key_bytes, o.call));
    if (values) extra.push_back(Borrow(values, value_bytes, o.call));
    EnqueueFrames(std::move(o), f, std::move(extra), values != nullptr, fbb);
  }

  void EnqueueFrames(Outgoing&& o, wire::Fields f, std::vector<zmq::message_t> extra, bool push,
                     flatbuffers::FlatBufferBuilder& fbb) {
    o.request_id = f.request_id = next_id_.fetch_add(1, std::memory_order_relaxed);
    Enqueue(std::move(o), [&](Outgoing& q) {
      if (push && opts_.role == ClientRole::kWorker && q.target < static_cast<int>(seq_.size()))
        f.seq = ++seq_[q.target];
      q.frames.push_back(wire::EncodeSimple(fbb, f));
      for (auto& m : extra) q.frames.push_back(std::move(m));
    });
  }

  // A header-only message of this worker to every server, one call; `f`
  // gives the type and the fields of its own. `clocks`: the replies'
  // min_clock/max_clock are gathered (Join).
  std::shared_ptr<Call> ToEveryServer(wire::Fields f, const char* op, bool clocks) {
    uint32_t servers;
    {
      std::lock_guard<std::mutex> lock(vmu_);
      servers = view_.num_servers;
    }
    auto call = std::make_shared<Call>();
    call->parts_left = static_cast<int>(servers);
    call->op = op;
    call->default_timeout = opts_.request_timeout;
    f.role = role_wire();
    f.rank = rank_;
    thread_local flatbuffers::FlatBufferBuilder fbb;
    for (uint32_t sv = 0; sv < servers; ++sv) {
      Outgoing o;
      o.target = static_cast<int>(sv);
      o.call = call;
      o.timeout = opts_.request_timeout;
      o.dest.clocks = clocks;
      EnqueueFrames(std::move(o), f, {}, false, fbb);
    }
    return call;
  }

  shardps::Request ClockAsync(bool trained) {
    if (opts_.role != ClientRole::kWorker)
      return shardps::Request(FailedCall(Status::InvalidArgument("Clock() is for workers only")));
    wire::Fields f;
    f.type = wire::MsgType::Tick;
    f.clock = clock_.fetch_add(1);
    f.idle = !trained;
    return shardps::Request(ToEveryServer(f, "clock tick", false));
  }

  Status Barrier(Millis timeout) {
    if (opts_.role != ClientRole::kWorker) return Status::InvalidArgument("Barrier() is for workers only");
    flatbuffers::FlatBufferBuilder fbb;
    auto body = wire::CreateBarrierRequest(fbb, barrier_gen_++);
    wire::Fields f;
    f.type = wire::MsgType::Barrier;
    CoordReply reply;
    Status s = CoordinatorCall(fbb, f, wire::Body::BarrierRequest, body.Union(), timeout, &reply);
    if (s.code() == Code::kTimeout)
      return Status::Timeout("barrier: not every live worker arrived within " +
                             std::to_string(timeout.count()) + " ms");
    return s;
  }

  Status ClaimWork(uint64_t pool, uint64_t total, uint32_t max, const ClaimOptions& o, WorkRange* out) {
    *out = WorkRange{};
    if (total == 0 || max == 0 || o.granule == 0)
      return Status::InvalidArgument("ClaimWork: total_units, max_units and granule must be > 0");
    if (o.per_clock && opts_.role != ClientRole::kWorker)
      return Status::InvalidArgument("ClaimWork: per-clock claims are for workers");
    flatbuffers::FlatBufferBuilder fbb;
    auto body = wire::CreateWorkClaim(fbb, pool, total, max, o.granule, o.per_clock);
    wire::Fields f;
    f.type = wire::MsgType::ClaimWork;
    f.clock = clock_.load();
    f.seq = claim_seq_.fetch_add(1) + 1;
    CoordReply reply;
    Status s = CoordinatorCall(fbb, f, wire::Body::WorkClaim, body.Union(), opts_.request_timeout, &reply);
    if (!s.ok()) return Status(s.code(), "claiming work from pool " + std::to_string(pool) + ": " + s.message());
    const wire::WorkGrant* g = reply.h->body_as_WorkGrant();
    if (!g) return Status::BadMessage("ClaimWork: the coordinator's answer has no WorkGrant");
    // A dead worker's units may be of an earlier pool (per-clock), of the
    // same size then.
    if (g->end() < g->begin() || (g->pool() == pool && g->end() > total) || g->pool() > pool ||
        g->end() - g->begin() > max)
      return Status::Internal("ClaimWork: the coordinator granted [" + std::to_string(g->begin()) + ", " +
                              std::to_string(g->end()) + ") of pool " + std::to_string(g->pool()) +
                              " for a claim of at most " + std::to_string(max) + " units of pool " +
                              std::to_string(pool) + " (" + std::to_string(total) + " units)");
    out->begin = g->begin();
    out->end = g->end();
    out->pool = g->pool();
    out->wait = g->state() == wire::GrantState::WaitNextClock;
    out->handed = g->handed();
    return Status::OK();
  }

  // A worker (re)joining a running job starts at the clock the servers give
  // it (the fastest live worker's; a first start: 0). A server that gave
  // less is moved up to the largest answer; one that does not know yet
  // that this rank is live (the coordinator's update is on its way) is
  // asked again until connect_timeout.
  Status JoinServers() {
    const auto deadline = Clock::now() + opts_.connect_timeout;
    int64_t want = -1;
    for (int round = 0, retries = 0;;) {
      wire::Fields f;
      f.type = wire::MsgType::Join;
      f.clock = want;
      auto call = ToEveryServer(f, "join", true);
      Status s = shardps::Request(call).Wait();
      if (s.code() == Code::kUnavailable && Clock::now() < deadline && ++retries < 1000) {
        std::this_thread::sleep_for(Millis(10));
        continue;
      }
      if (!s.ok()) return Status(s.code(), "joining the servers: " + s.message());
      int64_t lo, hi;
      {
        std::lock_guard<std::mutex> lock(call->mu);
        lo = call->min_clock;
        hi = call->max_clock;
      }
      if (lo == hi || ++round > 8) {
        if (lo != hi)
          return Status::Internal("joining the servers: they still disagree on this worker's clock (" +
                                  std::to_string(lo) + " vs " + std::to_string(hi) + ")");
        clock_.store(hi);
        return Status::OK();
      }
      want = hi;
    }
  }

  Status Close() {
    if (closed_.exchange(true)) return Status::OK();
    Status s;
    if (opts_.role == ClientRole::kWorker && rank_ >= 0) {
      flatbuffers::FlatBufferBuilder fbb;
      wire::Fields f;
      f.type = wire::MsgType::Leave;
      CoordReply reply;
      s = CoordinatorCall(fbb, f, wire::Body::NONE, {}, std::min(opts_.request_timeout, Millis(10000)), &reply);
      if (!s.ok()) s = Status(s.code(), "leaving the job: " + s.message());
    }
    Stop();
    return s;
  }

  // ---- I/O thread ----

  // With a key, every socket is a CURVE client. Every socket is watched by a
  // monitor for a failed handshake: a refused key (or a missing one) fails
  // the requests to that peer at once with the reason (PermissionDenied)
  // instead of letting them time out.
  struct Monitor {
    zmq::socket_t pair;
    int target;
    int drops = 0;      // handshakes dropped in a row
    int connected = 0;  // handshakes that succeeded
  };
  void Secure(zmq::socket_t& s, int target) {
    if (key_) MakeCurveClient(s, *key_);
    const std::string ep = "inproc://shardps-client-monitor-" + std::to_string(reinterpret_cast<uintptr_t>(this)) +
                           "-" + std::to_string(monitor_seq_++);
    monitors_.push_back({WatchHandshakes(ctx_, s, ep), target, 0, 0});
  }
  void OnMonitor(Monitor& m) {
    std::string why;
    for (Handshake h; (h = ReadHandshakeEvent(m.pair, key_ ? &*key_ : nullptr, &why)) != Handshake::kNone;) {
      if (h == Handshake::kSucceeded) {
        m.drops = 0;
        refused_.erase(m.target);
        if (m.target < 0 && m.connected++ > 0) coord_reconnects_.fetch_add(1);
        continue;
      }
      if (h == Handshake::kDropped) {
        if (++m.drops < kDropsToRefuse) continue;
        why = DroppedHandshakesWhy(key_ ? &*key_ : nullptr);
      }
      const std::string msg = PeerName(m.target) + ": " + why;
      if (refused_.emplace(m.target, msg).second) LOG_WARN << msg;
      for (auto it = pending_.begin(); it != pending_.end();) {
        if (it->second.target != m.target) {
          ++it;
          continue;
        }
        it->second.call->PartDone(Status::PermissionDenied(msg), false, 0, 0);
        it = pending_.erase(it);
      }
    }
  }

  struct Pending {
    std::shared_ptr<Call> call;
    Dest dest;
    int target;
    Clock::time_point deadline;
  };

  void IoLoop() {
    SetThreadLogName("client");
    std::vector<zmq::message_t> frames;
    std::deque<Outgoing> batch;
    auto next_hb = Clock::now();
    auto next_expiry = Clock::now();
    bool stop = false;
    while (!stop) {
      std::vector<zmq::pollitem_t> items;
      items.push_back({nullptr, efd_, ZMQ_POLLIN, 0});
      items.push_back({coord_.handle(), 0, ZMQ_POLLIN, 0});
      for (auto& s : servers_) items.push_back({s.handle(), 0, ZMQ_POLLIN, 0});
      for (auto& m : monitors_) items.push_back({m.pair.handle(), 0, ZMQ_POLLIN, 0});
      Poll(items.data(), items.size(), Millis(50));
      for (auto& m : monitors_) OnMonitor(m);
      if (items[0].revents & ZMQ_POLLIN) {
        uint64_t v;
        ssize_t n = ::read(efd_, &v, sizeof v);
        (void)n;
      }
      {
        std::lock_guard<std::mutex> lock(qmu_);
        batch.swap(queue_);
      }
      for (auto& o : batch) {
        if (o.kind == Outgoing::kStop) {
          stop = true;
        } else if (o.kind == Outgoing::kConnect) {
          Connect(o.endpoints);
        } else {
          Send(o);
        }
      }
      batch.clear();
      while (RecvMultipart(coord_, &frames)) OnReply(frames, -1);
      for (size_t i = 0; i < servers_.size(); ++i)
        for (int k = 0; k < 1024 && RecvMultipart(servers_[i], &frames); ++k) OnReply(frames, static_cast<int>(i));
      const auto now = Clock::now();
      if (now >= next_hb && (opts_.role == ClientRole::kWorker)) {
        next_hb = now + opts_.heartbeat_interval;
        if (rank_ >= 0) {
          wire::Fields f;
          f.type = wire::MsgType::Heartbeat;
          f.request_id = next_id_.fetch_add(1);
          f.role = role_wire();
          f.rank = rank_;
          f.clock = clock_.load(std::memory_order_relaxed);
          coord_.send(wire::EncodeSimple(io_fbb_, f), zmq::send_flags::dontwait);
        }
      }
      if (now >= next_expiry) {
        next_expiry = now + Millis(100);
        for (auto it = pending_.begin(); it != pending_.end();) {
          if (now < it->second.deadline) {
            ++it;
            continue;
          }
          it->second.call->PartDone(Status::Timeout(std::string(it->second.call->op) + " to " + PeerName(it->second.target) +
                                                    " got no answer in time (request " + std::to_string(it->first) + ")"),
                                    false, 0, 0);
          it = pending_.erase(it);
        }
      }
    }
    for (auto& [id, p] : pending_) p.call->PartDone(Status::Unavailable("client is closed"), false, 0, 0);
    pending_.clear();
    servers_.clear();
    coord_.close();
    monitors_.clear();
  }

  std::string PeerName(int target) const {
    if (target < 0) return "coordinator " + opts_.coordinator;
    return "server " + std::to_string(target) +
           (static_cast<size_t>(target) < endpoints_.size() ? " (" + endpoints_[target] + ")" : "");
  }

  void Connect(const std::vector<std::string>& endpoints) {
    // A new server list (first time, or a server moved): reconnect all.
    servers_.clear();
    std::erase_if(monitors_, [](const Monitor& m) { return m.target >= 0; });
    std::erase_if(refused_, [](const auto& r) { return r.first >= 0; });
    endpoints_ = endpoints;
    for (const auto& ep : endpoints) {
      zmq::socket_t s(ctx_, zmq::socket_type::dealer);
      s.set(zmq::sockopt::linger, 0);
      s.set(zmq::sockopt::sndhwm, 0);
      s.set(zmq::sockopt::rcvhwm, 0);
      Secure(s, static_cast<int>(servers_.size()));
      if (!ep.empty()) s.connect(ep);
      servers_.push_back(std::move(s));
    }
  }

  void Send(Outgoing& o) {
    zmq::socket_t* s = nullptr;
    if (o.target < 0)
      s = &coord_;
    else if (static_cast<size_t>(o.target) < servers_.size())
      s = &servers_[o.target];
    if (!s) {
      o.call->PartDone(Status::Unavailable("not connected to server " + std::to_string(o.target)), false, 0, 0);
      return;
    }
    if (auto r = refused_.find(o.target); r != refused_.end()) {
      o.call->PartDone(Status::PermissionDenied(r->second), false, 0, 0);
      return;
    }
    pending_[o.request_id] = {o.call, std::move(o.dest), o.target, Clock::now() + o.timeout};
    Status st = SendMultipart(*s, o.frames);
    if (!st.ok()) {
      // A handshake that failed with a protocol error (a refused key, no key
      // at a job with security on) takes the socket's pipe away, so the send
      // would block; the monitor has the reason already, and it fails this
      // request (and the target's others) with it.
      for (auto& m : monitors_)
        if (m.target == o.target) OnMonitor(m);
      auto it = pending_.find(o.request_id);
      if (it == pending_.end()) return;
      // Without a send limit (sndhwm 0), a socket that takes nothing has no
      // connection left to queue on.
      const std::string why = (s->get(zmq::sockopt::events) & ZMQ_POLLOUT) == 0
                                  ? "no connection to send on (its handshake failed)"
                                  : st.message();
      it->second.call->PartDone(Status::Unavailable(PeerName(o.target) + ": " + why), false, 0, 0);
      pending_.erase(it);
    }
  }

  void OnReply(std::vector<zmq::message_t>& frames, int from) {
    const wire::Header* h = nullptr;
    Status s = wire::ParseHeader(frames[0], io_scratch_, &h);
    if (!s.ok()) {
      LOG_ERROR << "bad reply from " << PeerName(from) << ": " << s.ToString();
      return;
    }
    if (from < 0 && h->stopping()) stop_requested_.store(true, std::memory_order_relaxed);
    auto it = pending_.find(h->request_id());
    if (it == pending_.end()) {
      Status rs = wire::ReplyStatus(h);
      if (!rs.ok()) LOG_WARN << PeerName(from) << ": " << rs.ToString();
      return;
    }
    Pending p = std::move(it->second);
    pending_.erase(it);
    s = wire::ReplyStatus(h);
    if (s.ok() && (p.dest.out != nullptr || p.dest.view)) {
      const uint64_t want = p.dest.positions.empty()
                                ? p.dest.floats * 4
                                : static_cast<uint64_t>(p.dest.positions.size()) * p.dest.cols * 4;
      uint64_t got = 0;
      for (size_t i = 1; i < frames.size(); ++i) got += frames[i].size();
      if (frames.size() < 2 || got != want || (!p.dest.positions.empty() && frames.size() != 2)) {
        s = Status::BadMessage(PeerName(from) + " answered a pull with " + std::to_string(got) +
                               " bytes of values in " + std::to_string(frames.size() - 1) + " frames, expected " +
                               std::to_string(want));
      } else if (p.dest.view) {
        // PullView: keep the frames, no copy.
        auto& kept = p.dest.view->parts[p.dest.view_offset];
        for (size_t i = 1; i < frames.size(); ++i) kept.push_back(std::move(frames[i]));
      } else if (p.dest.positions.empty()) {
        // A row range may come as one frame per run of partitions, in order.
        auto* dst = reinterpret_cast<uint8_t*>(p.dest.out);
        for (size_t i = 1; i < frames.size(); ++i) {
          std::memcpy(dst, frames[i].data(), frames[i].size());
          dst += frames[i].size();
        }
      } else {
        const auto* src = static_cast<const uint8_t*>(frames[1].data());
        const size_t row = p.dest.cols * 4;
        for (size_t i = 0; i < p.dest.positions.size(); ++i)
          std::memcpy(p.dest.out + static_cast<size_t>(p.dest.positions[i]) * p.dest.cols, src + i * row, row);
      }
    }
    if (p.dest.keep_reply) p.call->reply = std::move(frames[0]);
    p.call->PartDone(s, p.dest.clocks && s.ok(), h->min_clock(), h->max_clock(), from,
                     p.dest.clocks ? h->table_version() : h->staleness());
  }

  ClientOptions opts_;
  zmq::context_t ctx_;
  int efd_ = -1;
  std::thread io_;
  std::atomic<uint64_t> next_id_{1};
  std::atomic<bool> closed_{false};
  std::atomic<int64_t> clock_{0};
  std::atomic<uint64_t> coord_reconnects_{0};  // the coordinator connection came back (a restart)
  std::atomic<uint64_t> claim_seq_{0};         // pooled claims, numbered: one sent again gets the same grant
  std::atomic<bool> stop_requested_{false};  // a heartbeat reply said the job is stopping
  std::atomic<int> rank_{-1};  // set by Register, read by the I/O thread's heartbeats
  uint64_t barrier_gen_ = 0;

  std::shared_ptr<StampBook> book_ = std::make_shared<StampBook>();
  std::atomic<uint64_t> pulls_issued_{0};

  std::mutex qmu_;  // guards queue_, stopping_, seq_
  std::deque<Outgoing> queue_;
  bool stopping_ = false;
  std::vector<uint64_t> seq_;

  mutable std::mutex vmu_;  // guards view_, map_
  ClusterView view_;
  std::shared_ptr<const ShardMap> map_ = std::make_shared<const ShardMap>();

  // I/O thread only.
  std::optional<KeyFile> key_;
  zmq::socket_t coord_;
  std::vector<zmq::socket_t> servers_;
  std::vector<Monitor> monitors_;  // I/O thread (created by Start before it runs)
  std::map<int, std::string> refused_;  // target -> why its handshake failed, until one succeeds
  uint64_t monitor_seq_ = 0;
  std::vector<std::string> endpoints_;
  std::unordered_map<uint64_t, Pending> pending_;
  flatbuffers::FlatBufferBuilder io_fbb_;
  std::vector<uint64_t> io_scratch_;

  friend class shardps::Client;
};

}  // namespace detail

// ---- Request ----

Status Request::Wait(std::chrono::milliseconds timeout) {
  if (!call_) return Status::OK();  // a default-constructed Request: nothing to wait for
  std::unique_lock<std::mutex> lock(call_->mu);
  if (!call_->cv.wait_for(lock, timeout, [&] { return call_->DoneLocked(); }))
    return Status::Timeout(std::string(call_->op) + " not answered within " + std::to_string(timeout.count()) +
                           " ms (" + std::to_string(call_->parts_left) + " server replies outstanding)");
  if (call_->status.ok() && !call_->stamp && !call_->versions.empty()) {
    // The caller now reads these values: later pushes of the table are
    // computed on them (unless a later-issued pull was waited on already).
    call_->stamp = std::make_shared<const std::vector<uint64_t>>(call_->versions);
    if (auto book = call_->book.lock()) book->Offer(call_->table, call_->issued, call_->stamp);
  }
  return call_->status;
}

uint64_t Request::staleness() const {
  if (!call_) return 0;
  std::lock_guard<std::mutex> lock(call_->mu);
  return call_->staleness;
}

int64_t PullStamp::UpdatesSince(const PullStamp& earlier) const {
  if (!versions_ || !earlier.versions_ || table_ != earlier.table_ ||
      versions_->size() != earlier.versions_->size())
    return -1;
  constexpr int kCountBits = wire::kVersionCountBits;  // below the server's incarnation tag
  constexpr uint64_t kCount = (1ull << kCountBits) - 1;
  int64_t most = -1;
  for (size_t i = 0; i < versions_->size(); ++i) {
    const uint64_t now = (*versions_)[i], then = (*earlier.versions_)[i];
    if (now == detail::kNoVersion && then == detail::kNoVersion) continue;  // a server neither read
    if (now == detail::kNoVersion || then == detail::kNoVersion || now >> kCountBits != then >> kCountBits) return -1;
    if ((now & kCount) < (then & kCount)) return -1;  // `earlier` is the later one
    most = std::max(most, static_cast<int64_t>((now & kCount) - (then & kCount)));
  }
  return most;
}

PullStamp Request::stamp() const {
  PullStamp s;
  if (!call_) return s;
  std::lock_guard<std::mutex> lock(call_->mu);
  if (!call_->stamp) return s;  // not a pull, or no Wait() returned OK yet
  s.table_ = call_->table;
  s.versions_ = call_->stamp;
  return s;
}

Status Request::Wait() {
  if (!call_) return Status::OK();
  return Wait(call_->default_timeout.count() > 0 ? call_->default_timeout : std::chrono::milliseconds(120000));
}

bool Request::Done() const {
  if (!call_) return true;
  std::lock_guard<std::mutex> lock(call_->mu);
  return call_->DoneLocked();
}

int64_t Request::min_clock() const {
  if (!call_) return 0;
  std::lock_guard<std::mutex> lock(call_->mu);
  return call_->min_clock;
}

int64_t Request::max_clock() const {
  if (!call_) return 0;
  std::lock_guard<std::mutex> lock(call_->mu);
  return call_->max_clock;
}

// ---- Client ----

Client::Client(std::unique_ptr<detail::ClientImpl> impl) : impl_(std::move(impl)) {}
Client::~Client() { (void)Close(); }

Status Client::Connect(const ClientOptions& options, std::unique_ptr<Client>* out) {
  if (options.coordinator.empty()) return Status::InvalidArgument("ClientOptions.coordinator is empty");
  if (options.connect_timeout.count() <= 0 || options.request_timeout.count() <= 0)
    return Status::InvalidArgument("timeouts must be > 0");
  if (options.max_message_bytes < 4096)
    return Status::InvalidArgument("max_message_bytes must be at least 4096");
  auto impl = std::make_unique<detail::ClientImpl>(options);
  Status s = impl->Start();
  if (!s.ok()) return s;
  s = impl->Register();
  if (!s.ok()) return s;
  s = impl->RefreshCluster(options.connect_timeout);
  if (s.ok() && options.role == ClientRole::kWorker) s = impl->JoinServers();
  if (!s.ok()) {
    (void)impl->Close();
    return s;
  }
  out->reset(new Client(std::move(impl)));
  return Status::OK();
}

Status Client::GetTable(std::string_view name, Table* out) { return impl_->GetTable(name, out); }
Status Client::CreateTable(const TableSpec& spec, Table* out) { return impl_->CreateTable(spec, out); }

Request Client::Push(const Table& t, std::span<const float> grads) {
  return Push(t, RowRange{0, t.spec.rows}, grads);
}
Request Client::Push(const Table& t, RowRange rows, std::span<const float> grads) {
  return impl_->RangeRequest(true, t, rows, const_cast<float*>(grads.data()), grads.size());
}
Request Client::Push(const Table& t, std::span<const uint64_t> keys, std::span<const float> grads) {
  return impl_->KeysRequest(true, t, keys, const_cast<float*>(grads.data()), grads.size());
}
Request Client::PushSteps(const Table& t, std::span<const PushStep> steps) {
  return PushSteps(t, RowRange{0, t.spec.rows}, steps);
}
Request Client::PushSteps(const Table& t, RowRange rows, std::span<const PushStep> steps) {
  return impl_->PushSteps(t, rows, steps);
}
Request Client::Pull(const Table& t, std::span<float> out) { return Pull(t, RowRange{0, t.spec.rows}, out); }
Request Client::Prefetch(const Table& t, std::span<float> out) {
  return impl_->RangeRequest(false, t, RowRange{0, t.spec.rows}, out.data(), out.size(), 1);
}
Request Client::PullCurrent(const Table& t, std::span<float> out) {
  return impl_->RangeRequest(false, t, RowRange{0, t.spec.rows}, out.data(), out.size(), detail::kPreviousClock);
}
Request Client::Pull(const Table& t, RowRange rows, std::span<float> out) {
  return impl_->RangeRequest(false, t, rows, out.data(), out.size());
}
Request Client::PullView(const Table& t, RowRange rows, PulledRows* out) {
  out->frames_ = std::make_shared<detail::PulledFrames>();
  // The size check of RangeRequest: the view will hold exactly the rows.
  const uint64_t floats = rows.end > rows.begin ? (rows.end - rows.begin) * t.spec.cols : 0;
  return impl_->RangeRequest(false, t, rows, nullptr, floats, 0, out->frames_);
}
Request Client::PullView(const Table& t, PulledRows* out) { return PullView(t, RowRange{0, t.spec.rows}, out); }

PulledRows::PulledRows() = default;
PulledRows::~PulledRows() = default;
PulledRows::PulledRows(PulledRows&&) noexcept = default;
PulledRows& PulledRows::operator=(PulledRows&&) noexcept = default;

std::vector<std::span<const float>> PulledRows::pieces() const {
  std::vector<std::span<const float>> out;
  if (!frames_) return out;
  for (const auto& [offset, frames] : frames_->parts)
    for (const auto& f : frames) out.emplace_back(static_cast<const float*>(f.data()), f.size() / sizeof(float));
  return out;
}

uint64_t PulledRows::floats() const {
  uint64_t n = 0;
  for (const auto& p : pieces()) n += p.size();
  return n;
}

Status PulledRows::CopyTo(std::span<float> out) const {
  if (out.size() != floats())
    return Status::SizeMismatch("output array has " + std::to_string(out.size()) + " floats, the pulled rows " +
                                std::to_string(floats()));
  float* dst = out.data();
  for (const auto& p : pieces()) {
    std::memcpy(dst, p.data(), p.size_bytes());
    dst += p.size();
  }
  return Status::OK();
}

Request Client::Pull(const Table& t, std::span<const uint64_t> keys, std::span<float> out) {
  return impl_->KeysRequest(false, t, keys, out.data(), out.size());
}

Status Client::Clock(bool trained) { return impl_->ClockAsync(trained).Wait(); }
Request Client::ClockAsync(bool trained) { return impl_->ClockAsync(trained); }
Status Client::Barrier(std::chrono::milliseconds timeout) { return impl_->Barrier(timeout); }
Status Client::ClaimWork(uint64_t pool, uint64_t total_units, uint32_t max_units, WorkRange* out) {
  return impl_->ClaimWork(pool, total_units, max_units, ClaimOptions{}, out);
}
Status Client::ClaimWork(uint64_t pool, uint64_t total_units, uint32_t max_units, const ClaimOptions& options,
                         WorkRange* out) {
  return impl_->ClaimWork(pool, total_units, max_units, options, out);
}
int Client::rank() const { return impl_->rank_; }
int64_t Client::clock() const { return impl_->clock_.load(); }
bool Client::StopRequested() const { return impl_->stop_requested_.load(std::memory_order_relaxed); }
Consistency Client::consistency() const {
  std::lock_guard<std::mutex> lock(impl_->vmu_);
  return impl_->view_.consistency;
}
uint32_t Client::staleness() const {
  std::lock_guard<std::mutex> lock(impl_->vmu_);
  return impl_->view_.staleness;
}
uint32_t Client::num_servers() const {
  std::lock_guard<std::mutex> lock(impl_->vmu_);
  return impl_->view_.num_servers;
}
uint32_t Client::num_workers() const {
  std::lock_guard<std::mutex> lock(impl_->vmu_);
  return impl_->view_.num_workers;
}
Status Client::Close() { return impl_ ? impl_->Close() : Status::OK(); }

}  // namespace shardps
