// PartitionData: the rows of one partition of one table, copied out of the
// table (ServerTable::ExportPartition): what a snapshot writes
// (server/snapshot/snapshot.h) and a fill sends to a new copy of a replica
// group (server/server_fill.cc). Each row is RowStride(spec) floats: its
// parameters (cols floats), its optimizer state (OptimizerStateWidth
// floats) and, for a sparse table with eviction, its stamp (a uint32 in a
// float's 4 bytes).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "shardps/types.h"

namespace shardps {

struct PartitionData {
  uint32_t table = 0;
  uint32_t partition = 0;
  uint32_t stride = 0;          // floats per row: RowStride(spec)
  std::vector<uint64_t> rows;   // ascending
  std::vector<float> values;    // rows.size() x stride
  std::vector<uint64_t> deleted;  // a snapshot of what changed: ids whose rows are gone, ascending
  std::string admission;        // a sparse table's admission sketch (AdmissionSketch::Serialize); "" none
};

// Floats per copied row of table `spec`: cols + optimizer state + a stamp
// for a sparse table with eviction.
uint32_t RowStride(const TableSpec& spec);

}  // namespace shardps
