// SnapshotRows: the rows of a restored job, read from the snapshot it
// restores from (a RowSource for TableSet::Define, server/tables/row_source.h).
// The manifests of the snapshot and of its chain (snapshot_chain.h) are
// read once, at the first table asked for; each table's partitions are
// read as the server starts holding them (a full part, then each part of
// what changed on top), and a row is written only into the partition it
// belongs to.
//
// Thread: one (the server's event loop).
#pragma once

#include <string>

#include "server/snapshot/snapshot_chain.h"
#include "server/tables/row_source.h"

namespace shardps::snapshot {

class SnapshotRows : public RowSource {
 public:
  explicit SnapshotRows(std::string snap_dir) : dir_(std::move(snap_dir)) {}
  const std::string& dir() const { return dir_; }

  bool Covers(const TableSpec& spec) override;
  Status Fill(const TableSpec& spec, ServerTable& t) override;

 private:
  Status Load();

  const std::string dir_;
  Chain chain_;
  bool loaded_ = false;
};

}  // namespace shardps::snapshot
