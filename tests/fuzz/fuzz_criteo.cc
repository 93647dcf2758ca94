// Fuzz target: the Criteo TSV reader (worker/data/criteo.h) on any bytes, as one
// line (ParseCriteoLine) and as a whole file (CriteoFile, through a memfd):
// it never crashes, an accepted line holds what a parsed example may hold
// (label 0 or 1, finite non-negative integers after log1p), a refused one
// says why; the file's lines are all read, malformed ones skipped and
// counted, and any range reads what the whole read gave for it.
//
// Input: the file's bytes, as they are.
#include <sys/mman.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "worker/data/criteo.h"

namespace shardps::worker {
namespace {

void CheckExample(const CriteoExample& e) {
  if (e.label != 0.0f && e.label != 1.0f) std::abort();
  for (float v : e.dense)
    if (!std::isfinite(v) || v < 0) std::abort();
  for (int f = 0; f < kCriteoCategories; ++f)
    if ((e.missing >> f & 1) && e.category[f] != 0) std::abort();
  if (e.missing >> kCriteoCategories) std::abort();
}

void Line(std::string_view line) {
  CriteoExample e;
  Status s = ParseCriteoLine(line, &e);
  if (s.ok())
    CheckExample(e);
  else if (s.message().empty())
    std::abort();
}

void File(const uint8_t* data, size_t size) {
  const int fd = memfd_create("criteo", MFD_CLOEXEC);
  if (fd < 0) return;
  if (size && write(fd, data, size) != static_cast<ssize_t>(size)) {
    close(fd);
    return;
  }
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  CriteoOptions skip;
  skip.skip_malformed = true;
  std::unique_ptr<CriteoFile> file;
  if (!CriteoFile::Open(path, skip, &file).ok()) std::abort();
  const uint64_t n = file->examples();
  std::vector<CriteoExample> all;
  if (!file->Read(0, n, &all).ok() || all.size() + file->skipped() != n) std::abort();
  for (const auto& e : all) CheckExample(e);
  // Reading on, and a range from the middle: the same examples.
  std::vector<CriteoExample> part;
  if (n >= 2 && file->skipped() == 0) {
    if (!file->Read(n / 2, n, &part).ok() || part.size() != n - n / 2) std::abort();
    for (size_t i = 0; i < part.size(); ++i)
      if (part[i].label != all[n / 2 + i].label || part[i].missing != all[n / 2 + i].missing) std::abort();
  }
  if (file->Read(0, n + 1, &part).ok()) std::abort();
  close(fd);
}

}  // namespace
}  // namespace shardps::worker

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view text(reinterpret_cast<const char*>(data), size);
  for (size_t pos = 0; pos <= text.size();) {
    const size_t nl = text.find('\n', pos);
    shardps::worker::Line(text.substr(pos, nl == std::string_view::npos ? std::string_view::npos : nl - pos));
    if (nl == std::string_view::npos) break;
    pos = nl + 1;
  }
  shardps::worker::File(data, size);
  return 0;
}
