// Fuzz target: the loaders of a replica group's state sent in a fill
// (re-replication, docs/fault-tolerance.md): a peer's bytes must be refused
// with a reason or loaded into a state the server can go on with.
//
//   byte 0: bit 0 clear: WorkerClocks::Load of the rest (bit 1: under sync,
//           else bounded staleness s=1); set: DcKept::Load of the rest.
//
// A state that loads must save to bytes that load again and save the same
// (nothing lost or made up); loaded clocks then take their workers' ticks,
// their complete clocks and their releasable pulls; loaded kept pulls
// compensate a gradient of a small table, whatever their sizes.
#include <cstdlib>
#include <deque>
#include <string>
#include <string_view>
#include <vector>

#include "server/consistency/dc_kept.h"
#include "server/consistency/worker_clocks.h"
#include "server/tables/table.h"

namespace shardps {
namespace {

void Check(bool ok) {
  if (!ok) std::abort();
}

void Clocks(bool sync, std::string_view in) {
  auto make = [&] {
    WorkerClocks w(1 << 20);
    w.SetModel(sync ? Consistency::kSync : Consistency::kBounded, 1);
    return w;
  };
  WorkerClocks w = make();
  if (!w.Load(in).ok()) return;
  auto all = [](const WorkerClocks::Parked&) { return true; };
  std::string a, b;
  w.Save(&a, all);
  WorkerClocks v = make();
  Check(v.Load(a).ok());
  v.Save(&b, all);
  Check(a == b);
  if (w.ranks() > 256) return;
  std::vector<uint32_t> live;
  for (uint32_t r = 0; r < w.ranks(); ++r) live.push_back(r);
  w.SetMembership(static_cast<uint32_t>(w.ranks()), live);
  for (uint32_t r = 0; r < w.ranks(); ++r) (void)w.Tick(true, static_cast<int>(r), w.clock(static_cast<int>(r)), false);
  for (int i = 0; i < 64 && w.sync() && w.applied_clock() < w.CompleteBelow(); ++i) {
    WorkerClocks::CompleteClock c;
    w.TakeClock(3, &c);
    if (!c.pushes.empty())  // (the server asks for a divisor only for a clock's pushes)
      for (uint32_t t = 0; t < 3; ++t) Check(c.Divisor(t) >= 1);
  }
  std::deque<WorkerClocks::Parked> go;
  w.TakeReleasable(&go);
}

void Kept(std::string_view in) {
  DcKept d;
  if (!d.Load(in).ok()) return;
  std::string a, b;
  d.Save(&a);
  DcKept e;
  Check(e.Load(a).ok());
  e.Save(&b);
  Check(a == b);
  TableSpec spec;
  spec.name = "w";
  spec.rows = 8;
  spec.cols = 2;
  spec.staleness_rule = StalenessRule::kDelayCompensation;
  ServerTable t(spec, 2, {0, 1});
  const std::vector<float> g(16, 0.5f);
  for (int rank = 0; rank < 2; ++rank)
    for (uint64_t begin = 0; begin < 8; begin += 4)
      for (uint64_t version = 0; version < 4; ++version) (void)d.Compensate(rank, 0, t, begin, begin + 4, version, g.data());
}

}  // namespace
}  // namespace shardps

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1)
    shardps::Kept(rest);
  else
    shardps::Clocks((data[0] & 2) != 0, rest);
  return 0;
}
