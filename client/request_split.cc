#include "client/request_split.h"

#include <algorithm>
#include <cstring>
#include <string>

#include "common/codec/compress.h"
#include "common/codec/half.h"

namespace shardps::detail {

namespace {

Status SizeMismatch(bool push, uint64_t floats, const std::string& shape, uint64_t need) {
  return Status::SizeMismatch(std::string(push ? "gradient" : "output") + " array has " + std::to_string(floats) +
                              " floats, " + shape + " need " + std::to_string(need));
}

}  // namespace

Status SplitRange(const TableSpec& t, const ShardMap& map, RowRange r, uint64_t floats, bool push,
                  uint64_t max_message_bytes, std::vector<Part>* parts) {
  parts->clear();
  if (t.kind != TableKind::kDense)
    return Status::InvalidArgument("table '" + t.name + "' is sparse: address it by ids, not a row range");
  if (r.begin >= r.end || r.end > t.rows)
    return Status::OutOfRange("rows [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ") of table '" +
                              t.name + "' with " + std::to_string(t.rows) + " rows");
  const uint64_t cols = t.cols;
  if (floats != (r.end - r.begin) * cols)
    return SizeMismatch(push, floats,
                        "rows [" + std::to_string(r.begin) + ", " + std::to_string(r.end) + ") x " +
                            std::to_string(cols) + " cols",
                        (r.end - r.begin) * cols);
  const uint32_t P = map.partitions();
  for (uint64_t row = r.begin; row < r.end;) {
    const uint32_t p = PartitionOfRow(row, t.rows, P);
    const uint64_t stop = std::min(r.end, PartitionRowBegin(p + 1, t.rows, P));
    Part* last = parts->empty() ? nullptr : &parts->back();
    const uint32_t group = map.GroupOf(p);
    if (last && last->group == group && last->row_end == row &&
        (stop - last->row_begin) * cols * 4 <= max_message_bytes) {
      last->row_end = stop;
    } else {
      Part part;
      part.server = map.owner[p];
      part.group = group;
      part.row_begin = row;
      part.row_end = stop;
      parts->push_back(std::move(part));
    }
    row = stop;
  }
  for (Part& part : *parts) {
    part.offset = (part.row_begin - r.begin) * cols;
    part.floats = (part.row_end - part.row_begin) * cols;
  }
  return Status::OK();
}

Status SplitKeys(const TableSpec& t, const ShardMap& map, std::span<const uint64_t> keys, uint64_t floats, bool push,
                 std::vector<Part>* parts) {
  parts->clear();
  const uint64_t cols = t.cols, n = keys.size();
  if (floats != n * cols)
    return SizeMismatch(push, floats, std::to_string(n) + " keys x " + std::to_string(cols) + " cols", n * cols);
  if (n == 0) return Status::OK();
  const uint32_t P = map.partitions();
  const bool dense = t.kind == TableKind::kDense;
  std::vector<uint32_t> group(n);
  for (uint64_t i = 0; i < n; ++i) {
    if (dense && keys[i] >= t.rows)
      return Status::OutOfRange("row id " + std::to_string(keys[i]) + " (key " + std::to_string(i) +
                                ") is outside table '" + t.name + "' with " + std::to_string(t.rows) + " rows");
    group[i] = map.GroupOf(dense ? PartitionOfRow(keys[i], t.rows, P) : PartitionOfId(keys[i], P));
  }
  if (std::all_of(group.begin(), group.end(), [&](uint32_t x) { return x == group[0]; })) {
    Part part;
    part.group = group[0];
    part.server = map.Primary(group[0]);
    part.keyed = true;
    part.key_count = n;
    part.floats = n * cols;
    parts->push_back(std::move(part));
    return Status::OK();
  }
  std::vector<std::vector<uint32_t>> pos(*std::max_element(group.begin(), group.end()) + 1);
  for (uint64_t i = 0; i < n; ++i) pos[group[i]].push_back(static_cast<uint32_t>(i));
  for (uint32_t g = 0; g < pos.size(); ++g) {
    if (pos[g].empty()) continue;
    Part part;
    part.group = g;
    part.server = map.Primary(g);
    part.keyed = true;
    part.key_count = pos[g].size();
    part.positions = std::move(pos[g]);
    parts->push_back(std::move(part));
  }
  return Status::OK();
}

wire::Fields PartFields(const DataHeader& h, const Part& p, std::span<const uint64_t> bases) {
  wire::Fields f;
  f.type = h.push ? wire::MsgType::Push : wire::MsgType::Pull;
  f.role = h.role;
  f.rank = h.rank;
  f.table = h.table;
  f.clock = h.clock;
  f.steps = h.steps;
  f.group = static_cast<int32_t>(p.group);
  f.values = {static_cast<wire::DType>(h.dtype), static_cast<wire::Compression>(h.compress)};
  if (p.keyed) {
    f.key_count = p.key_count;
  } else {
    f.row_begin = p.row_begin;
    f.row_end = p.row_end;
  }
  if (h.push) f.base_versions = bases;
  f.values.assign = h.assign;
  return f;
}

int64_t RequestClock(int64_t now, int64_t ahead) {
  return ahead == kPreviousClock ? std::max<int64_t>(0, now - 1) : now + ahead;
}

std::vector<uint64_t> BasesFor(const StepBases& bases, uint32_t server) {
  std::vector<uint64_t> out;
  for (const auto& b : bases) {
    if (!b || server >= b->size() || (*b)[server] == kNoVersion) return {};
    out.push_back((*b)[server]);
  }
  return out;
}

std::vector<zmq::message_t> PartFrames(const Payload& pl, const Part& p, const std::shared_ptr<Call>& call) {
  std::vector<zmq::message_t> frames;
  const bool all_keys = p.positions.empty();
  if (p.keyed)
    frames.push_back(all_keys ? Borrow(pl.keys.data(), pl.keys.size_bytes(), call) : GatherKeys(pl.keys, p.positions));
  if (!pl.push) return frames;
  // Rows in order (a range part, or the key part holding every key): `n`.
  const uint64_t n = p.floats / pl.cols;
  if (pl.compress != Compression::kNone) {
    // Each step's part encoded in turn, its residual carried to the next.
    const size_t k = compress::TopKCount(p.floats, pl.topk_fraction);
    const size_t steps = std::max<size_t>(1, pl.steps.size());
    for (size_t j = 0; j < steps; ++j) {
      const float* g = (pl.steps.empty() ? pl.values : pl.steps[j].grads.data()) + p.offset;
      zmq::message_t m(compress::EncodedBytes(pl.compress, p.floats, k));
      compress::Encode(pl.compress, g, pl.residual + p.offset, p.floats, k, m.data());
      frames.push_back(std::move(m));
    }
  } else if (!pl.steps.empty()) {
    for (const PushStep& step : pl.steps)
      frames.push_back(pl.dtype == DType::kF32 ? Borrow(step.grads.data() + p.offset, p.floats * 4, call)
                                               : GatherRowsAs(step.grads.data() + p.offset, pl.cols, {}, n, pl.dtype));
  } else if (pl.dtype != DType::kF32) {
    // Converted into the message (half the bytes): the one pass over them.
    frames.push_back(GatherRowsAs(pl.values + p.offset, pl.cols, p.positions, n, pl.dtype));
  } else if (all_keys) {
    frames.push_back(Borrow(pl.values + p.offset, p.floats * 4, call));
  } else {
    frames.push_back(GatherRows(pl.values, pl.cols, p.positions));
  }
  return frames;
}

Dest PullDest(const Payload& pl, Part& p) {
  Dest d;
  d.clocks = true;
  d.dtype = pl.dtype;
  if (pl.plan && p.keyed) {
    d.out = pl.values;
    d.cols = pl.cols;
    if (pl.cache) {
      d.cache = pl.cache;
      d.cache_table = pl.cache_table;
      d.cache_clock = pl.cache_clock;
      if (p.positions.empty())
        d.cache_keys.assign(pl.keys.begin(), pl.keys.end());
      else
        for (uint32_t u : p.positions) d.cache_keys.push_back(pl.keys[u]);
    }
    PlacesOf(*pl.plan, p.positions, &d.positions, &d.offsets);
    return d;
  }
  if (!p.positions.empty()) {
    d.out = pl.values;
    d.positions = std::move(p.positions);
    d.cols = pl.cols;
  } else if (pl.view) {
    d.view = pl.view;
    d.view_offset = p.offset;
    d.floats = p.floats;
  } else {
    d.out = pl.values + p.offset;
    d.floats = p.floats;
  }
  return d;
}

zmq::message_t GatherKeys(std::span<const uint64_t> keys, const std::vector<uint32_t>& positions) {
  zmq::message_t m(positions.size() * sizeof(uint64_t));
  auto* out = static_cast<uint64_t*>(m.data());
  for (size_t i = 0; i < positions.size(); ++i) out[i] = keys[positions[i]];
  return m;
}

KeyPlan PlanKeys(std::span<const uint64_t> keys) {
  KeyPlan plan;
  const size_t n = keys.size();
  // Open addressing over a power of two at least twice the keys: the
  // index of each key's unique entry.
  size_t cap = 16;
  while (cap < 2 * n) cap *= 2;
  std::vector<uint32_t> slot(cap, ~0u);
  std::vector<uint32_t> which(n), count;
  plan.unique.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    size_t h = Mix64(keys[i] ^ 0x5851f42d4c957f2dull) & (cap - 1);
    while (slot[h] != ~0u && plan.unique[slot[h]] != keys[i]) h = (h + 1) & (cap - 1);
    if (slot[h] == ~0u) {
      slot[h] = static_cast<uint32_t>(plan.unique.size());
      plan.unique.push_back(keys[i]);
      count.push_back(0);
    }
    which[i] = slot[h];
    ++count[slot[h]];
  }
  plan.offsets.assign(plan.unique.size() + 1, 0);
  for (size_t u = 0; u < count.size(); ++u) plan.offsets[u + 1] = plan.offsets[u] + count[u];
  plan.positions.resize(n);
  std::vector<uint32_t> next(plan.offsets.begin(), plan.offsets.end() - 1);
  for (size_t i = 0; i < n; ++i) plan.positions[next[which[i]]++] = static_cast<uint32_t>(i);
  return plan;
}

void SumRows(const KeyPlan& plan, const float* rows, uint32_t cols, float* out) {
  for (size_t u = 0; u + 1 < plan.offsets.size(); ++u) {
    float* dst = out + u * cols;
    std::memcpy(dst, rows + static_cast<size_t>(plan.positions[plan.offsets[u]]) * cols, cols * sizeof(float));
    for (uint32_t k = plan.offsets[u] + 1; k < plan.offsets[u + 1]; ++k) {
      const float* src = rows + static_cast<size_t>(plan.positions[k]) * cols;
      for (uint32_t j = 0; j < cols; ++j) dst[j] += src[j];
    }
  }
}

void PlacesOf(const KeyPlan& plan, const std::vector<uint32_t>& uniques, std::vector<uint32_t>* positions,
              std::vector<uint32_t>* offsets) {
  positions->clear();
  offsets->assign(1, 0);
  auto add = [&](uint32_t u) {
    positions->insert(positions->end(), plan.positions.begin() + plan.offsets[u],
                      plan.positions.begin() + plan.offsets[u + 1]);
    offsets->push_back(static_cast<uint32_t>(positions->size()));
  };
  if (uniques.empty()) {
    for (uint32_t u = 0; u + 1 < plan.offsets.size(); ++u) add(u);
  } else {
    for (uint32_t u : uniques) add(u);
  }
}

zmq::message_t GatherRowsAs(const float* rows, uint32_t cols, const std::vector<uint32_t>& positions, uint64_t n,
                            DType dtype) {
  if (dtype == DType::kF32) {
    if (!positions.empty()) return GatherRows(rows, cols, positions);
    return zmq::message_t(rows, n * cols * sizeof(float));
  }
  const uint64_t count = positions.empty() ? n : positions.size();
  zmq::message_t m(count * cols * sizeof(uint16_t));
  auto* out = static_cast<uint16_t*>(m.data());
  for (uint64_t i = 0; i < count; ++i) {
    const float* src = rows + static_cast<size_t>(positions.empty() ? i : positions[i]) * cols;
    if (dtype == DType::kBF16)
      FloatToBf16(src, out + i * cols, cols);
    else
      FloatToF16(src, out + i * cols, cols);
  }
  return m;
}

zmq::message_t GatherRows(const float* rows, uint32_t cols, const std::vector<uint32_t>& positions) {
  zmq::message_t m(positions.size() * cols * sizeof(float));
  auto* out = static_cast<float*>(m.data());
  for (size_t i = 0; i < positions.size(); ++i)
    std::memcpy(out + i * cols, rows + static_cast<size_t>(positions[i]) * cols, cols * sizeof(float));
  return m;
}

}  // namespace shardps::detail
