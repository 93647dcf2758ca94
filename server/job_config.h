// The job file (TOML) the coordinator starts from: cluster shape,
// consistency and the tables defined up front. See docs/configuration.md.
//
//   [job]
//   servers = 2
//   workers = 2
//   partitions = 64
//   consistency = "bounded"   # sync | bounded | async
//   staleness = 2
//
//   [[table]]
//   name = "fc1"
//   kind = "dense"            # dense | sparse
//   rows = 784
//   cols = 256
//   init = "normal"           # zeros | constant | uniform | normal
//   mean = 0.0
//   stddev = 0.05
//   seed = 1
//   optimizer = "adam"        # sgd | momentum | adagrad | adam
//   lr = 0.001
#pragma once

#include <string>
#include <string_view>

#include "server/coordinator.h"

namespace shardps {

// Parses TOML text into `out` (fields absent from the text keep their
// value). Errors name the key and, where known, the line.
Status ParseJobConfig(std::string_view text, std::string_view source_name, CoordinatorOptions* out);
Status LoadJobConfig(const std::string& path, CoordinatorOptions* out);

}  // namespace shardps
