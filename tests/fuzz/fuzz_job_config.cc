// Fuzz target: the job-file parser (server/coordinator/job_config.h ParseJobConfig,
// TOML through toml++, then every section and --set override), and on
// success what the coordinator and the launcher do next with the result:
// CoordinatorOptions::Validate and JobConfigJson.
//
// Input: the job file's text up to the first NUL byte; each further
// NUL-separated piece is one `--set SECTION.KEY=VALUE` (at most 8).
#include <cstdlib>
#include <string>
#include <vector>

#include "server/coordinator/job_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view all(reinterpret_cast<const char*>(data), size);
  size_t cut = all.find('\0');
  const std::string_view text = all.substr(0, cut);
  std::vector<std::string> sets;
  while (cut != std::string_view::npos && sets.size() < 8) {
    const size_t next = all.find('\0', cut + 1);
    sets.emplace_back(all.substr(cut + 1, next == std::string_view::npos ? std::string_view::npos : next - cut - 1));
    cut = next;
  }
  shardps::JobConfig cfg;
  shardps::Status s = shardps::ParseJobConfig(text, "fuzz.toml", sets, &cfg);
  if (!s.ok()) {
    if (s.message().empty()) std::abort();  // every refusal says why
    return 0;
  }
  (void)cfg.job.Validate();
  const std::string json = shardps::JobConfigJson(cfg);
  if (json.empty() || json.front() != '{' || json.back() != '}') std::abort();
  return 0;
}
