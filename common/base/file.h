// Files written whole or not at all.
#pragma once

#include <string>

#include "shardps/status.h"

namespace shardps {

// Writes `text` to `path` atomically (a temp file beside it, then a
// rename): a reader sees the old file or the whole new one, never a part
// (a snapshot's MANIFEST; a process's endpoint, for the tests and
// launchers that wait for it).
Status WriteFileAtomic(const std::string& path, const std::string& text);

}  // namespace shardps
