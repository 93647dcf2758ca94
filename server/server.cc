#include "server/server.h"

#include "common/zap.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <limits>
#include <random>

#include "common/handshake.h"
#include "common/log.h"
#include "common/security.h"
#include "common/wire.h"
#include "server/optimizer.h"

namespace shardps {

Status ServerOptions::Validate() const {
  if (coordinator.empty()) return Status::InvalidArgument("--coordinator is required");
  if (max_request_bytes < 1024)
    return Status::InvalidArgument("max request size must be at least 1 KiB");
  if (heartbeat_interval.count() <= 0) return Status::InvalidArgument("heartbeat interval must be > 0");
  if (max_hold.count() <= 0) return Status::InvalidArgument("the longest hold of a pull must be > 0");
  return Status::OK();
}

uint64_t DefaultMemoryBudget() {
  const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
  return pages > 0 && page > 0 ? static_cast<uint64_t>(pages) * static_cast<uint64_t>(page) / 2 : (8ull << 30);
}

Server::Server(zmq::context_t& ctx, ServerOptions opts)
    : ctx_(ctx),
      opts_(std::move(opts)),
      data_(ctx_, zmq::socket_type::router),
      coord_(ctx_, zmq::socket_type::dealer) {
  if (opts_.memory_budget == 0) opts_.memory_budget = DefaultMemoryBudget();
  if (opts_.held_bytes == 0) opts_.held_bytes = std::max<uint64_t>(opts_.memory_budget / 4, 64ull << 20);
}

uint64_t Server::NewVersionTag() {
  static_assert(kVersionBits == wire::kVersionCountBits, "clients read the count below the tag");
  std::random_device rd;
  uint64_t t = 0;
  while (t == 0) t = rd() & 0xffff;
  return t << kVersionBits;
}

uint64_t Server::FramesBytes(const std::vector<zmq::message_t>& frames) {
  uint64_t b = 0;
  for (const auto& f : frames) b += f.size();
  return b;
}

uint64_t Server::TableBytes() const {
  uint64_t b = 0;
  for (const auto& t : tables_)
    if (t) b += t->bytes();
  return b;
}

Status Server::CheckSparseGrowth(const ServerTable& t, const uint64_t* keys, uint64_t n) {
  const TableSpec& spec = t.spec();
  // This server's share of max_rows: by its share of the partitions.
  const uint64_t parts = std::max<uint64_t>(1, view_.map.partitions());
  const uint64_t share =
      spec.max_rows == 0 ? UINT64_MAX
                         : static_cast<uint64_t>((static_cast<unsigned __int128>(spec.max_rows) * owned_partitions_ +
                                                  parts - 1) / parts);
  const uint64_t used = TableBytes();
  // Cheap first: even if every id were new, would it fit?
  const uint64_t worst_bytes = (n + 1024) * t.row_bytes();
  if (t.sparse_rows() + n <= share && used + worst_bytes <= opts_.memory_budget) return Status::OK();
  const uint64_t fresh = t.CountAbsent(keys, n);
  if (fresh == 0) return Status::OK();
  if (t.sparse_rows() + fresh > share)
    return Status::TooLarge("sparse table '" + spec.name + "' holds " + std::to_string(t.sparse_rows()) +
                            " rows on server " + std::to_string(rank_) + "; " + std::to_string(fresh) +
                            " new ids would pass its share (" + std::to_string(share) + ") of max_rows " +
                            std::to_string(spec.max_rows));
  if (used + (fresh + 1024) * t.row_bytes() > opts_.memory_budget)
    return Status::TooLarge("server " + std::to_string(rank_) + " holds " + std::to_string(used) +
                            " bytes of tables; " + std::to_string(fresh) + " new rows of sparse table '" + spec.name +
                            "' would pass its memory budget of " + std::to_string(opts_.memory_budget) + " bytes");
  return Status::OK();
}

void Server::RecountAhead() {
  ahead_bytes_ = 0;
  for (auto it = buffered_.upper_bound(applied_clock_); it != buffered_.end(); ++it)
    for (const auto& b : it->second) ahead_bytes_ += FramesBytes(b.frames);
}

void Server::ExpireParked() {
  if (parked_.empty()) return;
  const auto now = Clock::now();
  while (!parked_.empty() && now - parked_.front().arrived > opts_.max_hold) {
    Parked p = std::move(parked_.front());
    parked_.pop_front();
    parked_bytes_ -= p.bytes;
    const wire::Header* h = nullptr;
    std::vector<uint64_t> scratch;
    const uint64_t id = wire::ParseHeader(p.frames[1], scratch, &h).ok() ? h->request_id() : 0;
    ReplyError(p.frames[0], id,
               Status::Timeout("pull held for more than " + std::to_string(opts_.max_hold.count()) +
                               " ms waiting for every live worker to reach clock " + std::to_string(p.need_clock) +
                               " (the slowest is at " + std::to_string(MinClock()) + ")"));
  }
}

Server::~Server() {
  if (writer_.joinable()) {
    {
      std::lock_guard<std::mutex> lock(wmu_);
      writer_stop_ = true;
    }
    wcv_.notify_all();
    writer_.join();
  }
}

Status Server::Start() {
  // The coordinator connection's handshakes are watched while registering: a
  // refused one (keys here and none there, or the other way round, or a key
  // the coordinator does not admit) fails the start at once, with the reason.
  zmq::socket_t monitor;
  struct StopWatching {
    zmq::socket_t& s;
    ~StopWatching() { zmq_socket_monitor(s.handle(), nullptr, 0); }
  } stop_watching{coord_};
  try {
    data_.set(zmq::sockopt::router_mandatory, 1);
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
      zap_ = std::make_unique<ZapHandler>(ctx_, opts_.security.access);
      if (Status s = zap_->Start(); !s.ok()) return s;
      if (Status s = MakeCurveServer(data_, opts_.security.key); !s.ok()) return s;
      zap_->Watch(data_, "this server");
      MakeCurveClient(coord_, opts_.security.key);
    }
    data_.bind(BindSpec(opts_.bind));
    coord_.set(zmq::sockopt::linger, 0);
    static std::atomic<int> monitors{0};
    monitor = WatchHandshakes(ctx_, coord_, "inproc://shardps-server-registers-" + std::to_string(monitors++));
    coord_.connect(opts_.coordinator);
  } catch (const zmq::error_t& e) {
    return Status::InvalidArgument("server cannot bind '" + opts_.bind + "' or reach coordinator '" +
                                   opts_.coordinator + "': " + e.what());
  }
  if (Status s = AdvertisedEndpoint(data_, opts_.advertise, opts_.coordinator, &endpoint_); !s.ok()) return s;

  fbb_.Clear();
  auto ep = fbb_.CreateString(endpoint_);
  auto host = fbb_.CreateString(HostName());
  auto url = fbb_.CreateString(opts_.metrics_url);
  auto req = wire::CreateRegisterRequest(fbb_, wire::Role::Server, opts_.rank, ep, host,
                                         static_cast<uint32_t>(::getpid()), url, opts_.memory_budget);
  wire::Fields f;
  f.type = wire::MsgType::Register;
  f.request_id = next_request_id_++;
  f.role = wire::Role::Server;
  zmq::message_t m = wire::Encode(fbb_, f, wire::Body::RegisterRequest, req.Union());
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
  const KeyFile* key = opts_.security.enabled ? &opts_.security.key : nullptr;
  int drops = 0;  // handshakes dropped in a row
  while (Clock::now() < deadline) {
    zmq::pollitem_t items[] = {{coord_.handle(), 0, ZMQ_POLLIN, 0}, {monitor.handle(), 0, ZMQ_POLLIN, 0}};
    Poll(items, 2, Millis(100));
    if (std::string why; HandshakeRefused(monitor, key, &drops, &why))
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
    Status s = wire::ParseHeader(frames[0], header_scratch_, &h);
    if (!s.ok()) return Status::Internal("coordinator sent a bad reply: " + s.ToString());
    if (h->type() != wire::MsgType::Reply || h->request_id() != f.request_id) continue;
    s = wire::ReplyStatus(h);
    if (!s.ok()) return Status(s.code(), "coordinator refused registration: " + s.message());
    ClusterView v;
    s = wire::DecodeCluster(h->body_as_ClusterInfo(), &v);
    if (!s.ok()) return s;
    rank_ = static_cast<uint32_t>(h->rank());
    SetLogName("server " + std::to_string(rank_));
    LOG_INFO << "registered as server " << rank_ << ", serving on " << endpoint_;
    ApplyCluster(v);
    return fatal_;
  }
  return Status::Timeout("no answer from coordinator " + opts_.coordinator + " within " +
                         std::to_string(opts_.register_timeout.count()) + " ms" +
                         (opts_.security.enabled
                              ? " (security on: does the coordinator run with this job's keys, and list this "
                                "server.key in its access list?)"
                              : ""));
}

bool Server::IsLive(int rank) const {
  return rank >= 0 && static_cast<size_t>(rank) < live_.size() && live_[rank];
}

int64_t Server::MinClock() const {
  int64_t m = std::numeric_limits<int64_t>::max(), all = 0;
  for (size_t r = 0; r < clocks_.size(); ++r) {
    all = std::max(all, clocks_[r]);
    if (live_[r] && !joining_[r]) m = std::min(m, clocks_[r]);
  }
  return m == std::numeric_limits<int64_t>::max() ? all : m;
}

int64_t Server::MaxClock() const {
  int64_t m = -1, all = 0;
  for (size_t r = 0; r < clocks_.size(); ++r) {
    all = std::max(all, clocks_[r]);
    if (live_[r] && !joining_[r]) m = std::max(m, clocks_[r]);
  }
  return m < 0 ? all : m;
}

void Server::ApplyCluster(const ClusterView& v) {
  const bool had_map = view_.complete();
  if (had_map && v.complete() && v.map.version != view_.map.version)
    LOG_ERROR << "shard map changed from v" << view_.map.version << " to v" << v.map.version
              << ": moving partitions between live servers is not supported yet; keeping v"
              << view_.map.version;
  ClusterView old = std::move(view_);
  view_ = v;
  if (had_map) view_.map = old.map;
  if (view_.complete()) {
    auto owned = view_.map.OwnedBy(rank_);
    owned_partitions_ = owned.size();
    tables_.resize(view_.tables.size());
    for (const auto& spec : view_.tables) {
      if (tables_[spec.id] || refused_tables_.count(spec.id)) continue;
      // The coordinator checks every table against the servers' budgets
      // before it defines one; this is the last line: never allocate past
      // the budget, and never die of a failed allocation.
      const uint64_t need = ServerTable::DenseBytes(spec, view_.map.partitions(), owned), used = TableBytes();
      if (used + need > opts_.memory_budget) {
        LOG_ERROR << "table '" << spec.name << "' needs " << need << " bytes here, " << used << " of the "
                  << opts_.memory_budget << "-byte memory budget are in use: not holding it";
        refused_tables_.insert(spec.id);
        continue;
      }
      const bool restoring = !view_.restore_from.empty() && spec.kind == TableKind::kDense && RestoreCoversTable(spec);
      try {
        tables_[spec.id] = std::make_unique<ServerTable>(spec, view_.map.partitions(), owned, !restoring);
      } catch (const std::bad_alloc&) {
        LOG_ERROR << "table '" << spec.name << "': allocating " << need << " bytes failed: not holding it";
        refused_tables_.insert(spec.id);
        continue;
      }
      if (!view_.restore_from.empty()) {
        Status rs = RestoreTable(spec);
        if (!rs.ok()) {
          LOG_ERROR << "restore failed, stopping: " << rs.ToString();
          fatal_ = Status(rs.code(), "restore failed: " + rs.message());
          shutdown_ = true;
          return;
        }
      }
      LOG_INFO << "holding table '" << spec.name << "' (" << ToString(spec.kind) << ", "
               << owned.size() << " of " << view_.map.partitions() << " partitions, "
               << tables_[spec.id]->rows_held() << " rows)";
    }
  }
  // Membership.
  if (clocks_.size() < view_.worker_ranks()) {
    clocks_.resize(view_.worker_ranks(), 0);
    live_.resize(view_.worker_ranks(), 0);
    joining_.resize(view_.worker_ranks(), 0);
    last_seq_.resize(view_.worker_ranks(), 0);
  }
  std::vector<uint8_t> now_live(clocks_.size(), 0);
  for (uint32_t r : view_.live_workers)
    if (r < now_live.size()) now_live[r] = 1;
  for (size_t r = 0; r < live_.size(); ++r) {
    if (live_[r] && !now_live[r]) {
      // Gone: its pushes for clocks it never finished do not count.
      size_t dropped = 0;
      for (auto& [clock, list] : buffered_) {
        if (clock < clocks_[r]) continue;
        auto it = std::remove_if(list.begin(), list.end(),
                                 [&](const Buffered& b) { return b.rank == r; });
        dropped += static_cast<size_t>(list.end() - it);
        list.erase(it, list.end());
      }
      LOG_INFO << "worker " << r << " is no longer live (at clock " << clocks_[r] << ")"
               << (dropped ? ", dropped " + std::to_string(dropped) + " unfinished pushes" : "");
      joining_[r] = 0;
    } else if (!live_[r] && now_live[r] && membership_known_) {
      // A worker (re)joining the running job: a new process, whose push
      // sequence starts again, at a clock it learns with Join.
      joining_[r] = 1;
      last_seq_[r] = 0;
      LOG_INFO << "worker " << r << " is joining";
    }
  }
  live_ = std::move(now_live);
  membership_known_ = true;
  Advance();
}

void Server::Reply(const zmq::message_t& to, zmq::message_t header) {
  std::vector<zmq::message_t> frames;
  frames.emplace_back(to.data(), to.size());
  frames.push_back(std::move(header));
  Status s = SendMultipart(data_, frames);
  if (!s.ok()) LOG_WARN << "reply dropped: " << s.ToString();
}

void Server::ReplyError(const zmq::message_t& to, uint64_t request_id, const Status& s) {
  LOG_WARN << "request " << request_id << " refused: " << s.ToString();
  m_.errors.SingleWriterInc();
  Reply(to, wire::EncodeError(fbb_, request_id, s));
}

Status Server::CheckRequest(const wire::Header& h, std::vector<zmq::message_t>& frames, bool push,
                            ServerTable** t, const uint64_t** keys, const float** values) {
  // values: kMaxPushSteps pointers for a push (one per step), unused for a pull.
  if (!view_.complete()) return Status::NotReady("server has no shard map yet");
  if (refused_tables_.count(h.table()))
    return Status::TooLarge("table id " + std::to_string(h.table()) + " is not held by server " +
                            std::to_string(rank_) + ": it did not fit this server's memory budget");
  if (h.table() >= tables_.size() || !tables_[h.table()])
    return Status::UnknownTable("table id " + std::to_string(h.table()) + " is not defined (" +
                                std::to_string(tables_.size()) + " tables exist)");
  ServerTable* table = tables_[h.table()].get();
  const TableSpec& spec = table->spec();
  const bool by_keys = h.key_count() > 0;
  const uint32_t steps = push ? std::max<uint32_t>(1, h.steps()) : 0;
  if (!push && (h.steps() > 1 || h.base_versions()))
    return Status::BadMessage("a pull carries no steps or base versions");
  if (steps > kMaxPushSteps)
    return Status::TooLarge("a push of " + std::to_string(steps) + " steps (at most " +
                            std::to_string(kMaxPushSteps) + " gradients per push)");
  if (h.base_versions() && h.base_versions()->size() != steps)
    return Status::BadMessage("a push of " + std::to_string(steps) + " steps with " +
                              std::to_string(h.base_versions()->size()) + " base versions");
  const size_t want_frames = 2 + (by_keys ? 1 : 0) + steps;
  if (frames.size() != want_frames)
    return Status::BadMessage(std::string(push ? "push" : "pull") + " by " +
                              (by_keys ? "keys" : "row range") + (steps > 1 ? " of " + std::to_string(steps) + " steps" : "") +
                              " takes " + std::to_string(want_frames - 1) + " frames, got " +
                              std::to_string(frames.size() - 1));
  uint64_t rows;
  const uint64_t max_rows = opts_.max_request_bytes / 4 / spec.cols;
  if (by_keys) {
    rows = h.key_count();
    if (rows > max_rows)
      return Status::TooLarge(std::to_string(rows) + " keys exceed the request limit of " +
                              std::to_string(opts_.max_request_bytes) + " bytes");
    Status s = wire::CheckFrameSize("keys", frames[2].size(), rows * 8);
    if (!s.ok()) return s;
    *keys = wire::ArrayView<uint64_t>(frames[2], key_scratch_);
    s = table->CheckKeys(*keys, rows);
    if (!s.ok()) return s;
    // Pushes and workers' pulls create sparse rows; an observer's pull never does.
    if (spec.kind == TableKind::kSparse && (push || h.role() == wire::Role::Worker)) {
      s = CheckSparseGrowth(*table, *keys, rows);
      if (!s.ok()) return s;
    }
  } else {
    if (h.row_end() <= h.row_begin())
      return Status::OutOfRange("empty or inverted row range [" + std::to_string(h.row_begin()) +
                                ", " + std::to_string(h.row_end()) + ")");
    rows = h.row_end() - h.row_begin();
    if (rows > max_rows)
      return Status::TooLarge(std::to_string(rows) + " rows exceed the request limit of " +
                              std::to_string(opts_.max_request_bytes) + " bytes");
    *keys = nullptr;
    Status s = table->CheckRange(h.row_begin(), h.row_end());
    if (!s.ok()) return s;
  }
  if (push) {
    if (step_scratch_.size() < steps) step_scratch_.resize(steps);
    const size_t first = frames.size() - steps;
    for (uint32_t j = 0; j < steps; ++j) {
      Status s = wire::CheckFrameSize("values", frames[first + j].size(), rows * spec.cols * 4);
      if (!s.ok()) return s;
      values[j] = wire::ArrayView<float>(frames[first + j], step_scratch_[j]);
    }
  }
  *t = table;
  return Status::OK();
}

void Server::Push(const wire::Header& h, std::vector<zmq::message_t>& frames) {
  ServerTable* t;
  const uint64_t* keys;
  const float* values[kMaxPushSteps];
  Status s = CheckRequest(h, frames, true, &t, &keys, values);
  if (!s.ok()) return ReplyError(frames[0], h.request_id(), s);
  const bool worker = h.role() == wire::Role::Worker;
  const int rank = h.rank();
  if (worker && !IsLive(rank))
    return ReplyError(frames[0], h.request_id(),
                      Status::Unavailable("worker " + std::to_string(rank) + " is not live in this job"));
  wire::Fields ok;
  ok.request_id = h.request_id();
  if (worker && h.seq() != 0) {
    if (h.seq() <= last_seq_[rank]) {  // a retry of a push already applied
      LOG_DEBUG << "duplicate push seq " << h.seq() << " from worker " << rank;
      return Reply(frames[0], wire::EncodeSimple(fbb_, ok));
    }
    last_seq_[rank] = h.seq();
  }
  const uint32_t steps = std::max<uint32_t>(1, h.steps());
  if (worker && view_.consistency == Consistency::kSync) {
    if (steps > 1)
      return ReplyError(frames[0], h.request_id(),
                        Status::InvalidArgument("a push of " + std::to_string(steps) +
                                                " steps under sync: a synchronous clock is one step of the "
                                                "workers' averaged gradients (several steps per push are for "
                                                "bounded staleness and async)"));
    if (h.clock() < 0 || h.clock() > clocks_[rank] + 2)
      return ReplyError(frames[0], h.request_id(),
                        Status::InvalidArgument("push for clock " + std::to_string(h.clock()) + " but worker " +
                                                std::to_string(rank) + " is at clock " + std::to_string(clocks_[rank])));
    // Pushes for the clock being applied are what BSP holds by design
    // (workers x the model, at most): always taken. Pushes for later clocks
    // are bounded.
    const uint64_t bytes = FramesBytes(frames);
    if (h.clock() > applied_clock_ && ahead_bytes_ + bytes > opts_.held_bytes)
      return ReplyError(frames[0], h.request_id(),
                        Status::TooLarge("synchronous pushes held for clocks after " + std::to_string(applied_clock_) +
                                         " would pass " + std::to_string(opts_.held_bytes) +
                                         " bytes (the held-bytes limit)"));
    if (h.clock() < applied_clock_)
      return ReplyError(frames[0], h.request_id(),
                        Status::StaleClock("push for clock " + std::to_string(h.clock()) +
                                           " arrived after that clock was applied (now " +
                                           std::to_string(applied_clock_) + ")"));
    m_.pushes.SingleWriterInc();
    m_.push_bytes.SingleWriterAdd(frames.back().size());
    Reply(frames[0], wire::EncodeSimple(fbb_, ok));
    if (h.clock() > applied_clock_) ahead_bytes_ += bytes;
    buffered_[h.clock()].push_back({static_cast<uint32_t>(rank), arrivals_++, h.table(), std::move(frames)});
    return;
  }
  m_.pushes.SingleWriterInc();
  m_.push_bytes.SingleWriterAdd(frames.back().size() * steps);
  m_.push_steps.SingleWriterAdd(steps);
  if (keys)
    EnsureCopiedKeys(h.table(), keys, h.key_count());
  else
    EnsureCopiedRange(h.table(), h.row_begin(), h.row_end());
  // Each gradient is one optimizer step, in order. A worker's push says on
  // which version of these rows each was computed: its staleness is the
  // updates applied since (this push's earlier steps included), and the
  // table's rule weighs it (docs/consistency.md, "Stale gradients").
  const auto* bases = worker ? h.base_versions() : nullptr;
  const StalenessRule rule = EffectiveStalenessRule(t->spec());
  for (uint32_t j = 0; j < steps; ++j) {
    float lr_scale = 1.0f;
    const float* g = values[j];
    const uint64_t tagged = bases ? bases->Get(j) : 0;
    if (bases && (tagged >> kVersionBits) != (version_tag_ >> kVersionBits)) {
      m_.stale_unknown.SingleWriterInc();  // based on a pull from before this server started: as fresh
    } else if (bases) {
      const uint64_t now = keys ? t->KeysVersion(keys, h.key_count()) : t->RangeVersion(h.row_begin(), h.row_end());
      const uint64_t base = tagged & ((1ull << kVersionBits) - 1);
      const uint64_t tau = now > base ? now - base : 0;
      m_.staleness.SingleWriterObserve(static_cast<double>(tau));
      ok.staleness = std::max(ok.staleness, tau);
      lr_scale = StalenessLrScale(rule, tau);
      if (rule == StalenessRule::kDelayCompensation && tau > 0) {
        const float* dc = keys ? nullptr : DcCompensate(rank, h.table(), *t, h.row_begin(), h.row_end(), tagged, g);
        if (dc)
          g = dc;
        else
          m_.dc_uncompensated.SingleWriterInc();
      }
    }
    if (keys)
      t->ApplyKeys(keys, h.key_count(), g, 1.0f, lr_scale);
    else
      t->ApplyRange(h.row_begin(), h.row_end(), g, 1.0f, lr_scale);
  }
  Reply(frames[0], wire::EncodeSimple(fbb_, ok));
}

void Server::DcKeep(int rank, uint32_t table, const ServerTable& t, uint64_t begin, uint64_t end,
                    uint64_t version) {
  DcRing& ring = dc_kept_[{rank, table, begin}];
  DcSlot& slot = ring.slots[ring.next++ % kDcKept];
  slot.used = true;
  slot.version = version;
  slot.end = end;
  slot.w.resize((end - begin) * t.spec().cols);
  t.ReadRange(begin, end, slot.w.data());
}

const float* Server::DcCompensate(int rank, uint32_t table, const ServerTable& t, uint64_t begin, uint64_t end,
                                  uint64_t base, const float* g) {
  auto it = dc_kept_.find({rank, table, begin});
  if (it == dc_kept_.end()) return nullptr;
  for (const DcSlot& slot : it->second.slots) {
    if (!slot.used || slot.version != base || slot.end != end) continue;
    // Zheng et al. 2017: g + lambda * g (.) g (.) (w_now - w_then).
    const size_t n = slot.w.size();
    dc_now_.resize(n);
    dc_grad_.resize(n);
    t.ReadRange(begin, end, dc_now_.data());
    const float lambda = t.spec().dc_lambda;
    for (size_t i = 0; i < n; ++i) dc_grad_[i] = g[i] + lambda * g[i] * g[i] * (dc_now_[i] - slot.w[i]);
    return dc_grad_.data();
  }
  return nullptr;
}

void Server::Pull(const wire::Header& h, std::vector<zmq::message_t>& frames, Clock::time_point arrived,
                  bool resumed) {
  ServerTable* t;
  const uint64_t* keys;
  const float* values = nullptr;
  Status s = CheckRequest(h, frames, false, &t, &keys, &values);
  if (!s.ok()) return ReplyError(frames[0], h.request_id(), s);
  if (h.role() == wire::Role::Worker && view_.consistency != Consistency::kAsync && IsLive(h.rank())) {
    // A worker reads its own clock, or the next one (a prefetch): a pull far
    // ahead would be held for ever.
    if (h.clock() < 0 || h.clock() > clocks_[h.rank()] + 2)
      return ReplyError(frames[0], h.request_id(),
                        Status::InvalidArgument("pull for clock " + std::to_string(h.clock()) + " but worker " +
                                                std::to_string(h.rank()) + " is at clock " +
                                                std::to_string(clocks_[h.rank()])));
    const int64_t need = h.clock() - static_cast<int64_t>(view_.staleness);
    if (MinClock() < need) {
      const uint64_t bytes = FramesBytes(frames);
      if (parked_bytes_ + bytes > opts_.held_bytes)
        return ReplyError(frames[0], h.request_id(),
                          Status::TooLarge("pulls held for slower workers would pass " +
                                           std::to_string(opts_.held_bytes) + " bytes (the held-bytes limit)"));
      parked_bytes_ += bytes;
      parked_.push_back({need, h.rank(), std::move(frames), arrived, bytes});
      return;
    }
  }
  wire::Fields f;
  f.request_id = h.request_id();
  f.min_clock = MinClock();
  f.max_clock = MaxClock();
  f.table_version =
      version_tag_ | (keys ? t->KeysVersion(keys, h.key_count()) : t->RangeVersion(h.row_begin(), h.row_end()));
  std::vector<zmq::message_t> out;
  out.emplace_back(frames[0].data(), frames[0].size());
  out.push_back(wire::EncodeSimple(fbb_, f));
  if (keys) {
    const uint64_t rows = h.key_count();
    zmq::message_t vals(rows * t->spec().cols * sizeof(float));
    const bool create = h.role() == wire::Role::Worker;  // an observer's read creates nothing
    if (t->spec().kind == TableKind::kSparse && create) EnsureCopiedKeys(h.table(), keys, rows);  // may create rows
    t->ReadKeys(keys, rows, static_cast<float*>(vals.data()), create);
    out.push_back(std::move(vals));
  } else {
    // Rows straight from the table, one frame per partition segment.
    t->ReadRangeFrames(h.row_begin(), h.row_end(), &out);
    if (h.role() == wire::Role::Worker && IsLive(h.rank()) &&
        EffectiveStalenessRule(t->spec()) == StalenessRule::kDelayCompensation)
      DcKeep(h.rank(), h.table(), *t, h.row_begin(), h.row_end(), f.table_version);
  }
  const uint64_t rows = keys ? h.key_count() : h.row_end() - h.row_begin();
  m_.pulls.SingleWriterInc();
  m_.pull_bytes.SingleWriterAdd(rows * t->spec().cols * sizeof(float));
  const auto now = Clock::now();
  m_.pull_seconds.SingleWriterObserve(std::chrono::duration<double>(now - arrived).count());
  if (resumed) m_.wait_seconds.SingleWriterObserve(std::chrono::duration<double>(now - arrived).count());
  Status st = SendMultipart(data_, out);
  if (!st.ok()) LOG_WARN << "pull reply dropped: " << st.ToString();
}

void Server::Tick(const wire::Header& h, std::vector<zmq::message_t>& frames) {
  const int rank = h.rank();
  if (h.role() != wire::Role::Worker || rank < 0 || static_cast<size_t>(rank) >= clocks_.size())
    return ReplyError(frames[0], h.request_id(),
                      Status::InvalidArgument("tick from a non-worker or an unknown rank " +
                                              std::to_string(rank)));
  if (!IsLive(rank))
    return ReplyError(frames[0], h.request_id(),
                      Status::Unavailable("worker " + std::to_string(rank) + " is not live in this job"));
  if (h.clock() > clocks_[rank])
    return ReplyError(frames[0], h.request_id(),
                      Status::InvalidArgument("tick for clock " + std::to_string(h.clock()) +
                                              " but worker " + std::to_string(rank) + " is at clock " +
                                              std::to_string(clocks_[rank]) + ": a tick was lost"));
  if (h.clock() == clocks_[rank]) {
    clocks_[rank]++;
    if (view_.consistency == Consistency::kSync && !h.idle() && h.clock() >= applied_clock_) ++trained_[h.clock()];
  }
  m_.ticks.SingleWriterInc();
  wire::Fields ok;
  ok.request_id = h.request_id();
  Reply(frames[0], wire::EncodeSimple(fbb_, ok));
  Advance();
}

void Server::Join(const wire::Header& h, std::vector<zmq::message_t>& frames) {
  const int rank = h.rank();
  if (h.role() != wire::Role::Worker || rank < 0 || static_cast<size_t>(rank) >= clocks_.size())
    return ReplyError(frames[0], h.request_id(),
                      Status::InvalidArgument("join from a non-worker or an unknown rank " + std::to_string(rank)));
  if (!IsLive(rank))
    return ReplyError(frames[0], h.request_id(),
                      Status::Unavailable("worker " + std::to_string(rank) + " is not live in this job (yet)"));
  if (joining_[rank]) {
    // It starts with the fastest live worker (under sync: at least the
    // clock being applied), so nobody waits for it to catch up, and it
    // waits for the others as the model says.
    int64_t start = MaxClock();  // (it is still joining: not counted)
    joining_[rank] = 0;
    if (view_.consistency == Consistency::kSync) start = std::max(start, applied_clock_);
    clocks_[rank] = start;
    LOG_INFO << "worker " << rank << " joined at clock " << start;
  }
  if (h.clock() > clocks_[rank]) {
    // Another server started it later: moved up before it pushed anything.
    for (const auto& [clock, list] : buffered_)
      for (const auto& b : list)
        if (b.rank == static_cast<uint32_t>(rank))
          return ReplyError(frames[0], h.request_id(),
                            Status::InvalidArgument("join at clock " + std::to_string(h.clock()) + ": worker " +
                                                    std::to_string(rank) + " already pushed for clock " +
                                                    std::to_string(clock)));
    clocks_[rank] = h.clock();
  }
  wire::Fields ok;
  ok.request_id = h.request_id();
  ok.min_clock = ok.max_clock = clocks_[rank];
  Reply(frames[0], wire::EncodeSimple(fbb_, ok));
  Advance();
}

void Server::AggregateClock(int64_t clock) {
  uint32_t trained = 0;  // workers whose tick of `clock` said they trained a batch
  if (auto tr = trained_.find(clock); tr != trained_.end()) {
    trained = tr->second;
    trained_.erase(tr);
  }
  auto it = buffered_.find(clock);
  if (it == buffered_.end()) return;
  auto& list = it->second;
  std::sort(list.begin(), list.end(), [](const Buffered& a, const Buffered& b) {
    return a.rank != b.rank ? a.rank < b.rank : a.arrival < b.arrival;
  });
  // The step is the mean over the workers that trained a batch at this
  // clock: those whose tick said so (a worker without a batch — the
  // epoch's last clock — ticks idle; a dead worker never ticked, and its
  // pushes were dropped). The same count on every server, also for a
  // sparse table whose keys reach only some. Without such ticks (none
  // counted), the workers that pushed to the table. docs/consistency.md.
  std::vector<uint32_t> contributors(tables_.size(), 0);
  std::vector<int> last_rank(tables_.size(), -1);
  for (const auto& b : list)
    if (b.table < tables_.size() && last_rank[b.table] != static_cast<int>(b.rank)) {
      last_rank[b.table] = static_cast<int>(b.rank);  // sorted by rank: one count per worker
      ++contributors[b.table];
    }
  std::vector<uint8_t> touched(tables_.size(), 0);
  for (auto& b : list) {
    const wire::Header* h = nullptr;
    if (!wire::ParseHeader(b.frames[1], header_scratch_, &h).ok()) continue;  // verified on arrival
    ServerTable* t = tables_[b.table].get();
    const float* values = wire::ArrayView<float>(b.frames.back(), value_scratch_);
    if (h->key_count() > 0) {
      const uint64_t* keys = wire::ArrayView<uint64_t>(b.frames[2], key_scratch_);
      EnsureCopiedKeys(b.table, keys, h->key_count());  // the sum is applied below
      t->AccumulateKeys(keys, h->key_count(), values);
    } else {
      EnsureCopiedRange(b.table, h->row_begin(), h->row_end());
      t->AccumulateRange(h->row_begin(), h->row_end(), values);
    }
    touched[b.table] = 1;
  }
  for (size_t i = 0; i < tables_.size(); ++i)
    if (touched[i])
      tables_[i]->ApplyAccumulated(1.0f / static_cast<float>(std::max<uint32_t>(trained ? trained : contributors[i], 1)));
  buffered_.erase(it);
}

void Server::Advance() {
  if (view_.consistency == Consistency::kSync) {
    bool any_live = std::any_of(live_.begin(), live_.end(), [](uint8_t l) { return l != 0; });
    int64_t target = MinClock();
    if (!any_live) target = buffered_.empty() ? applied_clock_ : std::max(applied_clock_, buffered_.rbegin()->first + 1);
    while (applied_clock_ < target) {
      CutIfDue(applied_clock_);  // the state holds exactly the clocks < applied_clock_
      AggregateClock(applied_clock_++);
    }
    RecountAhead();
    CutIfDue(applied_clock_);
  }
  MaybeCut();
  if (parked_.empty()) return;
  const int64_t m = MinClock();
  std::deque<Parked> still;
  std::deque<Parked> go;
  for (auto& p : parked_) (p.need_clock <= m ? go : still).push_back(std::move(p));
  parked_ = std::move(still);
  for (const auto& p : go) parked_bytes_ -= p.bytes;
  for (auto& p : go) {
    const wire::Header* h = nullptr;
    std::vector<uint64_t> scratch;
    if (!wire::ParseHeader(p.frames[1], scratch, &h).ok()) continue;
    Pull(*h, p.frames, p.arrived, true);
  }
}

void Server::HandleData(std::vector<zmq::message_t>& frames) {
  if (frames.size() < 2) {
    if (!frames.empty())
      ReplyError(frames[0], 0, Status::BadMessage("message without a header frame"));
    return;
  }
  const wire::Header* h = nullptr;
  Status s = wire::ParseHeader(frames[1], header_scratch_, &h);
  if (!s.ok()) return ReplyError(frames[0], 0, s);
  if (opts_.security.enabled) {
    const auto role = PeerRole(frames[1]);
    Status a = role ? Authorize(*role, h->type(), h->role())
                    : Status::PermissionDenied("the connection carries no key role");
    if (!a.ok()) return ReplyError(frames[0], h->request_id(), a);
  }
  uint64_t total = 0;
  for (size_t i = 1; i < frames.size(); ++i) total += frames[i].size();
  if (total > opts_.max_request_bytes)
    return ReplyError(frames[0], h->request_id(),
                      Status::TooLarge("request of " + std::to_string(total) +
                                       " bytes exceeds this server's limit of " +
                                       std::to_string(opts_.max_request_bytes) + " bytes"));
  switch (h->type()) {
    case wire::MsgType::Push: {
      const auto arrived = Clock::now();
      Push(*h, frames);
      m_.push_seconds.SingleWriterObserve(std::chrono::duration<double>(Clock::now() - arrived).count());
      return;
    }
    case wire::MsgType::Pull:
      return Pull(*h, frames, Clock::now());
    case wire::MsgType::Tick:
      return Tick(*h, frames);
    case wire::MsgType::Join:
      return Join(*h, frames);
    default:
      return ReplyError(frames[0], h->request_id(),
                        Status::InvalidArgument(std::string("a server does not serve '") +
                                                wire::EnumNameMsgType(h->type()) + "' messages"));
  }
}

void Server::HandleCoordinator(std::vector<zmq::message_t>& frames) {
  const wire::Header* h = nullptr;
  Status s = wire::ParseHeader(frames[0], header_scratch_, &h);
  if (!s.ok()) {
    LOG_ERROR << "bad message from the coordinator: " << s.ToString();
    return;
  }
  switch (h->type()) {
    case wire::MsgType::ClusterUpdate: {
      ClusterView v;
      s = wire::DecodeCluster(h->body_as_ClusterInfo(), &v);
      if (!s.ok()) {
        LOG_ERROR << "bad cluster update: " << s.ToString();
        return;
      }
      const uint64_t id = h->request_id();
      ApplyCluster(v);
      if (!fatal_.ok()) return;  // not ready, and never will be: no ack
      wire::Fields ack;
      ack.type = wire::MsgType::Reply;
      ack.request_id = id;
      ack.role = wire::Role::Server;
      ack.rank = static_cast<int32_t>(rank_);
      coord_.send(wire::EncodeSimple(fbb_, ack), zmq::send_flags::dontwait);
      return;
    }
    case wire::MsgType::ClockQuery:
    case wire::MsgType::SnapshotAt:
    case wire::MsgType::SnapshotCancel:
      return HandleSnapshotControl(*h);
    case wire::MsgType::Shutdown:
      LOG_INFO << "coordinator asked to shut down";
      shutdown_ = true;
      return;
    case wire::MsgType::Reply:
      s = wire::ReplyStatus(h);
      if (!s.ok()) LOG_WARN << "coordinator: " << s.ToString();
      return;
    default:
      LOG_WARN << "unexpected '" << wire::EnumNameMsgType(h->type()) << "' from the coordinator";
  }
}

namespace {
std::span<const double> StalenessBuckets() {
  static const double b[] = {0, 1, 2, 3, 4, 6, 8, 12, 16, 24, 32, 48, 64, 128, 256};
  return b;
}
}  // namespace

Server::Metrics::Metrics(metrics::Registry& r)
    : pushes(r.GetCounter("shardps_push_requests_total", "Push requests applied or buffered")),
      pulls(r.GetCounter("shardps_pull_requests_total", "Pull requests answered")),
      push_bytes(r.GetCounter("shardps_push_bytes_total", "Gradient bytes received in pushes")),
      pull_bytes(r.GetCounter("shardps_pull_bytes_total", "Parameter bytes sent in pull replies")),
      ticks(r.GetCounter("shardps_ticks_total", "Clock ticks received from workers")),
      errors(r.GetCounter("shardps_request_errors_total", "Requests answered with an error")),
      push_steps(r.GetCounter("shardps_push_steps_total",
                              "Optimizer steps applied from pushes (a push may carry several batches' gradients)")),
      dc_uncompensated(r.GetCounter("shardps_push_dc_uncompensated_total",
                                    "Steps of delay-compensated tables applied as they came: the values their "
                                    "gradient was computed on were no longer kept")),
      stale_unknown(r.GetCounter("shardps_push_staleness_unknown_total",
                                 "Push steps based on a pull from before this server (re)started: applied as fresh")),
      push_seconds(r.GetHistogram("shardps_push_duration_seconds",
                                  "Time from receiving a push to its reply (applying it, or buffering it under sync)",
                                  metrics::LatencyBuckets())),
      pull_seconds(r.GetHistogram("shardps_pull_duration_seconds",
                                  "Time from receiving a pull to its reply, waiting for slower workers included",
                                  metrics::LatencyBuckets())),
      wait_seconds(r.GetHistogram("shardps_consistency_wait_seconds",
                                  "Time pulls were held for slower workers (sync, bounded staleness)",
                                  metrics::LatencyBuckets())),
      staleness(r.GetHistogram("shardps_push_staleness",
                               "Per applied step of a worker's push (bounded staleness, async): updates its rows took "
                               "between the pull its gradient was computed on and the push",
                               StalenessBuckets())),
      parked(r.GetGauge("shardps_parked_pulls", "Pulls waiting for slower workers now")),
      buffered(r.GetGauge("shardps_buffered_pushes", "Synchronous pushes waiting for the end of their clock")),
      applied_clock(r.GetGauge("shardps_applied_clock", "Sync: clocks below this one are applied")),
      min_clock(r.GetGauge("shardps_min_clock", "Slowest live worker's clock as this server sees it")) {}

void Server::UpdateGauges() {
  m_.parked.Set(static_cast<double>(parked_.size()));
  size_t buffered = 0;
  for (const auto& [c, list] : buffered_) buffered += list.size();
  m_.buffered.Set(static_cast<double>(buffered));
  m_.applied_clock.Set(static_cast<double>(applied_clock_));
  m_.min_clock.Set(static_cast<double>(MinClock()));
  // A table's two series are created once (that takes the registry's lock,
  // which a scrape holds); afterwards only set.
  for (size_t i = table_gauges_.size(); i < tables_.size(); ++i) {
    if (!tables_[i]) break;
    const metrics::Labels labels{{"table", tables_[i]->spec().name}};
    table_gauges_.push_back(
        {&registry_.GetGauge("shardps_table_rows", "Rows of each table held by this server", labels),
         &registry_.GetGauge("shardps_table_bytes", "Bytes of parameters and optimizer state held by this server",
                             labels)});
  }
  for (size_t i = 0; i < table_gauges_.size(); ++i) {
    const ServerTable& t = *tables_[i];
    const uint64_t rows = t.rows_held();
    table_gauges_[i].first->Set(static_cast<double>(rows));
    table_gauges_[i].second->Set(static_cast<double>(rows) * t.spec().cols * sizeof(float) * (1 + t.state_width()));
  }
}

void Server::SendHeartbeat() {
  UpdateGauges();
  fbb_.Clear();
  // Who waits: per worker, the largest clock its held pulls need.
  std::map<int, int64_t> need;
  for (const auto& p : parked_) need[p.rank] = std::max(need.count(p.rank) ? need[p.rank] : INT64_MIN, p.need_clock);
  std::vector<wire::ParkedPull> parked;
  for (const auto& [rank, n] : need) parked.emplace_back(rank, n);
  auto waiting = fbb_.CreateVectorOfStructs(parked);
  auto clocks = fbb_.CreateVector(clocks_);
  wire::ServerStatsBuilder b(fbb_);
  b.add_pushes(m_.pushes.Value());
  b.add_pulls(m_.pulls.Value());
  b.add_push_bytes(m_.push_bytes.Value());
  b.add_pull_bytes(m_.pull_bytes.Value());
  b.add_applied_clock(applied_clock_);
  b.add_min_clock(MinClock());
  b.add_parked_pulls(static_cast<uint32_t>(parked_.size()));
  b.add_sent_ms(std::chrono::duration_cast<Millis>(Clock::now().time_since_epoch()).count());
  b.add_worker_clocks(clocks);
  b.add_waiting(waiting);
  auto body = b.Finish();
  wire::Fields f;
  f.type = wire::MsgType::Heartbeat;
  f.request_id = next_request_id_++;
  f.role = wire::Role::Server;
  f.rank = static_cast<int32_t>(rank_);
  coord_.send(wire::Encode(fbb_, f, wire::Body::ServerStats, body.Union()), zmq::send_flags::dontwait);
}

Status Server::Run(const std::atomic<bool>& stop) {
  std::vector<zmq::message_t> frames;
  auto next_hb = Clock::now();
  while (!shutdown_ && !stop.load()) {
    const auto now = Clock::now();
    if (now >= next_hb) {
      SendHeartbeat();
      next_hb = now + opts_.heartbeat_interval;
    }
    auto wait = std::min<Millis>(Millis(100), std::chrono::duration_cast<Millis>(next_hb - now));
    zmq::pollitem_t items[] = {{data_.handle(), 0, ZMQ_POLLIN, 0}, {coord_.handle(), 0, ZMQ_POLLIN, 0}};
    Poll(items, 2, cut_active_ ? Millis(0) : std::max(wait, Millis(1)));
    while (RecvMultipart(coord_, &frames)) HandleCoordinator(frames);  // cluster updates first
    // A request has at most 3 + kMaxPushSteps frames (identity, header, keys,
    // one values frame per step): more are dropped as they are read, and the
    // request refused.
    size_t dropped = 0;
    for (int i = 0; i < 256 && RecvMultipart(data_, &frames, true, 3 + kMaxPushSteps, &dropped); ++i) {
      if (dropped && frames.size() >= 2) {
        const wire::Header* h = nullptr;
        const uint64_t id = wire::ParseHeader(frames[1], header_scratch_, &h).ok() ? h->request_id() : 0;
        ReplyError(frames[0], id, Status::BadMessage("a request has at most " + std::to_string(2 + kMaxPushSteps) +
                                                     " frames (header, keys, a push's values per step), got " +
                                                     std::to_string(frames.size() - 1 + dropped)));
        continue;
      }
      HandleData(frames);
    }
    CopySomeOfCut(2.0);
    SendSnapshotReports();
    ExpireParked();
  }
  LOG_INFO << "server stopped";
  return fatal_;
}

}  // namespace shardps
