// The Python bindings of the Criteo readers (criteo_reader.h,
// pool_reader.h): iterators of NumPy batches whose next() waits without
// the GIL.
#include "client/python/readers_binding.h"

#include <pybind11/numpy.h>

#include <cstring>
#include <memory>
#include <string>

#include "client/python/criteo_reader.h"
#include "client/python/pool_reader.h"

namespace py = pybind11;

namespace shardps::python {

namespace {

// A batch as NumPy arrays: (labels (n,), dense (n, 13), keys (n, 26)).
py::tuple BatchArrays(const CriteoBatch& b) {
  const py::ssize_t n = b.size;
  py::array_t<float> y(n), x({n, py::ssize_t{13}});
  py::array_t<int64_t> k({n, py::ssize_t{26}});
  std::memcpy(y.mutable_data(), b.labels.data(), b.labels.size() * sizeof(float));
  std::memcpy(x.mutable_data(), b.dense.data(), b.dense.size() * sizeof(float));
  std::memcpy(k.mutable_data(), b.keys.data(), b.keys.size() * sizeof(int64_t));
  return py::make_tuple(y, x, k);
}

// A work-pool reader and the client object it claims with (kept alive by
// the reference; closed: client_of raises).
struct PoolReader {
  py::object client;
  Client* at_open = nullptr;
  std::unique_ptr<PoolCriteoReader> reader;
};

void BindFileReader(py::module_& m, void (*check)(const Status&)) {
  // The Criteo TSV reader (criteo_reader.h): an iterator of numpy batches,
  // parsed a few batches ahead by a C++ thread; next() waits without the GIL.
  py::class_<CriteoReader>(m, "CriteoReader")
      .def(py::init([check](const std::string& path, uint32_t batch, uint32_t rank, uint32_t world, uint64_t rows,
                       int64_t steps, uint32_t chunk_batches, uint64_t seed, uint64_t epoch, uint32_t ahead,
                       bool shuffle, bool last_partial) {
             CriteoReaderOptions o;
             o.path = path;
             o.batch = batch;
             o.rank = rank;
             o.world = world;
             o.rows = rows;
             o.steps = steps;
             o.chunk_batches = chunk_batches;
             o.seed = seed;
             o.epoch = epoch;
             o.ahead = ahead;
             o.shuffle = shuffle;
             o.last_partial = last_partial;
             std::unique_ptr<CriteoReader> r;
             Status s;
             {
               py::gil_scoped_release nogil;
               s = CriteoReader::Open(o, &r);
             }
             check(s);
             return r;
           }),
           py::arg("path"), py::arg("batch") = 128, py::kw_only(), py::arg("rank") = 0, py::arg("world") = 1,
           py::arg("rows") = 1 << 20, py::arg("steps") = -1, py::arg("chunk_batches") = 64, py::arg("seed") = 1,
           py::arg("epoch") = 1, py::arg("ahead") = 4, py::arg("shuffle") = true, py::arg("last_partial") = false)
      .def_property_readonly("lines", &CriteoReader::lines)
      .def_property_readonly("steps", &CriteoReader::steps)
      .def("__len__", &CriteoReader::steps)
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", [check](CriteoReader& r) {
        CriteoBatch b;
        bool got = false;
        Status s;
        {
          py::gil_scoped_release nogil;
          s = r.Next(&b, &got);
        }
        check(s);
        if (!got) throw py::stop_iteration();
        return BatchArrays(b);
      });
}

void BindPoolReader(py::module_& m, void (*check)(const Status&), Client* (*client_of)(py::handle)) {
  // The same batches from the job's work pool (pool_reader.h), as
  // shardps-worker reads them; the client (a worker's) stays open while
  // the reader is used.
  py::class_<PoolReader>(m, "CriteoPoolReader")
      .def(py::init([check, client_of](py::object client, const std::string& path, uint32_t batch, uint64_t rows,
                                       int epoch, uint32_t chunk_batches) {
             PoolReaderOptions o;
             o.path = path;
             o.batch = batch;
             o.rows = rows;
             o.epoch = epoch;
             o.chunk = chunk_batches;
             auto r = std::make_unique<PoolReader>();
             r->client = client;
             r->at_open = client_of(client);
             Status s;
             {
               py::gil_scoped_release nogil;
               s = PoolCriteoReader::Open(r->at_open, o, &r->reader);
             }
             check(s);
             return r;
           }),
           py::arg("client"), py::arg("path"), py::arg("batch") = 128, py::kw_only(), py::arg("rows") = 1 << 20,
           py::arg("epoch") = 1, py::arg("chunk_batches") = 4)
      .def_property_readonly("lines", [](const PoolReader& r) { return r.reader->lines(); })
      .def_property_readonly("handed", [](const PoolReader& r) { return r.reader->handed(); })
      .def("__iter__", [](py::object self) { return self; })
      .def("__next__", [check, client_of](PoolReader& r) {
        if (client_of(r.client) != r.at_open) throw py::value_error("the reader's client was replaced");
        CriteoBatch b;
        bool got = false;
        Status s;
        {
          py::gil_scoped_release nogil;
          s = r.reader->Next(&b, &got);
        }
        check(s);
        if (!got) throw py::stop_iteration();
        return BatchArrays(b);
      });
}

}  // namespace

void BindReaders(py::module_& m, void (*check)(const Status&), Client* (*client_of)(py::handle)) {
  BindFileReader(m, check);
  BindPoolReader(m, check, client_of);
}

}  // namespace shardps::python
