// shardps-table-bench: what a sparse row costs a server (docs/embeddings.md,
// "Memory"). Makes N rows of an embedding table as pushes would (one
// ServerTable, all partitions held, the ids random 64-bit), then prints the
// table's bytes per row against the raw id + values + optimizer state, the
// process's resident memory per row, and the time per made row; then, with
// --reads, the time per pulled row.
//
//   shardps-table-bench --ids 20000000 --dim 16 --optimizer adagrad --dtype bf16
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "server/tables/optimizer.h"
#include "server/tables/table.h"

namespace {

double ResidentBytes() {
  std::ifstream f("/proc/self/statm");
  long pages = 0, resident = 0;
  f >> pages >> resident;
  return static_cast<double>(resident) * 4096.0;
}

double Seconds(std::chrono::steady_clock::time_point a) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - a).count();
}

}  // namespace

int main(int argc, char** argv) {
  using namespace shardps;
  CLI::App app{"shardps-table-bench: a sparse row's memory on a server"};
  uint64_t ids = 2'000'000;
  uint32_t dim = 16, partitions = 64, batch = 4096;
  uint64_t reads = 0;
  std::string optimizer = "adagrad", dtype = "f32";
  app.add_option("--ids", ids, "rows made")->check(CLI::Range(uint64_t{1}, uint64_t{1} << 34))->capture_default_str();
  app.add_option("--dim", dim, "row width")->check(CLI::Range(1, 4096))->capture_default_str();
  app.add_option("--optimizer", optimizer, "sgd | momentum | adagrad | adam")->capture_default_str();
  app.add_option("--dtype", dtype, "f32 | bf16 | f16")->capture_default_str();
  app.add_option("--partitions", partitions, "virtual partitions, all held")->check(CLI::Range(1, 65536))->capture_default_str();
  app.add_option("--batch", batch, "ids per push")->check(CLI::Range(1, 1 << 20))->capture_default_str();
  app.add_option("--reads", reads, "then pull this many random known ids")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  TableSpec spec;
  spec.name = "bench.emb";
  spec.kind = TableKind::kSparse;
  spec.cols = dim;
  spec.init = InitKind::kUniform;
  spec.init_a = -0.05f;
  spec.init_b = 0.05f;
  if (Status s = Parse(optimizer, &spec.optimizer); !s.ok()) return std::fprintf(stderr, "error: %s\n", s.message().c_str()), 2;
  if (Status s = Parse(dtype, &spec.dtype); !s.ok()) return std::fprintf(stderr, "error: %s\n", s.message().c_str()), 2;
  std::vector<uint32_t> all(partitions);
  std::iota(all.begin(), all.end(), 0);
  const double rss0 = ResidentBytes();
  ServerTable t(spec, partitions, all);
  std::mt19937_64 rng(1);
  std::vector<uint64_t> keys(batch);
  std::vector<float> grads(static_cast<size_t>(batch) * dim, 0.001f);
  const auto t0 = std::chrono::steady_clock::now();
  for (uint64_t made = 0; made < ids; made += batch) {
    const uint64_t n = std::min<uint64_t>(batch, ids - made);
    for (uint64_t i = 0; i < n; ++i) keys[i] = rng();
    t.ApplyKeys(keys.data(), n, grads.data(), 1.0f);
  }
  const double make_s = Seconds(t0);
  const double state = static_cast<double>(OptimizerStateWidth(spec));
  const double raw = 8 + dim * DTypeBytes(spec.dtype) + state * 4;
  const double per_row = static_cast<double>(t.bytes()) / static_cast<double>(t.sparse_rows());
  std::printf("%llu rows of %u %s values + %s (%.0f floats of state): raw %.0f B per row (id + values + state)\n",
              static_cast<unsigned long long>(t.sparse_rows()), dim, dtype.c_str(), optimizer.c_str(), state, raw);
  std::printf("  table bytes per row %.1f (+%.1f over raw), process resident per row %.1f; %.0f ns per made row\n",
              per_row, per_row - raw, (ResidentBytes() - rss0) / static_cast<double>(t.sparse_rows()),
              make_s * 1e9 / static_cast<double>(ids));
  if (reads > 0) {
    std::mt19937_64 again(1);  // the same ids again
    std::vector<uint64_t> known(std::min<uint64_t>(ids, 1 << 22));
    for (auto& k : known) k = again();
    std::vector<float> out(static_cast<size_t>(batch) * dim);
    const auto t1 = std::chrono::steady_clock::now();
    for (uint64_t done = 0; done < reads; done += batch) {
      const uint64_t n = std::min<uint64_t>(batch, reads - done);
      for (uint64_t i = 0; i < n; ++i) keys[i] = known[rng() % known.size()];
      t.ReadKeys(keys.data(), n, out.data());
    }
    std::printf("  %.0f ns per pulled row (random known ids)\n", Seconds(t1) * 1e9 / static_cast<double>(reads));
  }
  return 0;
}
