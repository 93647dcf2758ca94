// The coordinator's durable state (docs/fault-tolerance.md, "The
// coordinator"): membership, tables, work pools, snapshot history — one
// FlatBuffers value (schema/shardps.fbs, CoordinatorState) in a RocksDB
// database under --state-dir, rewritten after every message that changed
// it and before its replies leave (Coordinator::Commit). A coordinator
// started on a directory holding a state resumes that job: the servers it
// knew are taken back on their first heartbeat, live workers go on.
#include <rocksdb/db.h>
#include <rocksdb/options.h>

#include <algorithm>
#include <cstring>
#include <filesystem>

#include "common/log.h"
#include "common/wire.h"
#include "server/coordinator.h"

namespace shardps {

namespace {
constexpr char kStateKey[] = "coordinator-state";
}  // namespace

struct Coordinator::StateStore {
  std::unique_ptr<rocksdb::DB> db;
  std::string path;
};

Status Coordinator::OpenState(bool* resumed) {
  *resumed = false;
  std::error_code ec;
  std::filesystem::create_directories(opts_.state_dir, ec);
  if (ec) return Status::InvalidArgument("--state-dir '" + opts_.state_dir + "': " + ec.message());
  std::unique_ptr<StateStore, StateStoreDeleter> store(new StateStore);
  store->path = opts_.state_dir + "/coordinator.db";
  rocksdb::Options o;
  o.create_if_missing = true;
  o.max_open_files = 16;
  o.keep_log_file_num = 2;
  // One small value: RocksDB's statistics threads would only add work (and
  // write to its LOG every few minutes).
  o.stats_dump_period_sec = 0;
  o.stats_persist_period_sec = 0;
  rocksdb::DB* db = nullptr;
  rocksdb::Status rs = rocksdb::DB::Open(o, store->path, &db);
  if (!rs.ok())
    return Status::InvalidArgument("cannot open the coordinator's state database " + store->path + ": " +
                                   rs.ToString() + " (is another coordinator using this --state-dir?)");
  store->db.reset(db);
  std::string value;
  rs = store->db->Get(rocksdb::ReadOptions(), kStateKey, &value);
  state_ = std::move(store);
  if (rs.IsNotFound()) return Status::OK();
  if (!rs.ok()) return Status::Internal("reading " + state_->path + ": " + rs.ToString());
  Status s = LoadState(value);
  if (!s.ok()) return Status(s.code(), state_->path + ": " + s.message());
  *resumed = true;
  return Status::OK();
}

Status Coordinator::LoadState(const std::string& value) {
  if (value.empty()) return Status::BadMessage("the saved state is empty");
  std::vector<uint64_t> aligned((value.size() + 7) / 8);
  std::memcpy(aligned.data(), value.data(), value.size());
  const auto* buf = reinterpret_cast<const uint8_t*>(aligned.data());
  flatbuffers::Verifier v(buf, value.size());
  if (!v.VerifyBuffer<wire::CoordinatorState>(nullptr)) return Status::BadMessage("the saved state is corrupt");
  const auto* st = flatbuffers::GetRoot<wire::CoordinatorState>(buf);
  if (st->format() != 1)
    return Status::VersionMismatch("the saved state has format " + std::to_string(st->format()) + ", this build reads 1");
  if (st->num_servers() != opts_.num_servers || st->num_workers() != opts_.num_workers)
    return Status::Conflict("the saved job has " + std::to_string(st->num_servers()) + " servers and " +
                            std::to_string(st->num_workers()) + " workers, this one " +
                            std::to_string(opts_.num_servers) + " and " + std::to_string(opts_.num_workers) +
                            " (a --state-dir holds one job: give a new one to start another)");
  if (st->partitions() < opts_.num_servers || st->partitions() > (1u << 20))
    return Status::BadMessage("the saved state has " + std::to_string(st->partitions()) + " partitions");
  opts_.partitions = st->partitions();
  std::vector<TableSpec> tables;
  if (st->tables())
    for (const auto* t : *st->tables()) {
      TableSpec spec;
      SHARDPS_RETURN_IF_ERROR(wire::DecodeTableSpec(t, &spec));
      if (spec.id != tables.size()) return Status::BadMessage("the saved table ids are not dense");
      tables.push_back(spec);
    }
  tables_ = std::move(tables);
  if (st->servers()) {
    if (st->servers()->size() != servers_.size()) return Status::BadMessage("the saved servers do not match the job");
    for (uint32_t r = 0; r < servers_.size(); ++r) {
      const auto* s = st->servers()->Get(r);
      servers_[r].endpoint = s->endpoint() ? s->endpoint()->str() : "";
      servers_[r].budget = s->budget();
      servers_[r].id.host = s->host() ? s->host()->str() : "";
    }
  }
  const auto now = Clock::now();
  if (st->workers()) {
    if (st->workers()->size() > workers_.size()) return Status::BadMessage("the saved state has more worker ranks");
    for (uint32_t r = 0; r < st->workers()->size(); ++r) {
      const auto* w = st->workers()->Get(r);
      if (w->state() > static_cast<uint8_t>(WorkerState::kVacant)) return Status::BadMessage("a saved worker state is unknown");
      workers_[r].state = static_cast<WorkerState>(w->state());
      workers_[r].id.host = w->host() ? w->host()->str() : "";
      workers_[r].id.pid = w->pid();
      workers_[r].last_seen = now;  // a live one has a heartbeat deadline to show up in
    }
  }
  work_pools_.clear();
  if (st->pools())
    for (const auto* dp : *st->pools()) {
      WorkPool p;
      p.total = dp->total();
      p.next = dp->next();
      p.last_clock = dp->last_clock();
      if (p.next > p.total) return Status::BadMessage("a saved work pool is past its end");
      // Every range a pool holds must lie in the pool: [begin, end) with
      // begin <= end <= total (they are handed out as they are).
      auto range_ok = [&](uint64_t b, uint64_t e) { return b <= e && e <= p.total; };
      if (dp->returned()) {
        if (dp->returned()->size() % 2) return Status::BadMessage("a saved work pool's returned units are odd");
        for (uint32_t i = 0; i + 1 < dp->returned()->size(); i += 2) {
          if (!range_ok(dp->returned()->Get(i), dp->returned()->Get(i + 1)))
            return Status::BadMessage("a saved returned range is outside its pool");
          p.returned.emplace_back(dp->returned()->Get(i), dp->returned()->Get(i + 1));
        }
      }
      if (dp->last()) {
        if (dp->last()->size() % 3) return Status::BadMessage("a saved work pool's grants are not triples");
        for (uint32_t i = 0; i + 2 < dp->last()->size(); i += 3) {
          if (dp->last()->Get(i) >= workers_.size() || !range_ok(dp->last()->Get(i + 1), dp->last()->Get(i + 2)))
            return Status::BadMessage("a saved grant names an unknown worker or lies outside its pool");
          p.last[static_cast<uint32_t>(dp->last()->Get(i))] = {dp->last()->Get(i + 1), dp->last()->Get(i + 2)};
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
              std::any_of(b.ranks.begin(), b.ranks.end(), [&](uint32_t r) { return r >= workers_.size(); }))
            return Status::BadMessage("a saved block is inconsistent");
          p.blocks.emplace(db->clock(), std::move(b));
        }
      work_pools_.emplace(dp->id(), std::move(p));
    }
  clock_grants_.clear();
  if (st->grants())
    for (const auto* g : *st->grants()) {
      auto pool = work_pools_.find(g->pool());
      if (g->rank() >= workers_.size() || pool == work_pools_.end() || g->begin() > g->end() ||
          g->end() > pool->second.total)
        return Status::BadMessage("a saved per-clock grant names an unknown worker or pool, or lies outside it");
      clock_grants_[g->rank()].push_back({g->pool(), g->clock(), g->begin(), g->end()});
    }
  work_at_.clear();
  if (st->work_at()) {
    if (st->work_at()->size() % 3) return Status::BadMessage("the saved work positions are not triples");
    for (uint32_t i = 0; i + 2 < st->work_at()->size(); i += 3)
      work_at_[st->work_at()->Get(i)] = {static_cast<uint64_t>(st->work_at()->Get(i + 1)),
                                         static_cast<uint64_t>(st->work_at()->Get(i + 2))};
  }
  last_claims_.clear();
  if (st->claims()) {
    if (st->claims()->size() % 5) return Status::BadMessage("the saved claims are not 5-tuples");
    for (uint32_t i = 0; i + 4 < st->claims()->size(); i += 5) {
      if (st->claims()->Get(i) >= workers_.size() || st->claims()->Get(i + 3) > st->claims()->Get(i + 4))
        return Status::BadMessage("a saved claim names an unknown worker or an inverted range");
      last_claims_[static_cast<uint32_t>(st->claims()->Get(i))] = {st->claims()->Get(i + 1), st->claims()->Get(i + 2),
                                                                   st->claims()->Get(i + 3), st->claims()->Get(i + 4)};
    }
  }
  restore_dir_ = st->restore_dir() ? st->restore_dir()->str() : "";
  constexpr int64_t kClockLimit = int64_t{1} << 60;  // labels are base + clock: far from overflowing
  if (st->clock_base() < 0 || st->clock_base() > kClockLimit || st->latest_snapshot_clock() > kClockLimit)
    return Status::BadMessage("the saved clocks are out of range");
  clock_base_ = st->clock_base();
  resume_pool_ = st->resume_pool();
  resume_position_ = st->resume_position();
  latest_snapshot_dir_ = st->latest_snapshot_dir() ? st->latest_snapshot_dir()->str() : "";
  latest_snapshot_clock_ = st->latest_snapshot_clock();
  snapshots_taken_ = st->snapshots_taken();
  next_update_id_ = std::max<uint64_t>(next_update_id_, st->next_update_id());
  membership_version_ = std::max<uint64_t>(membership_version_, st->membership_version()) + 1;
  stopping_ = st->stopping();
  return Status::OK();
}

bool Coordinator::SaveState() {
  flatbuffers::FlatBufferBuilder b(4096);
  std::vector<flatbuffers::Offset<wire::TableSpec>> tables;
  for (const auto& t : tables_) tables.push_back(wire::BuildTableSpec(b, t));
  std::vector<flatbuffers::Offset<wire::DurableServer>> servers;
  for (const auto& s : servers_)
    servers.push_back(wire::CreateDurableServer(b, b.CreateString(s.endpoint), s.budget, b.CreateString(s.id.host)));
  std::vector<flatbuffers::Offset<wire::DurableWorker>> workers;
  for (const auto& w : workers_)
    workers.push_back(wire::CreateDurableWorker(b, static_cast<uint8_t>(w.state), b.CreateString(w.id.host), w.id.pid));
  std::vector<flatbuffers::Offset<wire::DurablePool>> pools;
  for (const auto& [id, p] : work_pools_) {
    std::vector<uint64_t> returned, last;
    for (const auto& [lo, hi] : p.returned) returned.insert(returned.end(), {lo, hi});
    for (const auto& [rank, g] : p.last) last.insert(last.end(), {rank, g.first, g.second});
    std::vector<flatbuffers::Offset<wire::DurableBlock>> blocks;
    for (const auto& [clock, blk] : p.blocks)
      blocks.push_back(wire::CreateDurableBlock(b, clock, blk.begin, blk.end, blk.per, b.CreateVector(blk.ranks),
                                                b.CreateVector(blk.taken)));
    pools.push_back(wire::CreateDurablePool(b, id, p.total, p.next, p.last_clock, b.CreateVector(returned),
                                            b.CreateVector(last), b.CreateVector(blocks)));
  }
  std::vector<flatbuffers::Offset<wire::DurableGrant>> grants;
  for (const auto& [rank, list] : clock_grants_)
    for (const auto& g : list) grants.push_back(wire::CreateDurableGrant(b, rank, g.pool, g.clock, g.begin, g.end));
  std::vector<int64_t> work_at;
  for (const auto& [clock, w] : work_at_)
    work_at.insert(work_at.end(), {clock, static_cast<int64_t>(w.first), static_cast<int64_t>(w.second)});
  std::vector<uint64_t> claims;
  for (const auto& [rank, c] : last_claims_) claims.insert(claims.end(), {rank, c.seq, c.pool, c.begin, c.end});
  auto root = wire::CreateCoordinatorState(
      b, 1, opts_.num_servers, opts_.num_workers, opts_.partitions, b.CreateVector(tables), b.CreateVector(servers),
      b.CreateVector(workers), b.CreateVector(pools), b.CreateVector(grants), b.CreateVector(work_at),
      b.CreateString(restore_dir_), clock_base_, resume_pool_, resume_position_, b.CreateString(latest_snapshot_dir_),
      latest_snapshot_clock_, snapshots_taken_, next_update_id_, membership_version_, stopping_,
      b.CreateVector(claims));
  b.Finish(root);
  rocksdb::WriteOptions wo;  // the WAL, not fsync: a killed coordinator loses nothing, a crashed machine may lose the last change
  rocksdb::Status rs = state_->db->Put(
      wo, kStateKey, rocksdb::Slice(reinterpret_cast<const char*>(b.GetBufferPointer()), b.GetSize()));
  if (!rs.ok()) {
    LOG_ERROR << "cannot save the coordinator's state in " << state_->path << ": " << rs.ToString();
    return false;
  }
  return true;
}

void Coordinator::ForgetState() {
  if (!state_) return;
  rocksdb::WriteOptions wo;
  wo.sync = true;
  rocksdb::Status rs = state_->db->Delete(wo, kStateKey);
  if (!rs.ok()) LOG_WARN << "cannot clear the finished job's state in " << state_->path << ": " << rs.ToString();
}

void Coordinator::StateStoreDeleter::operator()(StateStore* s) const { delete s; }

void Coordinator::Commit() {
  if (state_ && shutdown_) {
    ForgetState();  // the job ended: nothing to resume (cleared before the Shutdown messages leave)
  } else if (state_ && dirty_ && !SaveState() && !shutdown_) {
    // Its replies would promise what a restarted coordinator forgets: they
    // are dropped, and the job stops, saying why.
    outbox_.clear();
    fatal_ = Status::Internal("cannot save the coordinator's state in " + opts_.state_dir + ": the job stops");
    ShutdownJob();
    ForgetState();
  }
  dirty_ = false;
  for (auto& frames : outbox_) {
    Status s = SendMultipart(sock_, frames);
    if (!s.ok()) LOG_WARN << "reply dropped: " << s.ToString();
  }
  outbox_.clear();
}

}  // namespace shardps
