#include "server/consistency/dc_kept.h"

#include "server/consistency/byte_codec.h"
#include "server/tables/table.h"

namespace shardps {

void DcKept::Keep(int rank, uint32_t table, const ServerTable& t, uint64_t begin, uint64_t end, uint64_t version) {
  Ring& ring = kept_[{rank, table, begin}];
  Slot& slot = ring.slots[ring.next++ % kKept];
  slot.used = true;
  slot.version = version;
  slot.end = end;
  slot.w.resize((end - begin) * t.spec().cols);
  t.ReadRange(begin, end, slot.w.data());
}

const float* DcKept::Compensate(int rank, uint32_t table, const ServerTable& t, uint64_t begin, uint64_t end,
                                uint64_t base, const float* g) {
  auto it = kept_.find({rank, table, begin});
  if (it == kept_.end()) return nullptr;
  for (const Slot& slot : it->second.slots) {
    if (!slot.used || slot.version != base || slot.end != end) continue;
    const size_t n = slot.w.size();
    if (n != (end - begin) * t.spec().cols) continue;  // (one loaded from a fill is checked, not trusted)
    now_.resize(n);
    grad_.resize(n);
    t.ReadRange(begin, end, now_.data());
    const float lambda = t.spec().dc_lambda;
    for (size_t i = 0; i < n; ++i) grad_[i] = g[i] + lambda * g[i] * g[i] * (now_[i] - slot.w[i]);
    return grad_.data();
  }
  return nullptr;
}

void DcKept::Save(std::string* out) const {
  ByteWriter w(out);
  w.Put<uint64_t>(kept_.size());
  for (const auto& [key, ring] : kept_) {
    w.Put<int32_t>(std::get<0>(key));
    w.Put<uint32_t>(std::get<1>(key));
    w.Put<uint64_t>(std::get<2>(key));
    w.Put<uint64_t>(ring.next);
    for (const Slot& slot : ring.slots) {
      w.Put<uint8_t>(slot.used);
      w.Put(slot.version);
      w.Put(slot.end);
      w.PutArray(slot.w);
    }
  }
}

Status DcKept::Load(std::string_view in) {
  ByteReader r(in, "delay compensation's kept pulls");
  std::map<std::tuple<int, uint32_t, uint64_t>, Ring> kept;
  uint64_t n = 0;
  if (r.Get(&n))
    for (uint64_t i = 0; i < n && i < (1u << 24); ++i) {
      int32_t rank = 0;
      uint32_t table = 0;
      uint64_t begin = 0, next = 0;
      if (!r.Get(&rank) || !r.Get(&table) || !r.Get(&begin) || !r.Get(&next)) break;
      Ring& ring = kept[{rank, table, begin}];
      ring.next = next;
      for (Slot& slot : ring.slots) {
        uint8_t used = 0;
        if (!r.Get(&used) || !r.Get(&slot.version) || !r.Get(&slot.end) || !r.GetArray(&slot.w, 1ull << 32)) break;
        slot.used = used != 0;
      }
    }
  if (Status s = r.Finish(); !s.ok()) return s;
  kept_ = std::move(kept);
  return Status::OK();
}

}  // namespace shardps
