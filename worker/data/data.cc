#include "worker/data/data.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <random>
#include <sys/stat.h>

#include "common/cluster/partition.h"

namespace shardps::worker {

Status ReadMaybeGzip(const std::string& path, std::vector<uint8_t>* out) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) return Status::InvalidArgument("data file '" + path + "' does not exist");
  gzFile f = gzopen(path.c_str(), "rb");  // reads plain files too
  if (!f) return Status::InvalidArgument("cannot open data file '" + path + "'");
  out->clear();
  std::vector<uint8_t> buf(1 << 20);
  for (;;) {
    int n = gzread(f, buf.data(), static_cast<unsigned>(buf.size()));
    if (n < 0) {
      int err;
      std::string msg = gzerror(f, &err);
      gzclose(f);
      return Status::InvalidArgument("data file '" + path + "' is corrupt: " + msg);
    }
    if (n == 0) break;
    out->insert(out->end(), buf.begin(), buf.begin() + n);
  }
  int err = Z_OK;
  const char* msg = gzerror(f, &err);
  std::string why = msg ? msg : "";
  gzclose(f);
  if (err != Z_OK && err != Z_STREAM_END)
    return Status::InvalidArgument("data file '" + path + "' is corrupt: " + why);
  return Status::OK();
}

Status ParseIdx(const std::vector<uint8_t>& b, const std::string& name, int want_dims, std::vector<uint32_t>* dims,
                const uint8_t** data) {
  auto be32 = [&](size_t off) {
    return (uint32_t{b[off]} << 24) | (uint32_t{b[off + 1]} << 16) | (uint32_t{b[off + 2]} << 8) | b[off + 3];
  };
  if (b.size() < 4) return Status::InvalidArgument(name + ": " + std::to_string(b.size()) + " bytes is too short for an IDX file");
  if (b[0] != 0 || b[1] != 0 || b[2] != 0x08)
    return Status::InvalidArgument(name + ": not an IDX file of unsigned bytes (bad magic number)");
  if (b[3] != want_dims)
    return Status::InvalidArgument(name + ": has " + std::to_string(b[3]) + " dimensions, expected " +
                                   std::to_string(want_dims));
  const size_t header = 4 + 4 * static_cast<size_t>(want_dims);
  if (b.size() < header) return Status::InvalidArgument(name + ": truncated IDX header");
  dims->clear();
  uint64_t total = 1;
  for (int i = 0; i < want_dims; ++i) {
    dims->push_back(be32(4 + 4 * i));
    total *= dims->back();
  }
  if (b.size() - header != total)
    return Status::InvalidArgument(name + ": header announces " + std::to_string(total) + " bytes of data, file has " +
                                   std::to_string(b.size() - header) + " (truncated or corrupt)");
  *data = b.data() + header;
  return Status::OK();
}

namespace {
std::string FindFile(const std::string& dir, const std::string& base) {
  struct stat st;
  for (const char* ext : {".gz", ""}) {
    std::string p = dir + "/" + base + ext;
    if (stat(p.c_str(), &st) == 0) return p;
  }
  return dir + "/" + base + ".gz";
}
}  // namespace

Status LoadFashionMnist(const std::string& dir, bool train, Dataset* out, int limit) {
  const std::string prefix = train ? "train" : "t10k";
  const std::string ipath = FindFile(dir, prefix + "-images-idx3-ubyte");
  const std::string lpath = FindFile(dir, prefix + "-labels-idx1-ubyte");
  std::vector<uint8_t> ib, lb;
  Status s = ReadMaybeGzip(ipath, &ib);
  if (!s.ok()) return Status(s.code(), s.message() + " (install Debian's dataset-fashion-mnist, or pass --data-dir)");
  s = ReadMaybeGzip(lpath, &lb);
  if (!s.ok()) return s;
  std::vector<uint32_t> idims, ldims;
  const uint8_t *ip, *lp;
  if (!(s = ParseIdx(ib, ipath, 3, &idims, &ip)).ok()) return s;
  if (!(s = ParseIdx(lb, lpath, 1, &ldims, &lp)).ok()) return s;
  if (idims[0] != ldims[0])
    return Status::InvalidArgument(ipath + " has " + std::to_string(idims[0]) + " images but " + lpath + " has " +
                                   std::to_string(ldims[0]) + " labels");
  int n = static_cast<int>(idims[0]);
  if (limit > 0) n = std::min(n, limit);
  out->rows = n;
  out->cols = static_cast<int>(idims[1] * idims[2]);
  out->classes = 10;
  out->x.resize(static_cast<size_t>(n) * out->cols);
  out->y.resize(n);
  for (size_t i = 0; i < out->x.size(); ++i) out->x[i] = ip[i] * (1.0f / 255.0f);
  for (int i = 0; i < n; ++i) {
    if (lp[i] >= 10) return Status::InvalidArgument(lpath + ": label " + std::to_string(lp[i]) + " of example " + std::to_string(i) + " is not a class 0..9");
    out->y[i] = lp[i];
  }
  out->loaded = true;
  return Status::OK();
}

std::vector<uint32_t> EpochShard(uint32_t n, int rank, int world, uint64_t seed, int epoch, bool shuffle) {
  std::vector<uint32_t> perm(n);
  std::iota(perm.begin(), perm.end(), 0u);
  if (shuffle) {
    std::mt19937_64 rng(Mix64(seed * 1000003 + static_cast<uint64_t>(epoch)));
    for (uint32_t i = n; i > 1; --i) std::swap(perm[i - 1], perm[rng() % i]);
  }
  std::vector<uint32_t> mine;
  for (uint32_t i = static_cast<uint32_t>(rank); i < n; i += static_cast<uint32_t>(world)) mine.push_back(perm[i]);
  return mine;
}

namespace {
// Zipf on {1, 2, ...} with exponent s > 1 (Devroye's rejection method),
// rejecting values above n.
uint64_t Zipf(std::mt19937_64& rng, double s, uint64_t n) {
  std::uniform_real_distribution<double> u(0.0, 1.0);
  const double b = std::pow(2.0, s - 1.0);
  for (;;) {
    double U = 1.0 - u(rng), V = u(rng);
    double X = std::floor(std::pow(U, -1.0 / (s - 1.0)));
    if (X < 1 || X > static_cast<double>(n)) continue;
    double T = std::pow(1.0 + 1.0 / X, s - 1.0);
    if (V * X * (T - 1.0) / (b - 1.0) <= T / b) return static_cast<uint64_t>(X);
  }
}
double Gauss(uint64_t h) {
  double u1 = ((Mix64(h) >> 11) + 0.5) / 9007199254740992.0, u2 = ((Mix64(h + 1) >> 11) + 0.5) / 9007199254740992.0;
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
}
}  // namespace

float TrueClickWeight(const ClickLogOptions& o, uint64_t id) {
  return static_cast<float>(Gauss(Mix64(id ^ Mix64(o.seed))) * o.weight_scale);
}

void GenerateClicks(const ClickLogOptions& o, int stream, uint64_t first, uint32_t count, ClickBatch* out) {
  out->offsets.assign(1, 0);
  out->ids.clear();
  out->labels.clear();
  double bayes = 0;
  const float bias = TrueClickWeight(o, ~0ull);
  for (uint32_t k = 0; k < count; ++k) {
    const uint64_t index = first + k;
    std::mt19937_64 rng(Mix64(o.seed + 0x51ed27 * static_cast<uint64_t>(stream + 1)) ^ Mix64(index));
    double z = bias;
    for (int j = 0; j < o.ids_per_example; ++j) {
      // Feature ids are hashed ranks, as a hashing trick would produce.
      uint64_t id = Mix64(Zipf(rng, o.zipf_s, o.id_space)) % o.id_space;
      out->ids.push_back(id);
      z += TrueClickWeight(o, id);
    }
    const double p = 1.0 / (1.0 + std::exp(-z / std::sqrt(static_cast<double>(o.ids_per_example))));
    std::uniform_real_distribution<double> u(0.0, 1.0);
    out->labels.push_back(u(rng) < p ? 1.0f : 0.0f);
    out->offsets.push_back(static_cast<uint32_t>(out->ids.size()));
    bayes += std::max(p, 1.0 - p);
  }
  out->bayes_accuracy = count ? bayes / count : 0;
}

}  // namespace shardps::worker
