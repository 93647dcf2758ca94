"""shardps: the parameter-server client for Python trainers.

A thin layer over the C++ client (the `_shardps` extension): pushes send the
caller's float32 array without copying it, pulls fill the caller's array in
place, every call that may block releases the GIL, and a failed request
raises a `shardps.Error` subclass carrying the server's message.

    import numpy as np, shardps
    with shardps.connect("tcp://10.0.0.1:5555", rank=0) as ps:
        w = ps.create_table("w", rows=784, cols=10, init="normal", stddev=0.01, optimizer="sgd", lr=0.1)
        params = ps.pull(w)                 # (784, 10) float32, a new array
        ps.pull(w, out=params)              # or into yours, in place
        ps.push(w, grads)                   # grads: (784, 10) float32, C order
        ps.clock()                          # end of this iteration

PyTorch: `shardps.torch` (docs/python.md).
"""

import contextlib
import json
import operator
import os

try:
    from . import _shardps as _ext  # installed: the extension inside the package
except ImportError:  # the build tree: build/client/python on sys.path
    import _shardps as _ext

Error = _ext.Error
TimeoutError = _ext.TimeoutError
UnavailableError = _ext.UnavailableError
InvalidArgumentError = _ext.InvalidArgumentError
NotFoundError = _ext.NotFoundError
ConflictError = _ext.ConflictError
PermissionDeniedError = _ext.PermissionDeniedError
Table = _ext.Table
Request = _ext.Request
CriteoReader = _ext.CriteoReader
CriteoReader.__doc__ = """CriteoReader(path, batch=128, *, rank=0, world=1, rows=2**20, steps=-1,
chunk_batches=64, seed=1, epoch=1, ahead=4, shuffle=True, last_partial=False)

One worker's batches of a Criteo-format TSV log, parsed by shardps-worker's
C++ parser on a thread of its own, `ahead` batches ahead; iterating waits
without the GIL and yields (labels (n,) float32, dense (n, 13) float32
log(1 + max(x, 0)), keys (n, 26) int64 = feature << 56 | row, row 0 a
missing value, else hash % (rows - 1) + 1; rows=0: a row per value). The
log is read in chunks of chunk_batches * world * batch lines, each shuffled
the same way on every worker (seed, epoch); batch k goes to worker
k % world, `steps` of them (default: lines // (batch * world), the same for
every worker). shuffle=False, last_partial=True: every line in file order
(evaluation). A malformed line raises InvalidArgumentError naming the
file, the line and the field. `lines` and `steps` (also len()) say how
much there is."""



def CriteoPoolReader(client, path, batch=128, *, rows=2**20, epoch=1, chunk_batches=4):
    """This worker's batches of a Criteo-format TSV log for epoch `epoch`,
    taken from the job's work pool as shardps-worker takes them (pool id:
    the epoch; units: the log's lines, in file order): under sync one batch
    per clock, the clock's batches cut over the live workers in rank order
    and each handed out once (a dead worker's batch goes to another; every
    worker takes the same steps; where this worker has no batch at a clock
    but the epoch goes on, the reader ticks an empty clock itself); under
    bounded staleness and async `chunk_batches` batches a claim, so a fast
    worker trains more of the epoch. Yields (labels, dense, keys) as
    CriteoReader does; the file is parsed by shardps-worker's C++ parser
    without the GIL. `client`: a worker's shardps.Client, open while the
    reader is used. Under sync take each batch after the step's clock (or
    inside ShardedModel.step(ahead=...), behind the tick): a second batch
    at one clock raises InvalidArgumentError. `lines`: the log's lines;
    `handed`: the examples the pool handed out, after the epoch."""
    return _ext.CriteoPoolReader(client._c, path, batch, rows=rows, epoch=epoch, chunk_batches=chunk_batches)


__all__ = ["connect", "Client", "Table", "Request", "CriteoReader", "CriteoPoolReader", "Error", "TimeoutError", "UnavailableError",
           "InvalidArgumentError", "NotFoundError", "ConflictError",
           "PermissionDeniedError"]

_KINDS = {"dense": _ext.TableKind.dense, "sparse": _ext.TableKind.sparse}
_INITS = {"zeros": _ext.InitKind.zeros, "constant": _ext.InitKind.constant, "uniform": _ext.InitKind.uniform,
          "normal": _ext.InitKind.normal}
_OPTIMIZERS = {"sgd": _ext.OptimizerKind.sgd, "momentum": _ext.OptimizerKind.momentum,
               "adagrad": _ext.OptimizerKind.adagrad, "adam": _ext.OptimizerKind.adam}
_RULES = {"default": _ext.StalenessRule.default, "none": _ext.StalenessRule.none,
          "scale-lr": _ext.StalenessRule.scale_lr, "dc": _ext.StalenessRule.dc}
_DTYPES = {"f32": _ext.DType.f32, "bf16": _ext.DType.bf16, "f16": _ext.DType.f16}


def _choice(what, value, table):
    try:
        return table[value]
    except KeyError:
        raise ValueError(f"{what} must be one of {', '.join(table)}, got {value!r}") from None


def _count(what, value, most=0xFFFFFFFF):
    """`value` (an int, not a bool) in [0, most], else ValueError naming `what`."""
    try:
        v = operator.index(value) if not isinstance(value, bool) else None
    except TypeError:
        v = None
    if v is None or not 0 <= v <= most:
        raise ValueError(f"{what} must be an integer in [0, {most}], got {value!r}")
    return v


def _from_run_dir(run_dir, role):
    """(coordinator, key file or None) of the job whose run directory (or
    job.json) is `run_dir`: what shardps-launch wrote there. The key is the
    job's worker.key for a worker, observer.key for an observer."""
    path = os.fspath(run_dir)
    if not os.path.isfile(path):
        path = os.path.join(path, "job.json")
    try:
        with open(path) as f:
            job = json.load(f)
    except OSError as e:
        raise InvalidArgumentError(f"run_dir: cannot read '{path}' ({e.strerror}): is it the run directory of a job "
                                   f"shardps-launch started?") from None
    except ValueError as e:
        raise InvalidArgumentError(f"run_dir: '{path}' is not a job.json written by shardps-launch ({e})") from None
    if not isinstance(job, dict) or "format" not in job:
        raise InvalidArgumentError(f"run_dir: '{path}' is not a job.json written by shardps-launch (no \"format\")")
    keys = (job.get("security") or {}).get("keys")
    key = os.path.join(keys, "worker.key" if role == "worker" else "observer.key") if keys else None
    return job.get("coordinator"), key, job.get("state")


def connect(coordinator=None, rank=None, role="worker", timeout=60.0, request_timeout=120.0, key=None,
            metrics_url=None, run_dir=None):
    """Registers with the coordinator (e.g. "tcp://10.0.0.1:5555") and waits,
    at most `timeout` seconds, until every server joined. `rank`: the worker
    rank to claim (None: the coordinator assigns one); `role`: "worker" (has
    a clock, counted by the consistency model) or "observer" (tools and
    evaluators: never waited for). `request_timeout`: how long a request may
    go unanswered. `key`: a key file made by shardps-keygen, for a job with
    security on (None: $SHARDPS_KEY if set; docs/security.md).
    `metrics_url`: where this process serves Prometheus metrics of its own
    ("http://host:port/metrics", say from prometheus_client's
    start_http_server), told to the coordinator: `shardps-ctl status` shows
    it and the launcher's prometheus-targets.json lists it. `run_dir`: the
    run directory of a job shardps-launch started (or its job.json): the
    coordinator (when not given) and, with security on, the key (when not
    given: the job's worker.key for a worker, observer.key for an
    observer) come from it. Returns a Client, usable as a context manager."""
    if run_dir is not None:
        found, found_key, state = _from_run_dir(run_dir, role)
        if not coordinator and not found:
            raise UnavailableError(f"run_dir: '{os.fspath(run_dir)}' names no coordinator yet (the job is {state})")
        coordinator = coordinator or found
        key = key if key is not None else found_key
    if not coordinator:
        raise InvalidArgumentError("connect: give the coordinator's endpoint (\"tcp://HOST:PORT\") or run_dir")
    return Client(_ext.Client(coordinator, -1 if rank is None else int(rank), role, float(timeout),
                              float(request_timeout), "" if key is None else os.fspath(key),
                              metrics_url or ""))


class Client:
    """A connection to one shardps job. Thread-safe; requests run in the
    C++ client's I/O thread. Close it (or use `with`) to leave the job."""

    def __init__(self, ext):
        self._c = ext

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    # -- tables
    def create_table(self, name, rows=0, cols=1, kind="dense", init="zeros", init_a=0.0, init_b=0.0, seed=0,
                     optimizer="sgd", lr=0.01, momentum=0.9, beta1=0.9, beta2=0.999, eps=1e-8,
                     initial_accumulator=0.0, max_rows=0, *, value=None, low=None, high=None, mean=None,
                     stddev=None, staleness_rule="default", dc_lambda=0.04, dtype="f32", admit_after=0,
                     evict_after_clocks=0, evict_after_sec=0, cold_tier=False, wire_dtype=None, compress=None):
        """Defines a table (every worker may call it with the same spec and
        gets the same table; another shape raises ConflictError) and returns
        it once every server holds it. Fields as in the C++ TableSpec;
        `value` (constant), `low`/`high` (uniform), `mean`/`stddev` (normal)
        name init_a/init_b; `staleness_rule` ("default", "none", "scale-lr",
        "dc") and `dc_lambda` weigh stale gradients (docs/consistency.md).
        Embedding tables (kind="sparse" only): `dtype` ("f32", "bf16",
        "f16": the values' type where stored and sent; optimizer state stays
        float32), `admit_after` (an id gets a row at its k-th push; 0 or 1:
        at its first; at most 255), `evict_after_clocks` or `evict_after_sec`
        (rows not updated for that long are removed; 0: never; one of
        them), `cold_tier` (True: rows past the servers' memory budgets
        live on their disks, docs/embeddings.md "Tables larger than
        memory"). Pushes and pulls still take float32 arrays.
        Dense tables: `wire_dtype` ("f32", "bf16", "f16") is the type
        their pulled values and pushed gradients travel in (the servers keep
        float32; a push applies its gradient rounded to that type): the
        table's default, and this handle's (set `table.wire_dtype` on a
        handle to change its own requests). `compress` ("none", "sign",
        "topk:F"): pushed gradients compressed with error feedback
        (docs/compression.md), the same way a default and per handle
        (`table.compress`). None (the default): the table's own (f32 and
        none for a new table, else what its definer or the job file set)."""
        s = _ext.TableSpec()
        s.name, s.rows, s.cols = name, int(rows), int(cols)
        s.kind = _choice("kind", kind, _KINDS)
        s.init = _choice("init", init, _INITS)
        a = value if value is not None else low if low is not None else mean
        b = high if high is not None else stddev
        s.init_a = float(a if a is not None else init_a)
        s.init_b = float(b if b is not None else init_b)
        s.seed = int(seed)
        s.optimizer = _choice("optimizer", optimizer, _OPTIMIZERS)
        s.lr, s.momentum, s.beta1, s.beta2, s.eps = float(lr), float(momentum), float(beta1), float(beta2), float(eps)
        s.initial_accumulator = float(initial_accumulator)
        s.max_rows = int(max_rows)
        s.staleness_rule = _choice("staleness_rule", staleness_rule, _RULES)
        s.dc_lambda = float(dc_lambda)
        s.dtype = _choice("dtype", dtype, _DTYPES)
        s.admit_after = _count("admit_after", admit_after)
        s.evict_after_clocks = _count("evict_after_clocks", evict_after_clocks)
        s.evict_after_sec = _count("evict_after_sec", evict_after_sec)
        if not isinstance(cold_tier, bool):
            raise TypeError(f"cold_tier must be True or False, got {cold_tier!r}")
        s.cold_tier = cold_tier
        if wire_dtype is not None:
            s.wire_dtype = _choice("wire_dtype", wire_dtype, _DTYPES)
        if compress is not None:
            s.compress, s.topk_fraction = _ext.parse_compression(str(compress))
        s.validate()
        t = self._c.create_table(s)
        # This handle's requests, whatever the table's default (an existing
        # table keeps its own).
        if wire_dtype is not None:
            t.wire_dtype = wire_dtype
        if compress is not None:
            t.compress = compress
        return t

    def table(self, name):
        """The table of that name (NotFoundError if there is none)."""
        return self._c.table(name)

    def _t(self, table):
        return self._c.table(table) if isinstance(table, str) else table

    # -- data
    def push_async(self, table, grads, rows=None, ids=None):
        """Sends gradients without copying `grads` (float32, C order): the
        whole dense table (rows x cols), `rows=(begin, end)`, or `ids` (a
        uint64 array; dense row ids or sparse ids), one row of `cols` per
        row/id. The array is kept alive until the request completes."""
        return self._c.push(self._t(table), grads, rows, ids)

    def push(self, table, grads, rows=None, ids=None, timeout=None):
        """push_async(...).wait(timeout)."""
        self.push_async(table, grads, rows, ids).wait(timeout)

    def assign_async(self, table, values, rows=None, ids=None):
        """Writes rows themselves, not gradients: `values` (float32, C order,
        one row of `cols` per row/id; addressing as push: the whole dense
        table, `rows=(begin, end)`, or `ids`, each id once) replace what the
        servers hold, their optimizer state restarts, and missing sparse
        rows are made. Applied at once under every consistency model: load
        pretrained rows or a checkpoint before training (or between
        clocks). The array is kept alive until the request completes."""
        return self._c.assign(self._t(table), values, rows, ids)

    def assign(self, table, values, rows=None, ids=None, timeout=None):
        """assign_async(...).wait(timeout)."""
        self.assign_async(table, values, rows, ids).wait(timeout)

    def pull_async(self, table, out=None, rows=None, ids=None):
        """Reads parameters into `out` (float32, C order, writeable; a new
        (n, cols) array when None), same addressing as push. The request's
        wait() returns the array."""
        return self._c.pull(self._t(table), out, rows, ids, False)

    def pull(self, table, out=None, rows=None, ids=None, timeout=None):
        """pull_async(...).wait(timeout): the filled array."""
        return self.pull_async(table, out, rows, ids).wait(timeout)

    def prefetch(self, table, out=None):
        """The whole dense table as the next iteration (clock + 1) may read
        it, issued before this iteration's pushes so it travels while you
        compute. Returns a Request; wait() gives the array."""
        return self._c.pull(self._t(table), out, None, None, True)

    # -- iterations, coordination
    def clock(self):
        """Ends this worker's iteration (after its pushes)."""
        self._c.clock()

    def clock_async(self):
        """clock() without waiting: returns a Request (wait() raises a failed
        tick's error). Requests issued after it are sent behind it (under
        sync, it leaves once this iteration's pushes are answered), so the
        next iteration's pulls can be issued at once."""
        return self._c.clock_async()

    def barrier(self, timeout=None):
        """Waits until every live worker reached the barrier."""
        self._c.barrier(timeout)

    @contextlib.contextmanager
    def hold_requests(self):
        """Requests issued inside the block (by any thread) wait, and leave
        together at its end: one message per server, however many requests
        (docs/protocol.md, "Envelopes"). For a step's burst of small
        requests: every dense table's pull, every feature's rows, the
        pushes after backward. Never wait() inside the block on a request
        issued inside it (it has not left yet)."""
        hold = self._c.hold_requests()
        try:
            yield self
        finally:
            hold.release()

    def claim_work(self, pool, total_units, max_units):
        """Up to `max_units` consecutive units of the job-wide pool `pool`
        (of `total_units`): (begin, end), empty (begin == end) when used up."""
        return self._c.claim_work(int(pool), int(total_units), int(max_units))

    def close(self):
        """Leaves the job; outstanding requests fail with UnavailableError."""
        self._c.close()

    @property
    def rank(self):
        return self._c.rank

    @property
    def clock_value(self):
        """Iterations this worker finished."""
        return self._c.clock_value

    @property
    def consistency(self):
        return self._c.consistency

    @property
    def staleness(self):
        return self._c.staleness

    @property
    def num_servers(self):
        return self._c.num_servers

    @property
    def num_workers(self):
        return self._c.num_workers

    @property
    def stop_requested(self):
        """True once `shardps-ctl stop` was asked: finish the step and close."""
        return self._c.stop_requested
