// _shardps: the C++ client for Python (pybind11). A thin layer: the arrays
// given are used in place (no copy), kept alive until their request is
// complete, and every call that may block releases the GIL. The Python
// package `shardps` (client/python/shardps/) wraps this module.
#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <charconv>
#include <chrono>
#include <cmath>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "client/python/ops_binding.h"
#include "client/python/readers_binding.h"
#include "shardps/client.h"

namespace py = pybind11;
using namespace shardps;

namespace {

// The exception classes, created in PYBIND11_MODULE.
PyObject* g_error = nullptr;
PyObject* g_by_code[16] = {};

[[noreturn]] void Raise(const Status& s) {
  const auto c = static_cast<size_t>(s.code());
  PyObject* cls = c < 16 && g_by_code[c] ? g_by_code[c] : g_error;
  PyErr_SetString(cls, s.ToString().c_str());
  throw py::error_already_set();
}

void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

std::chrono::milliseconds Ms(std::optional<double> seconds, std::chrono::milliseconds dflt) {
  if (!seconds) return dflt;
  if (std::isnan(*seconds) || *seconds < 0) throw py::value_error("timeout must be a number of seconds >= 0");
  return std::chrono::milliseconds(static_cast<int64_t>(std::min(*seconds, 1e9) * 1000.0));  // inf: ~31 years
}

// The float32 data of `a`, checked: dtype, C order, writeable (for pulls),
// and `floats` values, shaped (n, cols) or flat.
float* Floats(const py::array& a, uint64_t floats, uint64_t rows, uint32_t cols, bool writeable, const char* what) {
  if (!py::isinstance<py::array_t<float>>(a) || a.dtype().kind() != 'f' || a.itemsize() != 4)
    throw py::type_error(std::string(what) + " must be a float32 array, got dtype " +
                         std::string(py::str(a.dtype())) + " (convert once with .astype(numpy.float32))");
  if (!(a.flags() & py::array::c_style))
    throw py::value_error(std::string(what) + " must be C-contiguous (numpy.ascontiguousarray makes a copy once)");
  if (writeable && !a.writeable()) throw py::value_error(std::string(what) + " is read-only");
  const bool shape_ok = static_cast<uint64_t>(a.size()) == floats &&
                        (a.ndim() == 1 || (a.ndim() == 2 && static_cast<uint64_t>(a.shape(0)) == rows &&
                                           static_cast<uint64_t>(a.shape(1)) == cols));
  if (!shape_ok) {
    std::string shape = "(";
    for (py::ssize_t i = 0; i < a.ndim(); ++i) shape += (i ? ", " : "") + std::to_string(a.shape(i));
    shape += a.ndim() == 1 ? ",)" : ")";
    throw py::value_error(std::string(what) + " has shape " + shape + ", expected (" + std::to_string(rows) + ", " +
                          std::to_string(cols) + ") or (" + std::to_string(floats) + ",)");
  }
  return static_cast<float*>(const_cast<void*>(a.data()));
}

// A TableSpec as Python shows it: its fields in keyword form, those left at
// their defaults omitted (the optimizer's own ones shown with it).
std::string SpecRepr(const TableSpec& s) {
  auto num = [](float v) {  // the shortest text that reads back as this float
    char buf[32];
    return std::string(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  };
  std::string r = "TableSpec(name='" + s.name + "', kind=" + std::string(ToString(s.kind));
  if (s.kind == TableKind::kDense) r += ", rows=" + std::to_string(s.rows);
  r += ", cols=" + std::to_string(s.cols) + ", init=" + std::string(ToString(s.init));
  if (s.init != InitKind::kZeros) r += "(" + num(s.init_a) + ", " + num(s.init_b) + ")";
  if (s.seed) r += ", seed=" + std::to_string(s.seed);
  r += ", optimizer=" + std::string(ToString(s.optimizer)) + ", lr=" + num(s.lr);
  if (s.optimizer == OptimizerKind::kMomentum) r += ", momentum=" + num(s.momentum);
  if (s.optimizer == OptimizerKind::kAdam)
    r += ", beta1=" + num(s.beta1) + ", beta2=" + num(s.beta2) + ", eps=" + num(s.eps);
  if (s.optimizer == OptimizerKind::kAdagrad)
    r += ", eps=" + num(s.eps) + ", initial_accumulator=" + num(s.initial_accumulator);
  if (s.max_rows) r += ", max_rows=" + std::to_string(s.max_rows);
  if (s.dtype != DType::kF32) r += ", dtype=" + std::string(ToString(s.dtype));
  if (s.admit_after) r += ", admit_after=" + std::to_string(s.admit_after);
  if (s.evict_after_clocks) r += ", evict_after_clocks=" + std::to_string(s.evict_after_clocks);
  if (s.evict_after_sec) r += ", evict_after_sec=" + std::to_string(s.evict_after_sec);
  if (s.cold_tier) r += ", cold_tier=True";
  if (s.wire.dtype != DType::kF32) r += ", wire_dtype=" + std::string(ToString(s.wire.dtype));
  if (s.wire.compress != Compression::kNone) r += ", compress=" + std::string(ToString(s.wire.compress));
  return r + ")";
}

std::span<const uint64_t> Ids(const py::array& ids) {
  if (ids.ndim() != 1 || ids.itemsize() != 8 || (ids.dtype().kind() != 'u' && ids.dtype().kind() != 'i'))
    throw py::type_error("ids must be a 1-d uint64 (or int64) array, got dtype " + std::string(py::str(ids.dtype())) +
                         " with " + std::to_string(ids.ndim()) + " dimensions");
  if (!(ids.flags() & py::array::c_style)) throw py::value_error("ids must be C-contiguous");
  if (ids.dtype().kind() == 'i') {
    // An int64 id below 0 would be read as a uint64 near 2^64: refused, as
    // the torch modules refuse it.
    const auto* v = static_cast<const int64_t*>(ids.data());
    for (py::ssize_t i = 0; i < ids.size(); ++i)
      if (v[i] < 0)
        throw py::index_error("id " + std::to_string(v[i]) + " at position " + std::to_string(i) +
                              " is negative (ids are uint64, or int64 >= 0)");
  }
  return {static_cast<const uint64_t*>(ids.data()), static_cast<size_t>(ids.size())};
}

// A request and what must live until it completes.
struct PyRequest {
  Request req;
  py::object keep = py::none();    // the caller's array (values read or written by the I/O thread)
  py::object result = py::none();  // what wait() returns (a pull's array)
};

class PyClient {
 public:
  PyClient(const std::string& coordinator, int rank, const std::string& role, double connect_timeout,
           double request_timeout, const std::string& key, const std::string& metrics_url) {
    ClientOptions o;
    o.coordinator = coordinator;
    o.key_file = key;
    o.metrics_url = metrics_url;
    o.rank = rank;
    if (role == "worker") {
      o.role = ClientRole::kWorker;
    } else if (role == "observer") {
      o.role = ClientRole::kObserver;
    } else {
      throw py::value_error("role must be 'worker' or 'observer', got '" + role + "'");
    }
    o.connect_timeout = Ms(connect_timeout, o.connect_timeout);
    o.request_timeout = Ms(request_timeout, o.request_timeout);
    request_timeout_ = o.request_timeout;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = Client::Connect(o, &c_);
    }
    Check(s);
  }
  ~PyClient() {
    // The client (and its ZeroMQ context, which may still be sending from
    // a borrowed array) goes first; only then may the arrays go.
    if (c_) {
      py::gil_scoped_release nogil;
      c_.reset();
    }
  }

  Table CreateTable(const TableSpec& spec) {
    Table t;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = live()->CreateTable(spec, &t);
    }
    Check(s);
    return t;
  }
  Table GetTable(const std::string& name) {
    Table t;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = live()->GetTable(name, &t);
    }
    Check(s);
    return t;
  }

  // A push (`assign` false: gradients) or an assign (the rows themselves) of
  // `values`: by ids, a row range, or the whole dense table.
  std::shared_ptr<PyRequest> Write(const Table& t, const py::array& values, py::object rows, py::object ids,
                                   bool assign) {
    const char* what = assign ? "values" : "grads";
    auto r = std::make_shared<PyRequest>();
    r->keep = values;
    if (!ids.is_none()) {
      py::array ida = ids.cast<py::array>();
      auto k = Ids(ida);
      const float* v = Floats(values, k.size() * t.cols(), k.size(), t.cols(), false, what);
      r->keep = py::make_tuple(values, ida);
      const std::span<const float> vs{v, k.size() * t.cols()};
      r->req = assign ? live()->Assign(t, k, vs) : live()->Push(t, k, vs);
    } else {
      const RowRange rr = rows.is_none() ? (Dense(t), RowRange{0, t.rows()}) : Range(t, rows);
      const uint64_t n = rr.end - rr.begin;
      const float* v = rows.is_none() ? Floats(values, t.size(), t.rows(), t.cols(), false, what)
                                      : Floats(values, n * t.cols(), n, t.cols(), false, what);
      const std::span<const float> vs{v, n * t.cols()};
      r->req = assign ? live()->Assign(t, rr, vs) : live()->Push(t, rr, vs);
    }
    Track(r);
    return r;
  }
  std::shared_ptr<PyRequest> Push(const Table& t, const py::array& grads, py::object rows, py::object ids) {
    return Write(t, grads, std::move(rows), std::move(ids), false);
  }
  // Client::Assign: the rows themselves.
  std::shared_ptr<PyRequest> Assign(const Table& t, const py::array& values, py::object rows, py::object ids) {
    return Write(t, values, std::move(rows), std::move(ids), true);
  }

  std::shared_ptr<PyRequest> Pull(const Table& t, py::object out, py::object rows, py::object ids, bool prefetch) {
    auto r = std::make_shared<PyRequest>();
    uint64_t n;
    RowRange rr{};
    py::array ida;
    std::span<const uint64_t> k;
    if (!ids.is_none()) {
      if (prefetch) throw py::value_error("prefetch() reads the whole dense table: no ids");
      ida = ids.cast<py::array>();
      k = Ids(ida);
      n = k.size();
    } else if (!rows.is_none()) {
      if (prefetch) throw py::value_error("prefetch() reads the whole dense table: no rows");
      rr = Range(t, rows);
      n = rr.end - rr.begin;
    } else {
      Dense(t);
      n = t.rows();
    }
    py::array arr = out.is_none() ? py::array_t<float>({static_cast<py::ssize_t>(n), static_cast<py::ssize_t>(t.cols())})
                                  : out.cast<py::array>();
    float* dst = Floats(arr, n * t.cols(), n, t.cols(), true, "out");
    std::span<float> span(dst, n * t.cols());
    if (!ids.is_none()) {
      r->req = live()->Pull(t, k, span);
      r->keep = py::make_tuple(arr, ida);
    } else if (!rows.is_none()) {
      r->req = live()->Pull(t, rr, span);
      r->keep = arr;
    } else {
      r->req = prefetch ? live()->Prefetch(t, span) : live()->Pull(t, span);
      r->keep = arr;
    }
    r->result = arr;
    Track(r);
    return r;
  }

  void Clock() {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = live()->Clock();
    }
    Check(s);
  }
  // The tick as a request: the caller goes on (its pulls queue behind it).
  std::shared_ptr<PyRequest> ClockAsync() {
    auto r = std::make_shared<PyRequest>();
    r->req = live()->ClockAsync();
    Track(r);
    return r;
  }
  void AddSamples(uint64_t n) { live()->AddSamples(n); }
  void Barrier(std::optional<double> timeout) {
    const auto ms = Ms(timeout, request_timeout_);
    Status s;
    {
      py::gil_scoped_release nogil;
      s = live()->Barrier(ms);
    }
    Check(s);
  }
  py::tuple ClaimWork(uint64_t pool, uint64_t total, uint32_t max_units) {
    WorkRange w;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = live()->ClaimWork(pool, total, max_units, &w);
    }
    Check(s);
    return py::make_tuple(w.begin, w.end);
  }
  void Close() {
    if (!c_) return;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = c_->Close();
      c_.reset();  // its ZeroMQ context ends: no frame borrows an array any more
    }
    pending_.clear();
    Check(s);
  }

  Client* live() {
    if (!c_) throw py::value_error("the client is closed");
    return c_.get();
  }
  std::unique_ptr<Client>& raw() { return c_; }

 private:
  static void Dense(const Table& t) {
    if (t.spec.kind != TableKind::kDense)
      throw py::value_error("table '" + t.spec.name + "' is sparse: give ids=");
  }
  static RowRange Range(const Table& t, py::object rows) {
    Dense(t);
    auto p = rows.cast<std::pair<uint64_t, uint64_t>>();
    if (p.first >= p.second || p.second > t.rows())
      throw py::value_error("rows (" + std::to_string(p.first) + ", " + std::to_string(p.second) +
                            ") must be a non-empty range within the table's " + std::to_string(t.rows()) + " rows");
    return {p.first, p.second};
  }
  // Remembers a request so its arrays outlive a caller that drops it; the
  // completed ones are forgotten on the next call.
  void Track(const std::shared_ptr<PyRequest>& r) {
    std::vector<std::shared_ptr<PyRequest>> still;
    still.reserve(pending_.size() + 1);
    for (auto& p : pending_) {
      // A failed request may leave a borrowed frame queued in ZeroMQ (a
      // server unreachable): its array is kept until Close().
      if (!p->req.Done() || !p->req.Wait(std::chrono::milliseconds(0)).ok()) still.push_back(std::move(p));
    }
    still.push_back(r);
    pending_.swap(still);
  }

  std::unique_ptr<Client> c_;
  std::chrono::milliseconds request_timeout_{120000};
  std::vector<std::shared_ptr<PyRequest>> pending_;
};

}  // namespace

PYBIND11_MODULE(_shardps, m) {
  m.doc() = "shardps client (C++), see the `shardps` package";
  g_error = PyErr_NewExceptionWithDoc("shardps.Error", "A shardps request failed; the message says what and where.",
                                      PyExc_RuntimeError, nullptr);
  m.attr("Error") = py::handle(g_error);
  auto sub = [&](const char* name, const char* doc, PyObject* also, std::initializer_list<Code> codes) {
    PyObject* bases = also ? PyTuple_Pack(2, g_error, also) : PyTuple_Pack(1, g_error);
    PyObject* cls = PyErr_NewExceptionWithDoc((std::string("shardps.") + name).c_str(), doc, bases, nullptr);
    Py_DECREF(bases);
    m.attr(name) = py::handle(cls);
    for (Code c : codes) g_by_code[static_cast<size_t>(c)] = cls;
  };
  sub("TimeoutError", "No answer in time.", PyExc_TimeoutError, {Code::kTimeout});
  sub("UnavailableError", "A server or the coordinator is gone, or the client is closed.", nullptr,
      {Code::kUnavailable, Code::kNotReady});
  sub("InvalidArgumentError", "The request is wrong: shape, range, ids, table spec.", PyExc_ValueError,
      {Code::kInvalidArgument, Code::kOutOfRange, Code::kSizeMismatch, Code::kTooLarge, Code::kBadMessage});
  sub("NotFoundError", "No table of that name or id.", PyExc_KeyError, {Code::kUnknownTable});
  sub("ConflictError", "A table of that name exists with another shape, or a pool with another size.", nullptr,
      {Code::kConflict, Code::kStaleClock});
  sub("PermissionDeniedError", "This client's key role may not do that (docs/security.md).", PyExc_PermissionError,
      {Code::kPermissionDenied});

  py::enum_<TableKind>(m, "TableKind").value("dense", TableKind::kDense).value("sparse", TableKind::kSparse);
  py::enum_<InitKind>(m, "InitKind")
      .value("zeros", InitKind::kZeros).value("constant", InitKind::kConstant)
      .value("uniform", InitKind::kUniform).value("normal", InitKind::kNormal);
  py::enum_<OptimizerKind>(m, "OptimizerKind")
      .value("sgd", OptimizerKind::kSGD).value("momentum", OptimizerKind::kMomentum)
      .value("adagrad", OptimizerKind::kAdagrad).value("adam", OptimizerKind::kAdam);
  py::enum_<StalenessRule>(m, "StalenessRule")
      .value("default", StalenessRule::kDefault).value("none", StalenessRule::kNone)
      .value("scale_lr", StalenessRule::kScaleLr).value("dc", StalenessRule::kDelayCompensation);
  m.def(
      "parse_compression",
      [](const std::string& s) {
        Compression c;
        float fraction = 0.01f;
        Check(ParseCompression(s, &c, &fraction));
        return py::make_tuple(c, fraction);
      },
      "\"none\", \"sign\" or \"topk:F\" as (Compression, fraction); InvalidArgumentError saying what is wrong");
  py::enum_<Compression>(m, "Compression")
      .value("none", Compression::kNone).value("topk", Compression::kTopK).value("sign", Compression::kSign);
  py::enum_<DType>(m, "DType").value("f32", DType::kF32).value("bf16", DType::kBF16).value("f16", DType::kF16);

  py::class_<TableSpec>(m, "TableSpec")
      .def(py::init<>())
      .def_readwrite("name", &TableSpec::name).def_readwrite("kind", &TableSpec::kind)
      .def_readwrite("rows", &TableSpec::rows).def_readwrite("cols", &TableSpec::cols)
      .def_readwrite("init", &TableSpec::init).def_readwrite("init_a", &TableSpec::init_a)
      .def_readwrite("init_b", &TableSpec::init_b).def_readwrite("seed", &TableSpec::seed)
      .def_readwrite("optimizer", &TableSpec::optimizer).def_readwrite("lr", &TableSpec::lr)
      .def_readwrite("momentum", &TableSpec::momentum).def_readwrite("beta1", &TableSpec::beta1)
      .def_readwrite("beta2", &TableSpec::beta2).def_readwrite("eps", &TableSpec::eps)
      .def_readwrite("initial_accumulator", &TableSpec::initial_accumulator)
      .def_readwrite("max_rows", &TableSpec::max_rows)
      .def_readwrite("staleness_rule", &TableSpec::staleness_rule)
      .def_readwrite("dc_lambda", &TableSpec::dc_lambda)
      .def_readwrite("dtype", &TableSpec::dtype).def_readwrite("admit_after", &TableSpec::admit_after)
      .def_readwrite("evict_after_clocks", &TableSpec::evict_after_clocks)
      .def_readwrite("evict_after_sec", &TableSpec::evict_after_sec)
      .def_readwrite("cold_tier", &TableSpec::cold_tier)
      .def_property(
          "wire_dtype", [](const TableSpec& s) { return s.wire.dtype; }, [](TableSpec& s, DType d) { s.wire.dtype = d; })
      .def_property(
          "compress", [](const TableSpec& s) { return s.wire.compress; },
          [](TableSpec& s, Compression c) { s.wire.compress = c; })
      .def_property(
          "topk_fraction", [](const TableSpec& s) { return s.wire.topk_fraction; },
          [](TableSpec& s, float f) { s.wire.topk_fraction = f; })
      .def("validate", [](const TableSpec& s) { Check(s.Validate()); })
      .def("__repr__", &SpecRepr);

  py::class_<Table>(m, "Table")
      .def_readonly("id", &Table::id)
      .def_property_readonly("name", [](const Table& t) { return t.spec.name; })
      .def_property_readonly("rows", &Table::rows)
      .def_property_readonly("cols", &Table::cols)
      .def_property_readonly("dense", [](const Table& t) { return t.spec.kind == TableKind::kDense; })
      .def_property_readonly("dtype", [](const Table& t) { return std::string(ToString(t.spec.dtype)); })
      .def_readonly("spec", &Table::spec)
      // The number type this handle's pulls and pushes travel in (dense
      // tables): the table's default, or what it was set to on this handle.
      .def_property(
          "wire_dtype", [](const Table& t) { return std::string(ToString(t.spec.wire.dtype)); },
          [](Table& t, const std::string& d) {
            TableSpec s = t.spec;
            Check(Parse(d, &s.wire.dtype));
            Check(s.ValidateWire());
            t.spec = s;
          })
      // This handle's pushes' compression (dense tables, docs/compression.md):
      // "none", "sign" or "topk:F".
      .def_property(
          "compress",
          [](const Table& t) {
            std::string s(ToString(t.spec.wire.compress));
            if (t.spec.wire.compress == Compression::kTopK) s += ":" + std::to_string(t.spec.wire.topk_fraction);
            return s;
          },
          [](Table& t, const std::string& c) {
            TableSpec s = t.spec;
            Check(ParseCompression(c, &s.wire.compress, &s.wire.topk_fraction));
            Check(s.ValidateWire());
            t.spec = s;
          })
      .def("__repr__", [](const Table& t) {
        return "<shardps.Table '" + t.spec.name + "' " + std::string(ToString(t.spec.kind)) + " " +
               (t.spec.kind == TableKind::kDense ? std::to_string(t.rows()) + "x" : "?x") + std::to_string(t.cols()) +
               (t.spec.dtype == DType::kF32 ? "" : " " + std::string(ToString(t.spec.dtype))) + ">";
      });

  py::class_<PyRequest, std::shared_ptr<PyRequest>>(m, "Request")
      .def("wait", [](PyRequest& r, std::optional<double> timeout) -> py::object {
            Status s;
            {
              py::gil_scoped_release nogil;
              s = timeout ? r.req.Wait(Ms(timeout, {})) : r.req.Wait();
            }
            Check(s);
            return r.result;
          }, py::arg("timeout") = py::none())
      .def("done", [](const PyRequest& r) { return r.req.Done(); })
      .def_property_readonly("min_clock", [](const PyRequest& r) { return r.req.min_clock(); })
      .def_property_readonly("max_clock", [](const PyRequest& r) { return r.req.max_clock(); })
      .def_property_readonly("staleness", [](const PyRequest& r) { return r.req.staleness(); })
      .def("updates_since", [](const PyRequest& r, const PyRequest& earlier) {
            return r.req.stamp().UpdatesSince(earlier.req.stamp());
          }, py::arg("earlier"));

  // The Criteo TSV readers (readers_binding.cc).
  python::BindReaders(m, &Check, [](py::handle client) { return client.cast<PyClient&>().live(); });
  python::BindOps(m);

  // Client::HoldRequests's hold (shardps.Client.hold_requests() ends it).
  py::class_<HeldRequests>(m, "HeldRequests").def("release", &HeldRequests::Release);

  py::class_<PyClient>(m, "Client")
      .def(py::init<const std::string&, int, const std::string&, double, double, const std::string&,
                    const std::string&>(),
           py::arg("coordinator"), py::arg("rank"), py::arg("role"), py::arg("connect_timeout"),
           py::arg("request_timeout"), py::arg("key") = "", py::arg("metrics_url") = "")
      .def("create_table", &PyClient::CreateTable)
      .def("table", &PyClient::GetTable)
      .def("assign", &PyClient::Assign, py::arg("table"), py::arg("values"), py::arg("rows") = py::none(),
           py::arg("ids") = py::none())
      .def("push", &PyClient::Push, py::arg("table"), py::arg("grads"), py::arg("rows") = py::none(),
           py::arg("ids") = py::none())
      .def("pull", &PyClient::Pull, py::arg("table"), py::arg("out") = py::none(), py::arg("rows") = py::none(),
           py::arg("ids") = py::none(), py::arg("prefetch") = false)
      .def("clock", &PyClient::Clock)
      .def("clock_async", &PyClient::ClockAsync)
      .def("barrier", &PyClient::Barrier, py::arg("timeout") = py::none())
      .def("add_samples", &PyClient::AddSamples, py::arg("n"),
           "Counts n more training examples done by this worker (sent with its heartbeats: "
           "shardps_worker_samples_total{worker} on the coordinator)")
      .def("claim_work", &PyClient::ClaimWork)
      .def("hold_requests", [](PyClient& c) { return c.live()->HoldRequests(); }, py::keep_alive<0, 1>())
      .def("close", &PyClient::Close)
      .def_property_readonly("rank", [](PyClient& c) { return c.live()->rank(); })
      .def_property_readonly("clock_value", [](PyClient& c) { return c.live()->clock(); })
      .def_property_readonly("consistency", [](PyClient& c) { return std::string(ToString(c.live()->consistency())); })
      .def_property_readonly("staleness", [](PyClient& c) { return c.live()->staleness(); })
      .def_property_readonly("num_servers", [](PyClient& c) { return c.live()->num_servers(); })
      .def_property_readonly("num_workers", [](PyClient& c) { return c.live()->num_workers(); })
      .def_property_readonly("stop_requested", [](PyClient& c) { return c.live()->StopRequested(); });
}
