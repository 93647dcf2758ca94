#include "server/dc_kept.h"

#include "server/table.h"

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
    now_.resize(n);
    grad_.resize(n);
    t.ReadRange(begin, end, now_.data());
    const float lambda = t.spec().dc_lambda;
    for (size_t i = 0; i < n; ++i) grad_[i] = g[i] + lambda * g[i] * g[i] * (now_[i] - slot.w[i]);
    return grad_.data();
  }
  return nullptr;
}

}  // namespace shardps
