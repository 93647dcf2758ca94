// RowSource: where the rows of the tables a server starts holding come
// from when the job restores (the snapshot it restores from:
// server/snapshot/snapshot_rows.h), given to TableSet::RestoreFrom;
// TableSet::Define asks it table by table, so the tables know nothing of
// snapshot files.
#pragma once

#include "server/tables/table.h"
#include "shardps/status.h"
#include "shardps/types.h"

namespace shardps {

class RowSource {
 public:
  virtual ~RowSource() = default;
  // True when the source holds every row of dense table `spec`: the table
  // need not be initialised before Fill overwrites it.
  virtual bool Covers(const TableSpec& spec) = 0;
  // Writes the source's rows of `spec` into the partitions `t` holds; a
  // table the source does not have is left as initialised. Fails, changing
  // nothing more, on a table of another shape or a damaged source.
  virtual Status Fill(const TableSpec& spec, ServerTable& t) = 0;
};

}  // namespace shardps
