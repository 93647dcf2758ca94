#include "common/base/file.h"

#include <cstdio>
#include <fstream>

namespace shardps {

Status WriteFileAtomic(const std::string& path, const std::string& text) {
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::trunc);
    if (!f) return Status::InvalidArgument("cannot write '" + tmp + "'");
    f << text;
    if (!f.good()) return Status::Internal("write to '" + tmp + "' failed");
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0)
    return Status::Internal("cannot rename '" + tmp + "' to '" + path + "'");
  return Status::OK();
}

}  // namespace shardps
