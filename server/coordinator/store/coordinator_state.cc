#include "server/coordinator/store/coordinator_state.h"
#include "server/coordinator/store/etcd_state.h"

#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "common/base/log.h"
#include "common/codec/wire.h"

namespace shardps {

namespace {

constexpr char kStateKey[] = "coordinator-state";

flatbuffers::Offset<wire::DurablePool> EncodePool(flatbuffers::FlatBufferBuilder& b, uint64_t id, const WorkPool& p) {
  std::vector<uint64_t> returned, last;
  for (const auto& [lo, hi] : p.returned) returned.insert(returned.end(), {lo, hi});
  for (const auto& [rank, g] : p.last) last.insert(last.end(), {rank, g.first, g.second});
  std::vector<flatbuffers::Offset<wire::DurableBlock>> blocks;
  for (const auto& [clock, blk] : p.blocks)
    blocks.push_back(wire::CreateDurableBlock(b, clock, blk.begin, blk.end, blk.per, b.CreateVector(blk.ranks),
                                              b.CreateVector(blk.taken)));
  return wire::CreateDurablePool(b, id, p.total, p.next, p.last_clock, b.CreateVector(returned), b.CreateVector(last),
                                 b.CreateVector(blocks), p.per_clock);
}

uint32_t MapStride(const DurableState& s) {
  size_t n = 0;
  for (const auto& r : s.map_replicas) n = std::max(n, r.size());
  return static_cast<uint32_t>(n);
}

std::vector<uint32_t> FlatReplicas(const DurableState& s) {
  const uint32_t stride = MapStride(s);
  std::vector<uint32_t> flat;
  for (const auto& r : s.map_replicas)
    for (uint32_t k = 0; k < stride; ++k) flat.push_back(k < r.size() ? r[k] : 0xffffffffu);
  return flat;
}

// A changed shard map: each group at most `stride` servers of the job
// (its own and those added to it).
Status DecodeMap(const wire::CoordinatorState* st, const StateShape& job, DurableState* out) {
  if (!st->map_replicas() || st->map_stride() == 0) return Status::OK();
  const uint32_t stride = st->map_stride();
  const uint32_t groups = job.Groups();
  const auto servers = std::max<uint32_t>(job.num_servers, static_cast<uint32_t>(out->servers.size()));
  if (stride > servers || st->map_replicas()->size() != static_cast<size_t>(stride) * groups)
    return Status::BadMessage("the saved shard map does not hold a replica list per group");
  out->map_version = st->map_version();
  out->map_replicas.assign(groups, {});
  for (uint32_t g = 0; g < groups; ++g)
    for (uint32_t k = 0; k < stride; ++k) {
      const uint32_t s = st->map_replicas()->Get(g * stride + k);
      if (s == 0xffffffffu) continue;
      if (s >= servers) return Status::BadMessage("the saved shard map names server " + std::to_string(s));
      out->map_replicas[g].push_back(s);
    }
  return Status::OK();
}

// The slots: servers (all or none) and workers.
Status DecodeSlots(const wire::CoordinatorState* st, const StateShape& job, DurableState* out) {
  if (st->servers()) {
    if (st->servers()->size() < job.num_servers || st->servers()->size() > 4096)
      return Status::BadMessage("the saved servers do not match the job");
    for (const auto* s : *st->servers())
      out->servers.push_back(
          {s->endpoint() ? s->endpoint()->str() : "", s->budget(), s->host() ? s->host()->str() : "", s->dead()});
  }
  if (st->workers()) {
    if (st->workers()->size() > job.worker_ranks) return Status::BadMessage("the saved state has more worker ranks");
    for (const auto* w : *st->workers()) {
      if (w->state() > static_cast<uint8_t>(WorkerState::kVacant))
        return Status::BadMessage("a saved worker state is unknown");
      out->workers.push_back({static_cast<WorkerState>(w->state()), w->host() ? w->host()->str() : "", w->pid()});
    }
  }
  return Status::OK();
}

Status DecodePool(const wire::DurablePool* dp, const StateShape& job, WorkPool* out) {
  WorkPool p;
  p.total = dp->total();
  p.next = dp->next();
  p.last_clock = dp->last_clock();
  p.per_clock = dp->per_clock();
  if (p.next > p.total) return Status::BadMessage("a saved work pool is past its end");
  // Every range a pool holds must lie in the pool: [begin, end) with
  // begin <= end <= total (they are handed out as they are).
  auto range_ok = [&](uint64_t b, uint64_t e) { return b <= e && e <= p.total; };
  if (const auto* ret = dp->returned()) {
    if (ret->size() % 2) return Status::BadMessage("a saved work pool's returned units are odd");
    for (uint32_t i = 0; i + 1 < ret->size(); i += 2) {
      if (!range_ok(ret->Get(i), ret->Get(i + 1)))
        return Status::BadMessage("a saved returned range is outside its pool");
      p.returned.emplace_back(ret->Get(i), ret->Get(i + 1));
    }
  }
  if (const auto* last = dp->last()) {
    if (last->size() % 3) return Status::BadMessage("a saved work pool's grants are not triples");
    for (uint32_t i = 0; i + 2 < last->size(); i += 3) {
      if (last->Get(i) >= job.worker_ranks || !range_ok(last->Get(i + 1), last->Get(i + 2)))
        return Status::BadMessage("a saved grant names an unknown worker or lies outside its pool");
      p.last[static_cast<uint32_t>(last->Get(i))] = {last->Get(i + 1), last->Get(i + 2)};
    }
  }
  if (dp->blocks())
    for (const auto* db : *dp->blocks()) {
      WorkPool::Block b;
      b.begin = db->begin();
      b.end = db->end();
      b.per = db->per();
      if (db->ranks()) b.ranks.assign(db->ranks()->begin(), db->ranks()->end());
      if (db->taken()) b.taken.assign(db->taken()->begin(), db->taken()->end());
      if (b.taken.size() != b.ranks.size() || b.per == 0 || !range_ok(b.begin, b.end) ||
          std::any_of(b.ranks.begin(), b.ranks.end(), [&](uint32_t r) { return r >= job.worker_ranks; }))
        return Status::BadMessage("a saved block is inconsistent");
      p.blocks.emplace(db->clock(), std::move(b));
    }
  *out = std::move(p);
  return Status::OK();
}

// The work pools, per-clock grants, positions at cut clocks and last claims.
Status DecodeWork(const wire::CoordinatorState* st, const StateShape& job, WorkPoolsData* out) {
  if (st->pools())
    for (const auto* dp : *st->pools()) {
      WorkPool p;
      SHARDPS_RETURN_IF_ERROR(DecodePool(dp, job, &p));
      out->pools.emplace(dp->id(), std::move(p));
    }
  if (st->grants())
    for (const auto* g : *st->grants()) {
      auto pool = out->pools.find(g->pool());
      if (g->rank() >= job.worker_ranks || pool == out->pools.end() || g->begin() > g->end() ||
          g->end() > pool->second.total)
        return Status::BadMessage("a saved per-clock grant names an unknown worker or pool, or lies outside it");
      out->clock_grants[g->rank()].push_back({g->pool(), g->clock(), g->begin(), g->end()});
    }
  if (const auto* at = st->work_at()) {
    if (at->size() % 3) return Status::BadMessage("the saved work positions are not triples");
    for (uint32_t i = 0; i + 2 < at->size(); i += 3)
      out->work_at[at->Get(i)] = {static_cast<uint64_t>(at->Get(i + 1)), static_cast<uint64_t>(at->Get(i + 2))};
  }
  if (const auto* c = st->claims()) {
    if (c->size() % 5) return Status::BadMessage("the saved claims are not 5-tuples");
    for (uint32_t i = 0; i + 4 < c->size(); i += 5) {
      if (c->Get(i) >= job.worker_ranks || c->Get(i + 3) > c->Get(i + 4))
        return Status::BadMessage("a saved claim names an unknown worker or an inverted range");
      out->last_claims[static_cast<uint32_t>(c->Get(i))] = {c->Get(i + 1), c->Get(i + 2), c->Get(i + 3), c->Get(i + 4)};
    }
  }
  out->resume = {st->resume_pool(), st->resume_position()};
  return Status::OK();
}

// The value's root, once it verifies and is format 1 of this job.
Status VerifiedRoot(std::string_view value, const StateShape& job, std::vector<uint64_t>* aligned,
                    const wire::CoordinatorState** out) {
  if (value.empty()) return Status::BadMessage("the saved state is empty");
  aligned->assign((value.size() + 7) / 8, 0);
  std::memcpy(aligned->data(), value.data(), value.size());
  const auto* buf = reinterpret_cast<const uint8_t*>(aligned->data());
  flatbuffers::Verifier v(buf, value.size());
  if (!v.VerifyBuffer<wire::CoordinatorState>(nullptr)) return Status::BadMessage("the saved state is corrupt");
  const auto* st = flatbuffers::GetRoot<wire::CoordinatorState>(buf);
  if (st->format() != 1)
    return Status::VersionMismatch("the saved state has format " + std::to_string(st->format()) + ", this build reads 1");
  if (st->num_servers() != job.num_servers || st->num_workers() != job.num_workers)
    return Status::Conflict("the saved job has " + std::to_string(st->num_servers()) + " servers and " +
                            std::to_string(st->num_workers()) + " workers, this one " +
                            std::to_string(job.num_servers) + " and " + std::to_string(job.num_workers) +
                            " (a --state-dir holds one job: give a new one to start another)");
  const uint32_t saved_groups = st->num_groups() ? st->num_groups() : st->num_servers();
  if (saved_groups != job.Groups())
    return Status::Conflict("the saved job has " + std::to_string(saved_groups) + " replica groups, this one " +
                            std::to_string(job.Groups()) +
                            " (a --state-dir holds one job: give a new one to start another)");
  if (st->partitions() < saved_groups || st->partitions() > (1u << 20))
    return Status::BadMessage("the saved state has " + std::to_string(st->partitions()) + " partitions");
  *out = st;
  return Status::OK();
}

}  // namespace

std::string EncodeState(const DurableState& s) {
  flatbuffers::FlatBufferBuilder b(4096);
  std::vector<flatbuffers::Offset<wire::TableSpec>> tables;
  for (const auto& t : s.tables) tables.push_back(wire::BuildTableSpec(b, t));
  std::vector<flatbuffers::Offset<wire::DurableServer>> servers;
  for (const auto& srv : s.servers)
    servers.push_back(
        wire::CreateDurableServer(b, b.CreateString(srv.endpoint), srv.budget, b.CreateString(srv.host), srv.dead));
  std::vector<flatbuffers::Offset<wire::DurableWorker>> workers;
  for (const auto& w : s.workers)
    workers.push_back(wire::CreateDurableWorker(b, static_cast<uint8_t>(w.state), b.CreateString(w.host), w.pid));
  std::vector<flatbuffers::Offset<wire::DurablePool>> pools;
  for (const auto& [id, p] : s.work.pools) pools.push_back(EncodePool(b, id, p));
  std::vector<flatbuffers::Offset<wire::DurableGrant>> grants;
  for (const auto& [rank, list] : s.work.clock_grants)
    for (const auto& g : list) grants.push_back(wire::CreateDurableGrant(b, rank, g.pool, g.clock, g.begin, g.end));
  std::vector<int64_t> work_at;
  for (const auto& [clock, w] : s.work.work_at)
    work_at.insert(work_at.end(), {clock, static_cast<int64_t>(w.pool), static_cast<int64_t>(w.position)});
  std::vector<uint64_t> claims;
  for (const auto& [rank, c] : s.work.last_claims) claims.insert(claims.end(), {rank, c.seq, c.pool, c.begin, c.end});
  auto root = wire::CreateCoordinatorState(
      b, 1, s.num_servers, s.num_workers, s.partitions, b.CreateVector(tables), b.CreateVector(servers),
      b.CreateVector(workers), b.CreateVector(pools), b.CreateVector(grants), b.CreateVector(work_at),
      b.CreateString(s.restore_dir), s.clock_base, s.work.resume.pool, s.work.resume.position,
      b.CreateString(s.latest_snapshot_dir), s.latest_snapshot_clock, s.snapshots_taken, s.next_update_id,
      s.membership_version, s.stopping, b.CreateVector(claims), s.map_version, MapStride(s),
      b.CreateVector(FlatReplicas(s)), s.groups == s.num_servers ? 0 : s.groups);
  b.Finish(root);
  return std::string(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize());
}

Status DecodeState(std::string_view value, const StateShape& job, DurableState* out) {
  std::vector<uint64_t> aligned;
  const wire::CoordinatorState* st = nullptr;
  SHARDPS_RETURN_IF_ERROR(VerifiedRoot(value, job, &aligned, &st));
  DurableState d;
  d.num_servers = st->num_servers();
  d.num_workers = st->num_workers();
  d.groups = st->num_groups() ? st->num_groups() : st->num_servers();
  d.partitions = st->partitions();
  if (st->tables())
    for (const auto* t : *st->tables()) {
      TableSpec spec;
      SHARDPS_RETURN_IF_ERROR(wire::DecodeTableSpec(t, &spec));
      if (spec.id != d.tables.size()) return Status::BadMessage("the saved table ids are not dense");
      d.tables.push_back(spec);
    }
  SHARDPS_RETURN_IF_ERROR(DecodeSlots(st, job, &d));
  SHARDPS_RETURN_IF_ERROR(DecodeWork(st, job, &d.work));
  d.restore_dir = st->restore_dir() ? st->restore_dir()->str() : "";
  constexpr int64_t kClockLimit = int64_t{1} << 60;  // labels are base + clock: far from overflowing
  if (st->clock_base() < 0 || st->clock_base() > kClockLimit || st->latest_snapshot_clock() > kClockLimit)
    return Status::BadMessage("the saved clocks are out of range");
  d.clock_base = st->clock_base();
  d.latest_snapshot_dir = st->latest_snapshot_dir() ? st->latest_snapshot_dir()->str() : "";
  d.latest_snapshot_clock = st->latest_snapshot_clock();
  d.snapshots_taken = st->snapshots_taken();
  d.next_update_id = st->next_update_id();
  d.membership_version = st->membership_version();
  d.stopping = st->stopping();
  SHARDPS_RETURN_IF_ERROR(DecodeMap(st, job, &d));
  *out = std::move(d);
  return Status::OK();
}

StateStore::~StateStore() = default;

Status StateStore::Open(const std::string& where, std::unique_ptr<StateStore>* out, const StoreWait& wait) {
  if (where.rfind("etcd://", 0) == 0) return EtcdStateStore::Open(where, out, wait);
  return LocalStateStore::Open(where, out);
}

LocalStateStore::LocalStateStore() = default;
LocalStateStore::~LocalStateStore() = default;

Status LocalStateStore::Open(const std::string& dir, std::unique_ptr<StateStore>* out) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Status::InvalidArgument("--state-dir '" + dir + "': " + ec.message());
  std::unique_ptr<LocalStateStore> store(new LocalStateStore);
  store->path_ = dir + "/coordinator.db";
  rocksdb::Options o;
  o.create_if_missing = true;
  o.max_open_files = 16;
  o.keep_log_file_num = 2;
  // One small value: RocksDB's statistics threads would only add work (and
  // write to its LOG every few minutes).
  o.stats_dump_period_sec = 0;
  o.stats_persist_period_sec = 0;
  rocksdb::DB* db = nullptr;
  rocksdb::Status rs = rocksdb::DB::Open(o, store->path_, &db);
  if (!rs.ok())
    return Status::InvalidArgument("cannot open the coordinator's state database " + store->path_ + ": " +
                                   rs.ToString() + " (is another coordinator using this --state-dir?)");
  store->db_.reset(db);
  *out = std::move(store);
  return Status::OK();
}

Status LocalStateStore::Load(const StateShape& job, DurableState* out, bool* found) {
  *found = false;
  std::string value;
  rocksdb::Status rs = db_->Get(rocksdb::ReadOptions(), kStateKey, &value);
  if (rs.IsNotFound()) return Status::OK();
  if (!rs.ok()) return Status::Internal("reading " + path_ + ": " + rs.ToString());
  Status s = DecodeState(value, job, out);
  if (!s.ok()) return Status(s.code(), path_ + ": " + s.message());
  *found = true;
  return Status::OK();
}

bool LocalStateStore::Save(const DurableState& s) {
  const std::string value = EncodeState(s);
  rocksdb::WriteOptions wo;  // the WAL, not fsync: a killed coordinator loses nothing, a crashed machine may lose the last change
  rocksdb::Status rs = db_->Put(wo, kStateKey, value);
  if (!rs.ok()) {
    LOG_ERROR << "cannot save the coordinator's state in " << path_ << ": " << rs.ToString();
    return false;
  }
  return true;
}

void LocalStateStore::Forget() {
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status rs = db_->Delete(wo, kStateKey);
  if (!rs.ok()) LOG_WARN << "cannot clear the finished job's state in " << path_ << ": " << rs.ToString();
}

}  // namespace shardps
