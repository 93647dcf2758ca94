// The Criteo readers' Python classes (readers_binding.cc), bound into the
// _shardps module by module.cc.
#pragma once

#include <pybind11/pybind11.h>

#include "shardps/client.h"
#include "shardps/status.h"

namespace shardps::python {

// Binds CriteoReader and CriteoPoolReader into `m`. `check` raises a failed
// Status as the module's exception; `client_of` is the Client of a
// shardps Client object (raising when it is closed).
void BindReaders(pybind11::module_& m, void (*check)(const Status&), Client* (*client_of)(pybind11::handle));

}  // namespace shardps::python
