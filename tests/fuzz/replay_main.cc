// A standalone driver for the fuzz targets in the normal build (no
// libFuzzer): feeds every file of the directories (or the files) named on
// the command line to LLVMFuzzerTestOneInput once, in name order. The suite
// runs each target this way over its seed corpus and its committed crash
// reproducers (tests/fuzz/meson.build): a regression test. A missing
// directory is skipped (a target may have no reproducers).
#include <dirent.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace {

bool IsDir(const std::string& p) {
  struct stat st;
  return stat(p.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

void Collect(const std::string& path, std::vector<std::string>* files) {
  if (!IsDir(path)) {
    struct stat st;
    if (stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode)) files->push_back(path);
    return;
  }
  DIR* d = opendir(path.c_str());
  if (!d) return;
  std::vector<std::string> names;
  while (dirent* e = readdir(d))
    if (e->d_name[0] != '.') names.push_back(e->d_name);
  closedir(d);
  std::sort(names.begin(), names.end());
  for (const auto& n : names) Collect(path + "/" + n, files);
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (!IsDir(argv[i]) && access(argv[i], F_OK) != 0) {
      std::fprintf(stderr, "replay: %s does not exist, skipped\n", argv[i]);
      continue;
    }
    Collect(argv[i], &files);
  }
  for (const auto& f : files) {
    std::ifstream in(f, std::ios::binary);
    std::vector<uint8_t> data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::fprintf(stderr, "replay: %s (%zu bytes)\n", f.c_str(), data.size());
    // A copy of exactly the input's size, so that ASan sees a read past it.
    std::vector<uint8_t> exact(data);
    LLVMFuzzerTestOneInput(exact.empty() ? nullptr : exact.data(), exact.size());
  }
  std::printf("replay: %zu inputs, no crash\n", files.size());
  return 0;
}
