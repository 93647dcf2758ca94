// DcKept: what delay compensation (StalenessRule::kDelayCompensation,
// docs/consistency.md, "Stale gradients") keeps of the pulls: the values
// each worker's last kKept pulls of a dense row range read, with the
// version they carried, so that a push based on one of them knows w_then
// and its gradient can be compensated for the rows' change since.
//
// Thread: the server's event loop owns it; no locks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <tuple>
#include <vector>

#include "shardps/status.h"

namespace shardps {

class ServerTable;

class DcKept {
 public:
  static constexpr size_t kKept = 3;  // pulls kept per (worker, table, first row)

  // Keeps rows [begin, end) of table `table` (`t`) as worker `rank` just
  // pulled them, at `version` (as the pull reply carried it). The oldest of
  // that worker's kKept pulls starting at `begin` is forgotten.
  void Keep(int rank, uint32_t table, const ServerTable& t, uint64_t begin, uint64_t end, uint64_t version);
  // Gradient `g` of rows [begin, end), computed on the values worker `rank`
  // pulled at version `base`, compensated for the rows' change since (Zheng
  // et al. 2017: g + lambda * g (.) g (.) (w_now - w_then)). Null when that
  // pull's values are no longer kept (or never were: another range). The
  // result lives here until the next call.
  const float* Compensate(int rank, uint32_t table, const ServerTable& t, uint64_t begin, uint64_t end,
                          uint64_t base, const float* g);

  // A fill (re-replication): every kept pull appended to *out; Load
  // replaces them with what Save wrote (BadMessage, nothing changed, if not).
  void Save(std::string* out) const;
  Status Load(std::string_view in);

 private:
  struct Slot {
    bool used = false;
    uint64_t version = 0, end = 0;
    std::vector<float> w;
  };
  struct Ring {
    Slot slots[kKept];
    size_t next = 0;
  };
  std::map<std::tuple<int, uint32_t, uint64_t>, Ring> kept_;  // (worker, table, first row)
  std::vector<float> now_, grad_;                             // Compensate's scratch and result
};

}  // namespace shardps
