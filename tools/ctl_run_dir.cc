#include "tools/ctl_run_dir.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "common/base/json_read.h"

namespace shardps {

Status ReadRunDir(const std::string& dir, RunDirJob* out) {
  struct stat st{};
  const bool is_file = ::stat(dir.c_str(), &st) == 0 && S_ISREG(st.st_mode);
  const std::string path = is_file ? dir : dir + "/job.json";
  std::ifstream f(path);
  if (!f) {
    return Status::InvalidArgument("cannot read '" + path + "'" +
                                   (is_file ? "" : ": is this the run directory of a job shardps-launch started?"));
  }
  std::stringstream ss;
  ss << f.rdbuf();
  JsonValue v;
  if (Status s = ParseJson(ss.str(), &v); !s.ok()) return Status::InvalidArgument("'" + path + "': " + s.message());
  if (v.kind != JsonValue::Kind::kObject || !v.Find("format"))
    return Status::InvalidArgument("'" + path + "' is not a job.json written by shardps-launch (no \"format\")");
  out->coordinator = v.StringAt("coordinator");
  out->state = v.StringAt("state");
  out->keys.clear();
  if (const JsonValue* sec = v.Find("security")) out->keys = sec->StringAt("keys");
  return Status::OK();
}

std::string NumbersAfterCoordinator(const std::vector<std::string>& args,
                                    const std::vector<std::pair<std::string, long>>& numbers, std::string* coordinator,
                                    std::vector<long>* values) {
  std::string usage = "[COORDINATOR]";
  for (const auto& [name, most] : numbers) usage += " " + name;
  if (args.size() != numbers.size() && args.size() != numbers.size() + 1)
    return "expected " + usage + ", got " + std::to_string(args.size()) + " arguments";
  size_t i = 0;
  if (args.size() == numbers.size() + 1) *coordinator = args[i++];
  values->clear();
  for (const auto& [name, most] : numbers) {
    const std::string& a = args[i++];
    char* end = nullptr;
    errno = 0;
    const long v = std::strtol(a.c_str(), &end, 10);
    if (a.empty() || *end != '\0' || errno != 0 || v < 0 || v > most)
      return name + " must be an integer in [0, " + std::to_string(most) + "], got '" + a + "' (" + usage + ")";
    values->push_back(v);
  }
  return "";
}

std::string RunDirKey(const RunDirJob& job, bool admin) {
  if (job.keys.empty()) return "";
  return job.keys + (admin ? "/admin.key" : "/observer.key");
}

}  // namespace shardps
