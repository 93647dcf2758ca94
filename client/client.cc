// shardps::Client (shardps/client.h) over its parts: the I/O thread
// (io_thread.h), the coordinator channel (coordinator_channel.h), the
// cluster cache (cluster_cache.h), request splitting (request_split.h) and
// the request book (call.h).
#include "shardps/client.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>
#include <vector>

#include "client/call.h"
#include "client/cluster_cache.h"
#include "client/coordinator_channel.h"
#include "client/io_thread.h"
#include "client/request_split.h"
#include "client/row_cache.h"
#include "common/net/net.h"
#include "common/net/security.h"

namespace shardps {
namespace detail {

namespace {

// The client's key: ClientOptions.key_file, else $SHARDPS_KEY, else none.
Status LoadClientKey(const ClientOptions& opts, std::optional<KeyFile>* out) {
  std::string key_path = opts.key_file;
  if (key_path.empty()) {
    const char* env = std::getenv("SHARDPS_KEY");
    if (env && *env) key_path = env;
  }
  if (key_path.empty()) return Status::OK();
  KeyFile k;
  if (Status s = LoadKeyFile(key_path, &k); !s.ok()) return s;
  if (k.role == KeyRole::kServer)
    return Status::InvalidArgument("key file '" + key_path +
                                   "' is the job's server key; a client uses worker.key, observer.key or admin.key");
  *out = std::move(k);
  return Status::OK();
}

}  // namespace

// The state behind one Client: its parts, and the data requests (pushes,
// pulls, ticks) built from them.
//
// Threads: every method may be called by any number of caller threads at
// once, but Start (Connect) and Close. Its own state: the Sender (atomics),
// the stamp book (under StampBook::mu), the pull counter and the closed
// flag (atomic); the parts say what they guard.
class ClientImpl {
 public:
  explicit ClientImpl(const ClientOptions& o)
      : opts_(o),
        self_(o.role),
        io_(opts_, self_),
        channel_(opts_, self_, io_),
        cache_(opts_, channel_, io_),
        rows_(o.row_cache_bytes ? std::make_unique<RowCache>(o.row_cache_bytes) : nullptr) {
    self_.row_cache = rows_.get();  // before the I/O thread starts (Start)
    // A fail-over's new map, from a heartbeat's answer: the callers' splits use it too.
    io_.SetOnCluster([this](ClusterView v) { (void)cache_.Update(std::move(v)); });
  }

  // The friend shardps/client.h names: the public handles' private parts.
  static Request MakeRequest(std::shared_ptr<Call> c) { return Request(std::move(c)); }
  static StampRef StampOf(const PullStamp& s) { return {s.table_, s.versions_}; }

  // Loads the key and starts the I/O thread; then registers, fetches the
  // cluster and (a worker) joins the servers.
  Status Start();
  Status Join();

  // A push or pull of rows `r` (`values`: `floats` floats; a PullView:
  // null, and `view` set), tagged with clock() + clock_ahead (RequestClock).
  Request RangeRequest(bool push, const Table& t, RowRange r, float* values, uint64_t floats,
                       int64_t clock_ahead = 0, std::shared_ptr<PulledFrames> view = nullptr,
                       std::span<const PushStep> steps = {});
  // `clock_ahead` as DataRequest's (a pull only).
  Request KeysRequest(bool push, const Table& t, std::span<const uint64_t> keys, float* values, uint64_t floats,
                      int64_t clock_ahead = 0);
  Request PushSteps(const Table& t, RowRange rows, std::span<const PushStep> steps);
  // Client::Assign: the rows themselves, uncompressed, float32 (a sparse
  // table's own dtype), each key once.
  Request Assign(const Table& t, std::span<const uint64_t> keys, RowRange rows, const float* values,
                 uint64_t floats);
  Request ClockAsync(bool trained);
  Status Close();

  const ClientOptions opts_;
  Sender self_;
  IoThread io_;
  CoordinatorChannel channel_;
  ClusterCache cache_;
  // ClientOptions::row_cache_bytes; null when off. Outlives the I/O thread.
  const std::unique_ptr<RowCache> rows_;

 private:
  // Checks `t`, splits the request (`split(map, &parts)`, request_split.h)
  // and sends each part as one message to its server, all under one Call.
  template <typename Split>
  // `owned`: arrays of the request's own that pl points into, kept with its Call.
  Request DataRequest(const Table& t, const Payload& pl, int64_t clock_ahead, Split split,
                      std::shared_ptr<const void> owned = nullptr);
  // A pull's call records the versions each server read, for stamps.
  std::shared_ptr<Call> NewDataCall(bool push, const Table& t, uint32_t servers);
  // The versions each step's gradient was computed on: its stamp, or (a
  // plain push) the latest pull of the table a caller waited on.
  StepBases BasesOf(const Table& t, std::span<const PushStep> steps);
  // A header-only message of this worker to every server, one call; `f`
  // gives the type and the fields of its own. `clocks`: the replies'
  // min_clock/max_clock are gathered (Join).
  // `after_pushes`: each part leaves only once every push sent before it
  // was answered (a synchronous tick, IoThread's Outgoing::after_pushes).
  std::shared_ptr<Call> ToEveryServer(wire::Fields f, const char* op, bool clocks, bool after_pushes = false);
  Status JoinServers();
  // The row cache when a pull of `t` may use it: a worker's keys pull of a
  // sparse table under bounded staleness (s >= 1) with the cache on.
  RowCache* CacheFor(bool push, const Table& t) const;
  // A keys pull served from the row cache where it can be, the rest asked
  // of the servers (and kept).
  Request CachedPull(const Table& t, const KeyPlan& plan, float* out, RowCache* cache, int64_t clock_ahead);

  // Error feedback (docs/compression.md): per dense table pushed with
  // compression, what its pushes did not send yet, one float per value.
  struct Residual {
    std::mutex mu;  // held while a push encodes against it
    std::vector<float> values;
  };
  Residual* ResidualOf(const Table& t);
  std::mutex residuals_mu_;
  std::unordered_map<uint32_t, std::unique_ptr<Residual>> residuals_;

  const std::shared_ptr<StampBook> book_ = std::make_shared<StampBook>();
  std::atomic<uint64_t> pulls_issued_{0};
  std::atomic<bool> closed_{false};
};

Request MakeRequest(std::shared_ptr<Call> call) { return ClientImpl::MakeRequest(std::move(call)); }
StampRef StampOf(const PullStamp& s) { return ClientImpl::StampOf(s); }

Status ClientImpl::Start() {
  std::optional<KeyFile> key;
  if (Status s = LoadClientKey(opts_, &key); !s.ok()) return s;
  return io_.Start(std::move(key));
}

Status ClientImpl::Join() {
  Status s = channel_.Register();
  if (!s.ok()) return s;
  s = cache_.Refresh(opts_.connect_timeout);
  if (s.ok() && self_.worker()) s = JoinServers();
  if (!s.ok()) (void)Close();
  return s;
}

std::shared_ptr<Call> ClientImpl::NewDataCall(bool push, const Table& t, uint32_t servers) {
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

StepBases ClientImpl::BasesOf(const Table& t, std::span<const PushStep> steps) {
  StepBases out(std::max<size_t>(1, steps.size()));
  if (!self_.worker()) return out;  // only workers' staleness is weighed
  if (steps.empty()) {
    out[0] = book_->Get(t.id);
    return out;
  }
  for (size_t j = 0; j < steps.size(); ++j)
    if (StampRef st = StampOf(steps[j].based_on); st.table == t.id) out[j] = std::move(st.versions);
  return out;
}

template <typename Split>
Request ClientImpl::DataRequest(const Table& t, const Payload& pl, int64_t clock_ahead, Split split,
                                std::shared_ptr<const void> owned) {
  std::shared_ptr<const ShardMap> map;
  uint32_t servers = 0;
  Status s = cache_.Resolve(t, &map, &servers);
  std::vector<Part> parts;
  if (s.ok()) s = split(*map, &parts);
  if (!s.ok()) return MakeRequest(FailedCall(s));
  auto call = NewDataCall(pl.push, t, servers);
  call->owned = std::move(owned);
  call->parts_left = static_cast<int>(parts.size());
  const StepBases bases = pl.push ? BasesOf(t, pl.steps) : StepBases{};
  DataHeader h;
  h.push = pl.push;
  h.role = self_.wire_role();
  h.rank = self_.rank;
  h.table = t.id;
  // One read for every part (another thread may tick meanwhile).
  h.clock = RequestClock(self_.clock.load(std::memory_order_relaxed), clock_ahead);
  h.steps = static_cast<uint32_t>(pl.steps.size());
  if (t.spec.kind == TableKind::kDense) h.dtype = pl.dtype;
  h.compress = pl.compress;
  h.assign = pl.assign;
  thread_local flatbuffers::FlatBufferBuilder fbb;
  for (Part& p : parts) {
    Outgoing o;
    o.target = static_cast<int>(p.server);
    o.group = static_cast<int>(p.group);
    o.call = call;
    o.timeout = opts_.request_timeout;
    const std::vector<uint64_t> part_bases = pl.push ? BasesFor(bases, p.group) : std::vector<uint64_t>{};
    const wire::Fields f = PartFields(h, p, part_bases);
    std::vector<zmq::message_t> extra = PartFrames(pl, p, call);
    if (!pl.push) o.dest = PullDest(pl, p);
    io_.EnqueueRequest(std::move(o), f, std::move(extra), pl.push, fbb);
  }
  return MakeRequest(call);
}

Request ClientImpl::RangeRequest(bool push, const Table& t, RowRange r, float* values, uint64_t floats,
                                 int64_t clock_ahead, std::shared_ptr<PulledFrames> view,
                                 std::span<const PushStep> steps) {
  if (Status s = t.spec.ValidateWire(); !s.ok()) return MakeRequest(FailedCall(s));
  Payload pl{push, t.spec.cols, WireType(t.spec), nullptr, values, {}, steps, std::move(view)};
  auto split = [&](const ShardMap& map, std::vector<Part>* parts) {
    return SplitRange(t.spec, map, r, floats, push, opts_.max_message_bytes, parts);
  };
  if (!push || t.spec.kind != TableKind::kDense || t.spec.wire.compress == Compression::kNone || r.begin >= r.end ||
      r.end > t.spec.rows)
    return DataRequest(t, pl, clock_ahead, split);
  // Compressed: float32 on the wire, each part encoded against the
  // residual of its rows, which no other push of the table touches meanwhile.
  Residual* res = ResidualOf(t);
  std::lock_guard<std::mutex> lock(res->mu);
  if (res->values.size() != t.size()) res->values.assign(t.size(), 0.0f);
  pl.dtype = DType::kF32;
  pl.compress = t.spec.wire.compress;
  pl.topk_fraction = t.spec.wire.topk_fraction;
  pl.residual = res->values.data() + r.begin * t.spec.cols;
  return DataRequest(t, pl, clock_ahead, split);
}

ClientImpl::Residual* ClientImpl::ResidualOf(const Table& t) {
  Residual* r;
  {
    std::lock_guard<std::mutex> lock(residuals_mu_);
    auto& slot = residuals_[t.id];
    if (!slot) slot = std::make_unique<Residual>();
    r = slot.get();  // never freed before the client
  }
  return r;
}

Request ClientImpl::KeysRequest(bool push, const Table& t, std::span<const uint64_t> keys, float* values,
                                uint64_t floats, int64_t clock_ahead) {
  if (Status s = t.spec.ValidateWire(); !s.ok()) return MakeRequest(FailedCall(s));
  const uint32_t cols = t.spec.cols;
  if (floats != keys.size() * cols) {  // the split's message, before planning anything
    std::vector<Part> none;
    return MakeRequest(FailedCall(SplitKeys(t.spec, ShardMap(), keys, floats, push, &none)));
  }
  // Each key is sent once: a pull fills every place of a repeated key, a
  // push sums its gradients (in the order of its places). A key list
  // without repeats, of a float32 table, goes from the caller's arrays as
  // it is.
  auto plan = std::make_shared<KeyPlan>(PlanKeys(keys));
  const DType dtype = WireType(t.spec);
  if (RowCache* rc = CacheFor(push, t)) return CachedPull(t, *plan, values, rc, clock_ahead);
  if (!plan->repeats() && dtype == DType::kF32) {
    Payload pl{push, cols, DType::kF32, nullptr, values, keys, {}, nullptr};
    return DataRequest(t, pl, clock_ahead, [&](const ShardMap& map, std::vector<Part>* parts) {
      return SplitKeys(t.spec, map, keys, floats, push, parts);
    });
  }
  struct Owned {
    std::shared_ptr<KeyPlan> plan;
    std::vector<float> summed;  // a push's gradient per unique key
  };
  auto owned = std::make_shared<Owned>();
  owned->plan = plan;
  if (push) {
    owned->summed.resize(plan->unique.size() * cols);
    SumRows(*plan, values, cols, owned->summed.data());
  }
  const std::span<const uint64_t> unique(plan->unique);
  Payload pl{push, cols, dtype, plan.get(), push ? owned->summed.data() : values, unique, {}, nullptr};
  return DataRequest(
      t, pl, clock_ahead,
      [&](const ShardMap& map, std::vector<Part>* parts) {
        return SplitKeys(t.spec, map, unique, unique.size() * cols, push, parts);
      },
      owned);
}

Request ClientImpl::Assign(const Table& t, std::span<const uint64_t> keys, RowRange rows, const float* values,
                           uint64_t floats) {
  const bool keyed = !keys.empty() || rows.begin == rows.end;
  const uint64_t want = (keyed ? keys.size() : rows.end - rows.begin) * t.spec.cols;
  if (floats != want)
    return MakeRequest(FailedCall(Status::SizeMismatch(
        "assign to '" + t.spec.name + "': " + std::to_string(floats) + " values for " +
        std::to_string(keyed ? keys.size() : rows.end - rows.begin) + " rows of " + std::to_string(t.spec.cols) +
        " (expected " + std::to_string(want) + ")")));
  if (keyed) {
    const KeyPlan plan = PlanKeys(keys);
    if (plan.repeats())
      return MakeRequest(FailedCall(Status::InvalidArgument(
          "assign to '" + t.spec.name + "': an id appears twice (each row is written once)")));
  }
  Payload pl{true, t.spec.cols, t.spec.kind == TableKind::kSparse ? t.spec.dtype : DType::kF32, nullptr,
             const_cast<float*>(values), keys, {}, nullptr};
  pl.assign = true;
  return DataRequest(t, pl, 0, [&](const ShardMap& map, std::vector<Part>* parts) {
    return keyed ? SplitKeys(t.spec, map, keys, floats, true, parts)
                 : SplitRange(t.spec, map, rows, floats, true, opts_.max_message_bytes, parts);
  });
}

RowCache* ClientImpl::CacheFor(bool push, const Table& t) const {
  if (push || !rows_ || !self_.worker() || t.spec.kind != TableKind::kSparse) return nullptr;
  if (cache_.consistency() != Consistency::kBounded || cache_.staleness() == 0) return nullptr;
  return rows_.get();
}

Request ClientImpl::CachedPull(const Table& t, const KeyPlan& plan, float* out, RowCache* cache,
                               int64_t clock_ahead) {
  const uint32_t cols = t.spec.cols;
  // The clock the pull is for: a Prefetch's rows are read at the next one.
  const int64_t clock = RequestClock(self_.clock.load(std::memory_order_relaxed), clock_ahead);
  const uint32_t bound = cache_.staleness();
  auto miss = std::make_shared<KeyPlan>();  // the keys the cache could not serve, with their places
  miss->offsets.push_back(0);
  for (size_t u = 0; u < plan.unique.size(); ++u) {
    const uint32_t* places = plan.positions.data() + plan.offsets[u];
    const uint32_t count = plan.offsets[u + 1] - plan.offsets[u];
    float* first = out + static_cast<size_t>(places[0]) * cols;
    if (cache->Get(t.id, plan.unique[u], clock, bound, cols, first)) {
      for (uint32_t k = 1; k < count; ++k) std::memcpy(out + static_cast<size_t>(places[k]) * cols, first, cols * 4);
      continue;
    }
    miss->unique.push_back(plan.unique[u]);
    miss->positions.insert(miss->positions.end(), places, places + count);
    miss->offsets.push_back(static_cast<uint32_t>(miss->positions.size()));
  }
  if (miss->unique.empty()) return MakeRequest(FailedCall(Status::OK()));  // every row from the cache
  const std::span<const uint64_t> keys(miss->unique);
  Payload pl{false, cols, t.spec.dtype, miss.get(), out, keys, {}, nullptr};
  pl.cache = cache;
  pl.cache_table = t.id;
  pl.cache_clock = clock;
  return DataRequest(
      t, pl, clock_ahead,
      [&](const ShardMap& map, std::vector<Part>* parts) {
        return SplitKeys(t.spec, map, keys, keys.size() * cols, false, parts);
      },
      miss);
}

Request ClientImpl::PushSteps(const Table& t, RowRange rows, std::span<const PushStep> steps) {
  if (steps.empty() || steps.size() > kMaxPushSteps)
    return MakeRequest(FailedCall(Status::InvalidArgument("PushSteps takes 1 to " + std::to_string(kMaxPushSteps) +
                                                          " steps, got " + std::to_string(steps.size()))));
  for (size_t j = 1; j < steps.size(); ++j)
    if (steps[j].grads.size() != steps[0].grads.size())
      return MakeRequest(FailedCall(Status::SizeMismatch("step " + std::to_string(j) + " has " +
                                                         std::to_string(steps[j].grads.size()) + " floats, step 0 " +
                                                         std::to_string(steps[0].grads.size()))));
  return RangeRequest(true, t, rows, const_cast<float*>(steps[0].grads.data()), steps[0].grads.size(), 0, nullptr,
                      steps);
}

std::shared_ptr<Call> ClientImpl::ToEveryServer(wire::Fields f, const char* op, bool clocks, bool after_pushes) {
  // Every replica group, at the server serving it (each server's own
  // without replicas; a server that took a dead one's group over gets one
  // for each).
  const std::shared_ptr<const ShardMap> map = cache_.map();
  const uint32_t groups = map->groups() ? map->groups() : cache_.num_servers();
  auto call = std::make_shared<Call>();
  call->parts_left = static_cast<int>(groups);
  call->op = op;
  call->default_timeout = opts_.request_timeout;
  f.role = self_.wire_role();
  f.rank = self_.rank;
  thread_local flatbuffers::FlatBufferBuilder fbb;
  for (uint32_t g = 0; g < groups; ++g) {
    Outgoing o;
    o.target = static_cast<int>(map->Primary(g));
    o.group = static_cast<int>(g);
    f.group = static_cast<int32_t>(g);
    o.call = call;
    o.timeout = opts_.request_timeout;
    o.dest.clocks = clocks;
    o.after_pushes = after_pushes;
    io_.EnqueueRequest(std::move(o), f, {}, false, fbb);
  }
  return call;
}

Request ClientImpl::ClockAsync(bool trained) {
  if (!self_.worker()) return MakeRequest(FailedCall(Status::InvalidArgument("Clock() is for workers only")));
  wire::Fields f;
  f.type = wire::MsgType::Tick;
  f.clock = self_.clock.fetch_add(1);
  f.idle = !trained;
  // Sync: the tick leaves once every server holds this clock's pushes, so a
  // worker that dies between its ticks to two servers left its gradient on
  // every server, and the coordinator can have it counted on all of them
  // (docs/fault-tolerance.md, "A worker dies between its ticks").
  return MakeRequest(ToEveryServer(f, "clock tick", false, cache_.consistency() == Consistency::kSync));
}

// A worker (re)joining a running job starts at the clock the servers give
// it (the fastest live worker's; a first start: 0). A server that gave
// less is moved up to the largest answer; one that does not know yet
// that this rank is live (the coordinator's update is on its way) is
// asked again until connect_timeout.
Status ClientImpl::JoinServers() {
  const auto deadline = Clock::now() + opts_.connect_timeout;
  int64_t want = -1;
  for (int round = 0, retries = 0;;) {
    wire::Fields f;
    f.type = wire::MsgType::Join;
    f.clock = want;
    Request join = MakeRequest(ToEveryServer(f, "join", true));
    Status s = join.Wait();
    if (s.code() == Code::kUnavailable && Clock::now() < deadline && ++retries < 1000) {
      std::this_thread::sleep_for(Millis(10));
      continue;
    }
    if (!s.ok()) return Status(s.code(), "joining the servers: " + s.message());
    const int64_t lo = join.min_clock(), hi = join.max_clock();
    if (lo == hi || ++round > 8) {
      if (lo != hi)
        return Status::Internal("joining the servers: they still disagree on this worker's clock (" +
                                std::to_string(lo) + " vs " + std::to_string(hi) + ")");
      self_.clock.store(hi);
      return Status::OK();
    }
    want = hi;
  }
}

Status ClientImpl::Close() {
  if (closed_.exchange(true)) return Status::OK();
  Status s;
  if (self_.worker() && self_.rank >= 0) s = channel_.Leave();
  io_.Stop();
  return s;
}

}  // namespace detail

// ---- Client ----

Client::Client(std::unique_ptr<detail::ClientImpl> impl) : impl_(std::move(impl)) {}
Client::~Client() { (void)Close(); }

Status Client::Connect(const ClientOptions& options, std::unique_ptr<Client>* out) {
  if (options.coordinator.empty()) return Status::InvalidArgument("ClientOptions.coordinator is empty");
  if (options.connect_timeout.count() <= 0 || options.request_timeout.count() <= 0)
    return Status::InvalidArgument("timeouts must be > 0");
  if (options.max_message_bytes < 4096)
    return Status::InvalidArgument("max_message_bytes must be at least 4096");
  if (Status e = CheckConnectEndpoint(options.coordinator); !e.ok())
    return Status::InvalidArgument("coordinator " + e.message());
  auto impl = std::make_unique<detail::ClientImpl>(options);
  Status s = impl->Start();
  if (s.ok()) s = impl->Join();
  if (!s.ok()) return s;
  out->reset(new Client(std::move(impl)));
  return Status::OK();
}

Status Client::GetTable(std::string_view name, Table* out) { return impl_->cache_.GetTable(name, out); }
Status Client::CreateTable(const TableSpec& spec, Table* out) { return impl_->cache_.CreateTable(spec, out); }

Request Client::Push(const Table& t, std::span<const float> grads) {
  return Push(t, RowRange{0, t.spec.rows}, grads);
}
Request Client::Push(const Table& t, RowRange rows, std::span<const float> grads) {
  return impl_->RangeRequest(true, t, rows, const_cast<float*>(grads.data()), grads.size());
}
Request Client::Push(const Table& t, std::span<const uint64_t> keys, std::span<const float> grads) {
  return impl_->KeysRequest(true, t, keys, const_cast<float*>(grads.data()), grads.size());
}
Request Client::Assign(const Table& t, std::span<const uint64_t> keys, std::span<const float> values) {
  return impl_->Assign(t, keys, RowRange{0, 0}, values.data(), values.size());
}
Request Client::Assign(const Table& t, RowRange rows, std::span<const float> values) {
  return impl_->Assign(t, {}, rows, values.data(), values.size());
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
Request Client::Prefetch(const Table& t, std::span<const uint64_t> keys, std::span<float> out) {
  return impl_->KeysRequest(false, t, keys, out.data(), out.size(), 1);
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
Request Client::Pull(const Table& t, std::span<const uint64_t> keys, std::span<float> out) {
  return impl_->KeysRequest(false, t, keys, out.data(), out.size());
}

Status Client::Clock(bool trained) { return impl_->ClockAsync(trained).Wait(); }
Request Client::ClockAsync(bool trained) { return impl_->ClockAsync(trained); }
Status Client::Barrier(std::chrono::milliseconds timeout) { return impl_->channel_.Barrier(timeout); }
HeldRequests Client::HoldRequests() {
  impl_->io_.Hold();
  return HeldRequests(impl_.get());
}

void HeldRequests::Release() {
  if (!impl_) return;
  impl_->io_.Release();
  impl_ = nullptr;
}

HeldRequests& HeldRequests::operator=(HeldRequests&& o) noexcept {
  if (this != &o) {
    Release();
    impl_ = o.impl_;
    o.impl_ = nullptr;
  }
  return *this;
}

void Client::AddSamples(uint64_t n) {
  if (impl_->self_.worker()) impl_->self_.samples.fetch_add(n, std::memory_order_relaxed);
}
uint64_t Client::samples() const { return impl_->self_.samples.load(std::memory_order_relaxed); }
Status Client::ClaimWork(uint64_t pool, uint64_t total_units, uint32_t max_units, WorkRange* out) {
  return impl_->channel_.ClaimWork(pool, total_units, max_units, ClaimOptions{}, out);
}
Status Client::ClaimWork(uint64_t pool, uint64_t total_units, uint32_t max_units, const ClaimOptions& options,
                         WorkRange* out) {
  return impl_->channel_.ClaimWork(pool, total_units, max_units, options, out);
}
int Client::rank() const { return impl_->self_.rank; }
int64_t Client::clock() const { return impl_->self_.clock.load(); }
bool Client::StopRequested() const { return impl_->io_.stop_requested(); }
Consistency Client::consistency() const { return impl_->cache_.consistency(); }
uint32_t Client::staleness() const { return impl_->cache_.staleness(); }
uint32_t Client::num_servers() const { return impl_->cache_.num_servers(); }
uint32_t Client::num_workers() const { return impl_->cache_.num_workers(); }
RowCacheStats Client::row_cache_stats() const {
  if (!impl_->rows_) return {};
  const detail::RowCache::Stats s = impl_->rows_->stats();
  return {s.lookups, s.hits, s.rows, s.bytes};
}
Status Client::Close() { return impl_ ? impl_->Close() : Status::OK(); }

}  // namespace shardps
