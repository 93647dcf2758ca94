#include "shardps/types.h"

#include <cmath>
#include <cstdlib>
#include <string>

namespace shardps {

namespace {
template <typename E, size_t N>
Status ParseName(std::string_view s, const char* const (&names)[N], E* out, const char* what) {
  for (size_t i = 0; i < N; ++i)
    if (s == names[i]) {
      *out = static_cast<E>(i);
      return Status::OK();
    }
  std::string valid;
  for (size_t i = 0; i < N; ++i) valid += (i ? ", " : "") + std::string(names[i]);
  return Status::InvalidArgument("unknown " + std::string(what) + " '" + std::string(s) +
                                 "' (valid: " + valid + ")");
}
const char* const kKinds[] = {"dense", "sparse"};
const char* const kInits[] = {"zeros", "constant", "uniform", "normal"};
const char* const kOpts[] = {"sgd", "momentum", "adagrad", "adam"};
const char* const kCons[] = {"sync", "bounded", "async"};
const char* const kRules[] = {"default", "none", "scale-lr", "dc"};
const char* const kDTypes[] = {"f32", "bf16", "f16"};
const char* const kCompressions[] = {"none", "topk", "sign"};
}  // namespace

std::string_view ToString(TableKind k) { return kKinds[static_cast<int>(k)]; }
std::string_view ToString(InitKind k) { return kInits[static_cast<int>(k)]; }
std::string_view ToString(OptimizerKind k) { return kOpts[static_cast<int>(k)]; }
std::string_view ToString(Consistency c) { return kCons[static_cast<int>(c)]; }
Status Parse(std::string_view s, TableKind* out) { return ParseName(s, kKinds, out, "table kind"); }
Status Parse(std::string_view s, InitKind* out) { return ParseName(s, kInits, out, "initializer"); }
Status Parse(std::string_view s, OptimizerKind* out) { return ParseName(s, kOpts, out, "optimizer"); }
Status Parse(std::string_view s, Consistency* out) { return ParseName(s, kCons, out, "consistency"); }
std::string_view ToString(StalenessRule r) { return kRules[static_cast<int>(r)]; }
Status Parse(std::string_view s, StalenessRule* out) { return ParseName(s, kRules, out, "staleness rule"); }
std::string_view ToString(DType d) { return kDTypes[static_cast<int>(d)]; }
Status Parse(std::string_view s, DType* out) { return ParseName(s, kDTypes, out, "dtype"); }
std::string_view ToString(Compression c) { return kCompressions[static_cast<int>(c)]; }
Status Parse(std::string_view s, Compression* out) { return ParseName(s, kCompressions, out, "compression"); }
Status ParseCompression(std::string_view s, Compression* out, float* fraction) {
  const size_t colon = s.find(':');
  SHARDPS_RETURN_IF_ERROR(Parse(s.substr(0, colon), out));
  if (colon == std::string_view::npos) return Status::OK();
  const std::string f(s.substr(colon + 1));
  if (*out != Compression::kTopK)
    return Status::InvalidArgument("compression '" + std::string(s) + "': only topk takes a fraction (topk:F)");
  char* end = nullptr;
  const double v = std::strtod(f.c_str(), &end);
  if (f.empty() || *end != '\0' || !(v > 0 && v <= 1))
    return Status::InvalidArgument("compression '" + std::string(s) + "': the fraction must be a number in (0, 1]");
  *fraction = static_cast<float>(v);
  return Status::OK();
}

Status TableSpec::Validate() const {
  auto bad = [&](const std::string& what) {
    return Status::InvalidArgument("table '" + name + "': " + what);
  };
  if (name.empty()) return Status::InvalidArgument("table name is empty");
  if (name.size() > 256) return bad("name longer than 256 characters");
  if (static_cast<int>(kind) > 1) return bad("unknown kind");
  if (kind == TableKind::kDense && rows == 0) return bad("a dense table needs rows > 0");
  if (kind == TableKind::kDense && rows > (1ull << 40)) return bad("rows > 2^40");
  if (cols == 0) return bad("cols must be > 0");
  if (cols > (1u << 24)) return bad("cols > 2^24");
  // rows x cols floats (and the optimizer's state beside them) must be
  // addressable: at most 2^48 values.
  if (kind == TableKind::kDense && rows > (1ull << 48) / cols)
    return bad("rows x cols = " + std::to_string(rows) + " x " + std::to_string(cols) + " is more than 2^48 values");
  if (kind == TableKind::kDense && max_rows != 0) return bad("max_rows is for sparse tables (a dense table has rows)");
  if (static_cast<int>(init) > 3) return bad("unknown initializer");
  if (!std::isfinite(init_a) || !std::isfinite(init_b)) return bad("initializer arguments must be finite");
  if (init == InitKind::kUniform && !(init_a < init_b)) return bad("uniform initializer needs low < high");
  if (init == InitKind::kNormal && !(init_b >= 0)) return bad("normal initializer needs stddev >= 0");
  if (static_cast<int>(optimizer) > 3) return bad("unknown optimizer");
  if (static_cast<int>(staleness_rule) > 3) return bad("unknown staleness rule");
  if (!(dc_lambda >= 0) || !std::isfinite(dc_lambda)) return bad("dc_lambda must be finite and >= 0");
  if (!std::isfinite(lr) || lr < 0) return bad("lr must be finite and >= 0");
  if (!(momentum >= 0 && momentum < 1)) return bad("momentum must be in [0, 1)");
  if (!(beta1 >= 0 && beta1 < 1)) return bad("beta1 must be in [0, 1)");
  if (!(beta2 >= 0 && beta2 < 1)) return bad("beta2 must be in [0, 1)");
  if (!(eps > 0) || !std::isfinite(eps)) return bad("eps must be finite and > 0");
  if (!(initial_accumulator >= 0) || !std::isfinite(initial_accumulator))
    return bad("initial_accumulator must be finite and >= 0");
  if (static_cast<int>(dtype) > 2) return bad("unknown dtype");
  if (kind == TableKind::kDense && (dtype != DType::kF32 || admit_after > 1 || evict_after_clocks || evict_after_sec))
    return bad("dtype, admit_after and evict_after_* are for sparse tables");
  if (kind == TableKind::kDense && cold_tier) return bad("cold_tier is for sparse tables (a dense table is held in memory)");
  SHARDPS_RETURN_IF_ERROR(ValidateWire());
  if (admit_after > 255) return bad("admit_after must be at most 255");
  if (evict_after_clocks && evict_after_sec) return bad("evict_after_clocks and evict_after_sec: give one of them");
  return Status::OK();
}

Status TableSpec::ValidateWire() const {
  auto bad = [&](const std::string& what) { return Status::InvalidArgument("table '" + name + "': " + what); };
  if (static_cast<int>(wire.dtype) > 2) return bad("unknown wire_dtype");
  if (kind == TableKind::kSparse && wire.dtype != DType::kF32)
    return bad("wire_dtype is for dense tables (a sparse table's values travel in its dtype)");
  if (static_cast<int>(wire.compress) > 2) return bad("unknown compression");
  if (kind == TableKind::kSparse && wire.compress != Compression::kNone) return bad("compress is for dense tables");
  if (!(wire.topk_fraction > 0 && wire.topk_fraction <= 1)) return bad("topk_fraction must be in (0, 1]");
  if (wire.compress != Compression::kNone && staleness_rule == StalenessRule::kDelayCompensation)
    return bad("compress and staleness_rule dc do not combine (the servers would compensate a residual computed on "
               "older values)");
  return Status::OK();
}

bool TableSpec::SameShape(const TableSpec& o) const {
  return name == o.name && kind == o.kind && (kind == TableKind::kSparse || rows == o.rows) &&
         cols == o.cols && init == o.init && init_a == o.init_a && init_b == o.init_b &&
         seed == o.seed && optimizer == o.optimizer && lr == o.lr && momentum == o.momentum &&
         beta1 == o.beta1 && beta2 == o.beta2 && eps == o.eps &&
         initial_accumulator == o.initial_accumulator &&
         staleness_rule == o.staleness_rule && dc_lambda == o.dc_lambda && dtype == o.dtype &&
         admit_after == o.admit_after && evict_after_clocks == o.evict_after_clocks &&
         evict_after_sec == o.evict_after_sec;  // max_rows and wire aside: a limit, a transport
}

}  // namespace shardps
