#include "common/codec/wire.h"

#include <cstring>

namespace shardps::wire {

namespace {
// FlatBuffers 2.0's verifier checks that a vector's length field is 4-byte
// aligned but not that its elements are aligned for their type: in a
// crafted message a vector of 8-byte scalars or structs can sit at 4 mod 8
// and every accessor then loads misaligned. Our builder always aligns them;
// these are the header's only such vectors (keep this list in step with
// schema/shardps.fbs). An empty vector has nothing to misread (and the
// builder does not align one: its data may sit at 4 mod 8).
template <typename V>
bool Aligned8(const V* v) {
  return !v || v->size() == 0 || reinterpret_cast<uintptr_t>(v->Data()) % 8 == 0;
}
bool ElementsAligned(const Header* h) {
  if (!Aligned8(h->base_versions())) return false;
  if (const auto* st = h->body_as_ServerStats()) return Aligned8(st->worker_clocks()) && Aligned8(st->waiting());
  if (const auto* js = h->body_as_JobStatus()) return Aligned8(js->waits());
  return true;
}
}  // namespace

Status VerifyHeader(const void* data, size_t size, const Header** out) {
  if (size == 0) return Status::BadMessage("empty header frame");
  if (size > kMaxHeaderBytes)
    return Status::TooLarge("header frame of " + std::to_string(size) + " bytes (limit " +
                            std::to_string(kMaxHeaderBytes) + ")");
  // FlatBuffers reads scalars as aligned loads, and its verifier checks
  // alignment only relative to the buffer's start: an unaligned buffer
  // would verify and then be read misaligned. ParseHeader realigns frames;
  // anything else must pass aligned data.
  if (reinterpret_cast<uintptr_t>(data) % 8 != 0)
    return Status::BadMessage("header frame is not 8-byte aligned in memory (ParseHeader realigns it)");
  flatbuffers::Verifier::Options opts;
  opts.max_depth = 16;
  opts.max_tables = 100000;
  opts.check_alignment = true;
  flatbuffers::Verifier v(static_cast<const uint8_t*>(data), size, opts);
  if (!v.VerifyBuffer<Header>(nullptr))
    return Status::BadMessage("header frame of " + std::to_string(size) +
                              " bytes is not a valid shardps header");
  const Header* h = GetHeader(data);
  if (!ElementsAligned(h))
    return Status::BadMessage("header frame of " + std::to_string(size) +
                              " bytes has a vector of 8-byte elements at a misaligned offset");
  if (h->version() != kProtocolVersion)
    return Status::VersionMismatch("peer speaks protocol version " +
                                   std::to_string(h->version()) + ", this build speaks " +
                                   std::to_string(kProtocolVersion));
  if (h->type() > MsgType::MAX)
    return Status::BadMessage("unknown message type " + std::to_string(int(h->type())));
  *out = h;
  return Status::OK();
}

Status ParseHeader(const zmq::message_t& frame, std::vector<uint64_t>& scratch,
                   const Header** out) {
  const void* data = frame.data();
  if (reinterpret_cast<uintptr_t>(data) % 8 != 0) {
    if (frame.size() > kMaxHeaderBytes) return VerifyHeader(data, frame.size(), out);
    scratch.resize((frame.size() + 7) / 8);
    std::memcpy(scratch.data(), data, frame.size());
    data = scratch.data();
  }
  return VerifyHeader(data, frame.size(), out);
}

zmq::message_t Encode(flatbuffers::FlatBufferBuilder& fbb, const Fields& f, Body body_type,
                      flatbuffers::Offset<void> body) {
  flatbuffers::Offset<flatbuffers::String> msg;
  if (!f.message.empty()) msg = fbb.CreateString(f.message.data(), f.message.size());
  flatbuffers::Offset<flatbuffers::Vector<uint64_t>> bases;
  if (!f.base_versions.empty()) bases = fbb.CreateVector(f.base_versions.data(), f.base_versions.size());
  HeaderBuilder b(fbb);
  b.add_version(kProtocolVersion);
  b.add_type(f.type);
  b.add_request_id(f.request_id);
  b.add_role(f.role);
  b.add_rank(f.rank);
  b.add_table(f.table);
  b.add_clock(f.clock);
  b.add_seq(f.seq);
  b.add_map_version(f.map_version);
  b.add_key_count(f.key_count);
  b.add_row_begin(f.row_begin);
  b.add_row_end(f.row_end);
  b.add_error(f.error);
  if (!f.message.empty()) b.add_message(msg);
  b.add_min_clock(f.min_clock);
  b.add_max_clock(f.max_clock);
  if (f.stopping) b.add_stopping(true);
  if (f.steps > 1) b.add_steps(f.steps);
  if (!f.base_versions.empty()) b.add_base_versions(bases);
  if (f.table_version) b.add_table_version(f.table_version);
  if (f.staleness) b.add_staleness(f.staleness);
  if (f.idle) b.add_idle(true);
  if (f.values.assign) b.add_assign(true);
  if (f.group >= 0) b.add_group(f.group);
  if (f.values.dtype != DType::F32) b.add_dtype(f.values.dtype);
  if (f.values.compress != Compression::None) b.add_compress(f.values.compress);
  if (f.fseq) b.add_fseq(f.fseq);
  if (f.rep != RepKind::Request) b.add_rep(f.rep);
  if (body_type != Body::NONE) {
    b.add_body_type(body_type);
    b.add_body(body);
  }
  fbb.Finish(b.Finish());
  return zmq::message_t(fbb.GetBufferPointer(), fbb.GetSize());
}

zmq::message_t EncodeSimple(flatbuffers::FlatBufferBuilder& fbb, const Fields& f) {
  fbb.Clear();
  return Encode(fbb, f);
}

ErrorCode ToWire(Code c) { return static_cast<ErrorCode>(static_cast<uint16_t>(c)); }

zmq::message_t EncodeError(flatbuffers::FlatBufferBuilder& fbb, uint64_t request_id,
                           const Status& s) {
  Fields f;
  f.type = MsgType::Reply;
  f.request_id = request_id;
  f.error = ToWire(s.code());
  f.message = s.message();
  return EncodeSimple(fbb, f);
}

Status ReplyStatus(const Header* h) {
  if (h->error() == ErrorCode::OK) return Status::OK();
  auto code = static_cast<uint16_t>(h->error());
  std::string msg = h->message() ? h->message()->str() : std::string("(no message)");
  if (code > static_cast<uint16_t>(ErrorCode::MAX))
    return Status::Internal("peer sent unknown error code " + std::to_string(code) + ": " + msg);
  return Status(static_cast<Code>(code), std::move(msg));
}

flatbuffers::Offset<wire::TableSpec> BuildTableSpec(flatbuffers::FlatBufferBuilder& fbb,
                                                    const shardps::TableSpec& t) {
  auto name = fbb.CreateString(t.name);
  wire::TableSpecBuilder b(fbb);
  b.add_id(t.id);
  b.add_name(name);
  b.add_kind(static_cast<wire::TableKind>(t.kind));
  b.add_rows(t.rows);
  b.add_cols(t.cols);
  b.add_init(static_cast<wire::InitKind>(t.init));
  b.add_init_a(t.init_a);
  b.add_init_b(t.init_b);
  b.add_seed(t.seed);
  b.add_optimizer(static_cast<wire::OptimizerKind>(t.optimizer));
  b.add_lr(t.lr);
  b.add_momentum(t.momentum);
  b.add_beta1(t.beta1);
  b.add_beta2(t.beta2);
  b.add_eps(t.eps);
  b.add_initial_accumulator(t.initial_accumulator);
  b.add_max_rows(t.max_rows);
  b.add_staleness_rule(static_cast<wire::StalenessRule>(t.staleness_rule));
  b.add_dc_lambda(t.dc_lambda);
  b.add_dtype(static_cast<wire::DType>(t.dtype));
  b.add_admit_after(t.admit_after);
  b.add_evict_after_clocks(t.evict_after_clocks);
  b.add_evict_after_sec(t.evict_after_sec);
  b.add_wire_dtype(static_cast<wire::DType>(t.wire.dtype));
  b.add_compress(static_cast<wire::Compression>(t.wire.compress));
  b.add_topk_fraction(t.wire.topk_fraction);
  b.add_cold_tier(t.cold_tier);
  return b.Finish();
}

Status DecodeTableSpec(const wire::TableSpec* in, shardps::TableSpec* out) {
  if (!in) return Status::BadMessage("missing table spec");
  if (in->kind() > wire::TableKind::MAX || in->init() > wire::InitKind::MAX ||
      in->optimizer() > wire::OptimizerKind::MAX || in->staleness_rule() > wire::StalenessRule::MAX ||
      in->dtype() > wire::DType::MAX || in->wire_dtype() > wire::DType::MAX ||
      in->compress() > wire::Compression::MAX)
    return Status::BadMessage("table spec with an unknown kind, initializer, optimizer, staleness rule or dtype");
  shardps::TableSpec t;
  t.id = in->id();
  t.name = in->name() ? in->name()->str() : "";
  t.kind = static_cast<shardps::TableKind>(in->kind());
  t.rows = in->rows();
  t.cols = in->cols();
  t.init = static_cast<shardps::InitKind>(in->init());
  t.init_a = in->init_a();
  t.init_b = in->init_b();
  t.seed = in->seed();
  t.optimizer = static_cast<shardps::OptimizerKind>(in->optimizer());
  t.lr = in->lr();
  t.momentum = in->momentum();
  t.beta1 = in->beta1();
  t.beta2 = in->beta2();
  t.eps = in->eps();
  t.initial_accumulator = in->initial_accumulator();
  t.max_rows = in->max_rows();
  t.staleness_rule = static_cast<shardps::StalenessRule>(in->staleness_rule());
  t.dc_lambda = in->dc_lambda();
  t.dtype = static_cast<shardps::DType>(in->dtype());
  t.admit_after = in->admit_after();
  t.evict_after_clocks = in->evict_after_clocks();
  t.evict_after_sec = in->evict_after_sec();
  t.wire.dtype = static_cast<shardps::DType>(in->wire_dtype());
  t.wire.compress = static_cast<shardps::Compression>(in->compress());
  t.wire.topk_fraction = in->topk_fraction();
  t.cold_tier = in->cold_tier();
  Status s = t.Validate();
  if (!s.ok()) return Status::BadMessage("invalid table spec: " + s.message());
  *out = std::move(t);
  return Status::OK();
}

flatbuffers::Offset<ClusterInfo> BuildCluster(flatbuffers::FlatBufferBuilder& fbb,
                                              const ClusterView& c) {
  auto owner = fbb.CreateVector(c.map.owner);
  std::vector<flatbuffers::Offset<ServerInfo>> servers;
  for (uint32_t r = 0; r < c.servers.size(); ++r)
    servers.push_back(CreateServerInfo(fbb, r, fbb.CreateString(c.servers[r])));
  auto sv = fbb.CreateVector(servers);
  std::vector<flatbuffers::Offset<wire::TableSpec>> tables;
  for (const auto& t : c.tables) tables.push_back(BuildTableSpec(fbb, t));
  auto tv = fbb.CreateVector(tables);
  auto live = fbb.CreateVector(c.live_workers);
  auto snap_root = fbb.CreateString(c.snapshot_root);
  auto restore = fbb.CreateString(c.restore_from);
  // Replica groups: only where there is more than the contiguous blocks.
  const uint32_t copies = c.map.ReplicaStride();
  flatbuffers::Offset<flatbuffers::Vector<uint32_t>> groups, group_replicas, dead;
  if (!c.map.group.empty()) {
    groups = fbb.CreateVector(c.map.group);
    std::vector<uint32_t> flat;
    for (const auto& r : c.map.replicas)
      for (uint32_t k = 0; k < copies; ++k) flat.push_back(k < r.size() ? r[k] : ShardMap::kNone);
    group_replicas = fbb.CreateVector(flat);
  }
  if (!c.dead_servers.empty()) dead = fbb.CreateVector(c.dead_servers);
  flatbuffers::Offset<flatbuffers::Vector<uint32_t>> retiring;
  flatbuffers::Offset<flatbuffers::Vector<const wire::WorkerFinal*>> retired;
  if (!c.retiring.empty()) retiring = fbb.CreateVector(c.retiring);
  if (!c.retired.empty()) retired = BuildFinals(fbb, c.retired);
  flatbuffers::Offset<flatbuffers::Vector<uint32_t>> joining;
  if (!c.map.joining.empty()) joining = fbb.CreateVector(c.map.joining);
  ClusterInfoBuilder b(fbb);
  b.add_consistency(static_cast<wire::Consistency>(c.consistency));
  b.add_staleness(c.staleness);
  b.add_num_servers(c.num_servers);
  b.add_num_workers(c.num_workers);
  b.add_partitions(c.map.partitions());
  b.add_map_version(c.map.version);
  b.add_partition_owner(owner);
  b.add_servers(sv);
  b.add_tables(tv);
  b.add_membership_version(c.membership_version);
  b.add_live_workers(live);
  b.add_snapshot_root(snap_root);
  b.add_snapshot_every_clocks(c.snapshot_every_clocks);
  b.add_snapshot_full_every(c.snapshot_full_every);
  b.add_restore_from(restore);
  b.add_snapshot_clock_base(c.snapshot_clock_base);
  b.add_max_workers(c.max_workers);
  if (!c.map.group.empty()) {
    b.add_partition_group(groups);
    b.add_replicas(copies);
    b.add_group_replicas(group_replicas);
  }
  if (!c.dead_servers.empty()) b.add_dead_servers(dead);
  if (!c.retiring.empty()) b.add_retiring(retiring);
  if (!c.retired.empty()) b.add_retired(retired);
  if (!c.map.joining.empty()) b.add_group_joining(joining);
  if (c.map.groups() != c.num_servers) b.add_num_groups(c.map.groups());
  return b.Finish();
}

flatbuffers::Offset<flatbuffers::Vector<const wire::WorkerFinal*>> BuildFinals(
    flatbuffers::FlatBufferBuilder& fbb, const std::vector<shardps::WorkerFinal>& finals) {
  std::vector<wire::WorkerFinal> v;
  v.reserve(finals.size());
  for (const auto& f : finals) v.emplace_back(f.rank, f.group, f.clock, f.trained);
  return fbb.CreateVectorOfStructs(v);
}

Status DecodeFinals(const flatbuffers::Vector<const wire::WorkerFinal*>* in, uint32_t worker_ranks,
                    std::vector<shardps::WorkerFinal>* out) {
  out->clear();
  if (!in) return Status::OK();
  for (const auto* f : *in) {
    if (f->rank() >= worker_ranks)
      return Status::BadMessage("a worker's last clock names rank " + std::to_string(f->rank()) + " of " +
                                std::to_string(worker_ranks));
    if (f->clock() < -1)  // (-1: it has not joined there)
      return Status::BadMessage("worker " + std::to_string(f->rank()) + "'s last clock is " + std::to_string(f->clock()));
    out->push_back({f->rank(), f->group(), f->clock(), f->trained()});
  }
  return Status::OK();
}

namespace {

// The replica groups of `in` into c->map (owner decoded already): each
// partition's group, each group's servers (primary first), and the owner
// each partition's group's primary. Absent: the contiguous blocks, one copy.
Status DecodeGroups(const ClusterInfo* in, ClusterView* c) {
  ShardMap& m = c->map;
  if (!in->partition_group()) {
    if (in->group_replicas()) return Status::BadMessage("cluster info has replica lists but no partition groups");
    if (m.owner.empty()) return Status::OK();
    // One group per server: a group is at least one partition.
    if (c->num_servers > m.owner.size())
      return Status::BadMessage("cluster info has " + std::to_string(c->num_servers) + " servers for " +
                                std::to_string(m.owner.size()) + " partitions and no replica groups");
    m.group = m.owner;
    m.replicas.assign(c->num_servers, {});
    for (uint32_t g = 0; g < c->num_servers; ++g) m.replicas[g] = {g};
    return Status::OK();
  }
  const uint32_t copies = in->replicas();
  const uint32_t groups = in->num_groups() ? in->num_groups() : c->num_servers;
  if (groups > m.owner.size())
    return Status::BadMessage("cluster info has " + std::to_string(groups) + " groups for " +
                              std::to_string(m.owner.size()) + " partitions");
  if (in->partition_group()->size() != m.owner.size())
    return Status::BadMessage("cluster info has " + std::to_string(in->partition_group()->size()) +
                              " partition groups for " + std::to_string(m.owner.size()) + " partitions");
  if (copies == 0 || copies > c->num_servers || !in->group_replicas() ||
      in->group_replicas()->size() != static_cast<size_t>(copies) * groups)
    return Status::BadMessage("cluster info's replica lists do not hold " + std::to_string(copies) +
                              " servers for each of " + std::to_string(groups) + " groups");
  m.replicas.assign(groups, {});
  for (uint32_t g = 0; g < groups; ++g)
    for (uint32_t k = 0; k < copies; ++k) {
      const uint32_t s = in->group_replicas()->Get(g * copies + k);
      if (s == ShardMap::kNone) continue;
      if (s >= c->num_servers) return Status::BadMessage("replica list names server " + std::to_string(s));
      m.replicas[g].push_back(s);
    }
  m.group.assign(in->partition_group()->begin(), in->partition_group()->end());
  for (uint32_t p = 0; p < m.group.size(); ++p) {
    if (m.group[p] >= groups) return Status::BadMessage("partition group " + std::to_string(m.group[p]));
    if (m.replicas[m.group[p]].empty())
      return Status::BadMessage("partition " + std::to_string(p) + "'s group has no server");
    if (m.owner[p] != m.replicas[m.group[p]][0])
      return Status::BadMessage("partition " + std::to_string(p) + "'s owner is not its group's primary");
  }
  return Status::OK();
}

}  // namespace

Status DecodeCluster(const ClusterInfo* in, ClusterView* out) {
  if (!in) return Status::BadMessage("missing cluster info");
  if (in->consistency() > wire::Consistency::MAX)
    return Status::BadMessage("unknown consistency model");
  ClusterView c;
  c.consistency = static_cast<shardps::Consistency>(in->consistency());
  c.staleness = in->staleness();
  c.num_servers = in->num_servers();
  if (c.num_servers > 4096)  // the coordinator's own limit: more is not a job, but an allocation
    return Status::BadMessage("cluster info names " + std::to_string(c.num_servers) + " servers (at most 4096)");
  c.num_workers = in->num_workers();
  if (c.num_workers > 65536)
    return Status::BadMessage("cluster info names " + std::to_string(c.num_workers) + " workers (at most 65536)");
  c.map.version = in->map_version();
  if (in->partition_owner()) {
    for (uint32_t o : *in->partition_owner()) {
      if (o >= c.num_servers) return Status::BadMessage("shard map names server " + std::to_string(o));
      c.map.owner.push_back(o);
    }
  }
  if (!c.map.owner.empty() && c.map.owner.size() != in->partitions())
    return Status::BadMessage("shard map has " + std::to_string(c.map.owner.size()) +
                              " entries for " + std::to_string(in->partitions()) + " partitions");
  c.servers.assign(c.num_servers, "");
  if (in->servers()) {
    for (const auto* s : *in->servers()) {
      if (s->rank() >= c.num_servers) return Status::BadMessage("server rank out of range");
      c.servers[s->rank()] = s->endpoint() ? s->endpoint()->str() : "";
    }
  }
  if (in->tables()) {
    for (const auto* t : *in->tables()) {
      shardps::TableSpec spec;
      Status s = DecodeTableSpec(t, &spec);
      if (!s.ok()) return s;
      if (spec.id != c.tables.size()) return Status::BadMessage("table ids are not dense");
      c.tables.push_back(std::move(spec));
    }
  }
  c.membership_version = in->membership_version();
  if (in->live_workers())
    c.live_workers.assign(in->live_workers()->begin(), in->live_workers()->end());
  if (in->snapshot_root()) c.snapshot_root = in->snapshot_root()->str();
  c.snapshot_every_clocks = in->snapshot_every_clocks();
  c.snapshot_full_every = in->snapshot_full_every();
  if (in->restore_from()) c.restore_from = in->restore_from()->str();
  c.snapshot_clock_base = in->snapshot_clock_base();
  c.max_workers = in->max_workers();
  if (c.max_workers > 65536)
    return Status::BadMessage("cluster info allows " + std::to_string(c.max_workers) + " worker ranks (at most 65536)");
  if (Status s = DecodeGroups(in, &c); !s.ok()) return s;
  if (in->dead_servers())
    for (uint32_t d : *in->dead_servers()) {
      if (d >= c.num_servers) return Status::BadMessage("cluster info names dead server " + std::to_string(d));
      c.dead_servers.push_back(d);
    }
  if (in->retiring())
    for (uint32_t r : *in->retiring()) {
      if (r >= c.worker_ranks()) return Status::BadMessage("cluster info names retiring worker " + std::to_string(r));
      c.retiring.push_back(r);
    }
  if (Status s = DecodeFinals(in->retired(), c.worker_ranks(), &c.retired); !s.ok()) return s;
  if (in->group_joining()) {
    if (in->group_joining()->size() != c.map.groups())
      return Status::BadMessage("cluster info names servers being filled for " +
                                std::to_string(in->group_joining()->size()) + " groups of " +
                                std::to_string(c.map.groups()));
    for (uint32_t g = 0; g < c.map.groups(); ++g) {
      const uint32_t s = in->group_joining()->Get(g);
      if (s != ShardMap::kNone && (s >= c.num_servers || c.map.IsCopy(s, g) || c.map.Copies(g) == 0))
        return Status::BadMessage("cluster info fills group " + std::to_string(g) + " into server " +
                                  std::to_string(s) + ", which cannot take it");
      c.map.joining.push_back(s);
    }
  }
  *out = std::move(c);
  return Status::OK();
}

Status CheckFrameSize(std::string_view what, size_t actual, uint64_t expected) {
  if (actual == expected) return Status::OK();
  return Status::SizeMismatch(std::string(what) + " frame has " + std::to_string(actual) +
                              " bytes, the header announces " + std::to_string(expected));
}

}  // namespace shardps::wire
