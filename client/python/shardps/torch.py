"""shardps for PyTorch: a torch.nn.Module's parameters as shardps tables.

    import shardps, shardps.torch
    ps = shardps.connect(coordinator, rank=rank)
    model = MyNet()
    sm = shardps.torch.ShardedModel(ps, model, optimizer="sgd", lr=0.1)
    sm.pull()                               # parameters into the model, in place
    for x, y in batches:
        loss = loss_fn(model(x), y)
        loss.backward()                     # each layer's gradient is pushed as backward produces it
        sm.step()                           # wait for the pushes, end the clock, pull (or use the prefetch)

One table per parameter, named after `named_parameters()` (a prefix keeps
several models apart); a parameter of shape (n, ...) is a table of n rows.
Pulls write into the parameters' own storage (CPU tensors share memory
with NumPy: no copy); pushes send `.grad`'s storage as it is. The server
applies the optimizer; the local model never steps. Debian 12's torch
(1.13) has no post-accumulate-grad hooks: the per-layer pushes come from
tensor hooks, so each parameter must be used once per forward (as in
ordinary layers).

Embeddings: `Embedding` and `EmbeddingBag` (below) are drop-ins for
torch.nn.Embedding / torch.nn.EmbeddingBag whose rows live in a sparse
shardps table: forward pulls the batch's unique ids, backward pushes their
summed gradient, the servers apply the optimizer. ShardedModel.step() sends
the clock behind the pushes of every such module inside the model and waits
for both; alone, call the module's step() before client.clock().
"""

import contextlib
import warnings

import numpy as np
import torch

import shardps


def _rows_cols(p):
    n = p.numel()
    rows = p.shape[0] if p.dim() >= 1 else 1
    return rows, n // rows


def _torch_init(pname, p, owner):
    """The shardps initializer closest to torch's default for parameter
    `pname` ("weight", "bias", ...) of module `owner`: the reset_parameters
    of Linear and Conv (kaiming_uniform with a = sqrt(5): weights, and the
    biases with their weight's fan_in, uniform in +-1/sqrt(fan_in)),
    Embedding's N(0, 1), the norm layers' weights 1 and biases 0; any other
    parameter of 2 or more dimensions as a Linear weight, of 1 as a norm
    layer's."""
    if isinstance(owner, (torch.nn.Embedding, torch.nn.EmbeddingBag)) and pname == "weight":
        return {"init": "normal", "mean": 0.0, "stddev": 1.0}
    if p.dim() >= 2:
        bound = 1.0 / _rows_cols(p)[1] ** 0.5
        return {"init": "uniform", "low": -bound, "high": bound}
    w = getattr(owner, "weight", None)
    if pname == "bias" and isinstance(w, torch.Tensor) and w.dim() >= 2:
        bound = 1.0 / _rows_cols(w)[1] ** 0.5
        return {"init": "uniform", "low": -bound, "high": bound}
    return {"init": "constant", "value": 1.0} if pname == "weight" else {"init": "zeros"}


class ShardedModel:
    """Maps `module`'s parameters to tables and moves them between the
    model and the servers. The tables start from the servers' initializer
    (`init`: "he" -- weights normal with stddev sqrt(2 / fan_in), biases
    zero; "torch" -- torch's own defaults (_torch_init): Linear and Conv
    weights and biases uniform in +-1/sqrt(fan_in), nn.Embedding N(0, 1),
    norm layers' weights 1 and biases 0; or a shardps initializer with
    `stddev`; `seed`: the same on every worker), so pull() before the
    first step. `optimizer`, `lr` and `optimizer_args` (momentum, beta1,
    ...) configure the server-side optimizer. `push_in_backward`: push each
    gradient from its hook as soon as backward produced it (else all in
    step()). `prefetch`: step() sends the next iteration's pulls before it
    waits for this one's pushes (bounded staleness and async). `predict`:
    weight prediction's lookahead K (bounded staleness and async; 0: off,
    shardps-worker's default is 2): pull() then leaves the parameters
    extrapolated to where they are expected when this iteration's pushes
    land, w + a * (w - w_prev), a = min(K, K * tau / D) -- D the updates
    between this pull and the previous one, tau the recent staleness of
    the pushes (docs/consistency.md, "Predicted parameters"). The model
    then holds predicted values between iterations: evaluate inside
    `with sm.pulled():` (the values as pulled, no traffic), and
    pull(predict=False) before saving it at the end. `wire_dtype`
    ("f32", "bf16", "f16"): the type the parameters and gradients travel
    in (the servers keep float32; docs/compression.md). `compress`
    ("none", "sign", "topk:F"): the gradients'
    compression with error feedback (docs/compression.md). None: the
    tables' own (f32, none, unless the job file says otherwise)."""

    def __init__(self, client, module, optimizer="sgd", lr=0.01, init="he", stddev=0.05, seed=1, prefix="",
                 push_in_backward=True, prefetch=False, predict=0.0, wire_dtype=None, compress=None,
                 **optimizer_args):
        if any(p.device.type != "cpu" for p in module.parameters()):
            raise ValueError("shardps.torch maps CPU parameters (move the model to the CPU, or copy to/from it)")
        if not 0 <= predict <= 8:
            raise ValueError(f"predict must be in [0, 8] (0: off), got {predict}")
        if predict > 0 and optimizer_args.get("staleness_rule") == "dc":
            raise ValueError("predict and staleness_rule='dc' compensate the same drift: use one of them")
        self.client, self.module, self.prefetching = client, module, prefetch
        self.predict = float(predict) if client.consistency != "sync" else 0.0
        self._prev, self._prev_reqs, self._tau = None, None, 0.0
        self.params, self.tables, self.views = [], [], []
        self._pushes, self._staged, self._prefetch = [], None, None
        # shardps embeddings inside the model: no parameters (their rows are
        # on the servers), but their pushes must land before the clock.
        self.embeddings = [m for m in module.modules() if isinstance(m, (_SparseLookup, EmbeddingBagCollection))]
        # Tables shared by several of them (group=): their gradients and
        # prefetches leave at the step, one request per table and server.
        self.groups = list({id(m._group): m._group for m in self.embeddings
                            if isinstance(m, _SparseLookup) and m._group is not None}.values())
        owners = {(f"{mn}." if mn else "") + pn: m for mn, m in module.named_modules()
                  for pn, _ in m.named_parameters(recurse=False)}
        for name, p in module.named_parameters():
            if not p.requires_grad:  # frozen: not trained, not a table
                continue
            if not p.is_contiguous():
                raise ValueError(f"parameter '{name}' is not contiguous: pulls could not land in its storage "
                                 f"(make it contiguous, e.g. not channels_last, before mapping the model)")
            rows, cols = _rows_cols(p)
            if init == "he":  # weights: normal, stddev sqrt(2 / fan_in); biases (1-d): zeros
                how = {"init": "normal", "stddev": (2.0 / cols) ** 0.5} if p.dim() >= 2 else {"init": "zeros"}
            elif init == "torch":
                how = _torch_init(name.rsplit(".", 1)[-1], p, owners[name])
            else:
                how = {"init": init, "stddev": stddev}
            t = client.create_table(prefix + name, rows=rows, cols=cols, seed=seed, optimizer=optimizer, lr=lr,
                                    wire_dtype=wire_dtype, compress=compress, **how, **optimizer_args)
            self.params.append(p)
            self.tables.append(t)
            self.views.append(p.data.numpy().reshape(rows, cols))  # the parameter's storage
            if push_in_backward:
                p.register_hook(self._hook(len(self.params) - 1))

    def _hook(self, i):
        def push(grad):
            g = grad.detach()
            if not g.is_contiguous():
                g = g.contiguous()
            rows, cols = _rows_cols(g)
            # The array holds the tensor: alive until the push completes.
            self._pushes.append(self.client.push_async(self.tables[i], g.numpy().reshape(rows, cols)))
            return grad
        return push

    def pull(self, predict=True):
        """The current parameters into the model's storage (waits);
        extrapolated when the model was made with `predict` (unless
        predict=False: the values as pulled, e.g. to evaluate)."""
        self._land(self._issue_pulls(), predict)

    def _issue_pulls(self):
        """The pulls of pull(): the prefetch outstanding, else new ones."""
        if self._prefetch is not None:
            return self._prefetch
        with self.client.hold_requests():  # one message per server
            return [self.client.pull_async(t, out=v) for t, v in zip(self.tables, self.views)]

    def _land(self, reqs, predict):
        """Waits for pull()'s requests; the values in the model."""
        for r in reqs:
            r.wait()
        if self._prefetch is not None:
            for view, staged in zip(self.views, self._staged):
                np.copyto(view, staged)
            self._prefetch = None
        if predict and self.predict > 0:
            self._extrapolate(reqs)

    @contextlib.contextmanager
    def pulled(self):
        """Inside the block the model holds the values its last pull read,
        not the predicted ones (e.g. to evaluate); after it, the predicted
        ones again. Without prediction it changes nothing."""
        if self.predict <= 0 or self._prev is None:
            yield
            return
        predicted = [v.copy() for v in self.views]
        for view, as_pulled in zip(self.views, self._prev):
            np.copyto(view, as_pulled)
        try:
            yield
        finally:
            for view, p in zip(self.views, predicted):
                np.copyto(view, p)

    def _extrapolate(self, reqs):
        first = self._prev is None
        if first:
            self._prev = [np.empty_like(v) for v in self.views]
        k = self.predict
        for i, view in enumerate(self.views):  # self._prev: the values as pulled
            between = -1 if first else reqs[i].updates_since(self._prev_reqs[i])
            a = min(k, k * self._tau / between) if self._tau > 0 and between > 0 else 0.0
            if a > 0:  # one array per step: the values as pulled; the old ones take the drift
                pulled, drift = view.copy(), self._prev[i]
                np.subtract(view, drift, out=drift)
                drift *= np.float32(a)
                view += drift
                self._prev[i] = pulled
            else:
                np.copyto(self._prev[i], view)
        self._prev_reqs = reqs

    def load_state_dict(self, state_dict, strict=True):
        """Loads `state_dict` into the model (torch's module.load_state_dict,
        the shardps embeddings' rows included: written onto the servers), then
        writes every mapped parameter's values onto its table (the optimizer
        state restarts): the job continues from that model, on any number
        of servers. Returns torch's (missing_keys, unexpected_keys)."""
        result = self.module.load_state_dict(state_dict, strict=strict)
        reqs = [self.client.assign_async(t, v) for t, v in zip(self.tables, self.views)]
        for r in reqs:
            r.wait()
        return result

    def state_dict(self):
        """The model's state_dict with the servers' current values: the dense
        parameters pulled into the model first (as pulled: pull(predict=False)),
        the shardps embeddings' rows (those with num_embeddings) read."""
        self.pull(predict=False)
        return self.module.state_dict()

    def push_grads(self):
        """Pushes every parameter's .grad now (when not pushing in backward)."""
        with self.client.hold_requests():  # one message per server
            for p, t in zip(self.params, self.tables):
                if p.grad is not None:
                    rows, cols = _rows_cols(p)
                    self._pushes.append(self.client.push_async(t, p.grad.detach().contiguous().numpy().reshape(rows, cols)))

    def start_prefetch(self):
        """Sends the next iteration's pulls now (into staging buffers)."""
        if self._staged is None:
            self._staged = [np.empty_like(v) for v in self.views]
        with self.client.hold_requests():  # one message per server
            self._prefetch = [self.client.prefetch(t, out=s) for t, s in zip(self.tables, self._staged)]

    def step(self, ahead=None, ahead_in_hold=True):
        """Ends the iteration: the pushes arrive (the model's shardps
        embeddings' too), the clock ends, the parameters for the next
        iteration are pulled into the model. `ahead`: a function called
        where the next iteration's pulls are issued (behind the tick, in
        the same message per server) -- the place for the next batch's
        embedding prefetches (`emb.prefetch(ids)`, `ebc.prefetch(features)`),
        so its rows travel while this step waits; under sync they read
        exactly what the next forward's own pulls would. `ahead_in_hold`
        False: `ahead` runs once the tick and the pulls have left (its
        prefetches a message of their own): for an `ahead` that waits
        itself, as a work pool's claim of the next batch does."""
        if not self._pushes:
            self.push_grads()
        if self.prefetching:
            self.start_prefetch()
        for p in self.params:
            p.grad = None
        # As shardps-worker: the tick and the next pulls go out at once,
        # without a round trip for the pushes first (the tick is sent behind
        # them, on the same connections: each server takes this clock's
        # pushes before its tick; under sync the tick's reply waits for
        # every worker; the pulls go behind it).
        pushes, self._pushes = self._pushes, []
        with self.client.hold_requests():  # groups' pushes, the tick, the pulls: one message per server
            for g in self.groups:
                g.flush_pushes()
            tick = self.client.clock_async()
            pulls = self._issue_pulls()
            if ahead is not None and ahead_in_hold:
                ahead()
            for g in self.groups:
                g.flush_pulls()
        if ahead is not None and not ahead_in_hold:
            with self.client.hold_requests():
                ahead()
                for g in self.groups:
                    g.flush_pulls()
        for e in self.embeddings:
            e.wait()
        for r in pushes:
            r.wait()
            self._tau += 0.02 * (r.staleness - self._tau)  # as shardps-worker's StalenessMean
        tick.wait()
        self._land(pulls, True)


_client = None  # set_client(): the client of modules given none
_made = {}  # a module kind -> how many tables of that kind this process named itself


def set_client(client):
    """The client every shardps.torch module made without `client=` uses
    (once per process, after shardps.connect). Returns it."""
    global _client
    _client = client
    return client


def _the_client(client, what):
    c = client if client is not None else _client
    if c is None:
        raise ValueError(f"{what}: no client: give client=ps, or call shardps.torch.set_client(ps) once after "
                         f"shardps.connect")
    return c


def _default_name(kind):
    """'embedding.0', 'embedding.1', ...: the n-th table of that kind this
    process named itself -- the same in every process that builds the same
    model in the same order."""
    n = _made.get(kind, 0)
    _made[kind] = n + 1
    return f"{kind}.{n}"


def _positive(what, value, lowest=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise ValueError(f"{what} must be an integer >= {lowest}, got {value!r}")
    return value


def _bag_offsets(what, ids, offsets):
    """`offsets` checked against `ids` as EmbeddingBag takes them (2-d ids:
    None, each row a bag; 1-d: a 1-d int64 or int32 tensor of each bag's
    start), as int64 or None; ValueError naming `what` otherwise."""
    if ids.dim() not in (1, 2):
        raise ValueError(f"{what}: input must be 1-d (with offsets) or 2-d (one bag per row), "
                         f"got {ids.dim()} dimensions")
    if ids.dim() == 2:
        if offsets is not None:
            raise ValueError(f"{what}: offsets must be None for a 2-d input (each row is a bag)")
        return None
    if offsets is None:
        raise ValueError(f"{what}: a 1-d input needs offsets (each bag's start)")
    if not isinstance(offsets, torch.Tensor) or offsets.dim() != 1 or offsets.dtype not in (torch.int64, torch.int32):
        raise ValueError(f"{what}: offsets must be a 1-d int64 (or int32) tensor")
    return offsets.long()


GROUP_ID_BITS = 48  # in a shared table: key = slot << 48 | id


def _unique(ids):
    """(the sorted unique values of the int64 tensor `ids`, each position's
    index into them, shaped as `ids`), as tensors. numpy's unique (a sort):
    torch.unique (1.13) takes 9x its time on a batch's 1 664 keys here."""
    uniq, inverse = np.unique(ids.numpy(), return_inverse=True)
    return torch.from_numpy(uniq), torch.from_numpy(inverse).view(ids.shape)


def _version(t):
    """t's in-place version counter (None for an inference tensor, which has
    none: it cannot be changed in place outside inference mode either)."""
    return None if t.is_inference() else t._version


def _check_unique(what, uniq, num_embeddings, group=None):
    """IndexError naming `what` unless the sorted unique ids `uniq` are all
    >= 0, < num_embeddings (when given) and < 2^48 in a group."""
    if not uniq.numel():
        return
    lo, hi = int(uniq[0]), int(uniq[-1])
    if lo < 0:
        raise IndexError(f"{what}: id {lo} is negative (ids are int64 >= 0)")
    if num_embeddings is not None and hi >= num_embeddings:
        raise IndexError(f"{what}: id {hi} is out of range: num_embeddings is {num_embeddings}")
    if group is not None and hi >= 1 << GROUP_ID_BITS:
        raise IndexError(f"{what}: id {hi} is over 2^{GROUP_ID_BITS}, the most in group {group.name!r}")


class _TableGroup:
    """One sparse table shared by several modules (`group=` of Embedding and
    EmbeddingBag): each module a slot, its ids keys slot << 48 | id. The
    modules' prefetches are one batch (_GroupBatch): their ids deduplicated
    in one call, pulled as one request per server (flush_pulls), their
    gradients pushed as one push per server (flush_pushes), however many
    modules: a model written with one module per feature pays per batch
    what one table costs. Main thread only (forward, backward's hooks and
    the step run there)."""

    def __init__(self, client, name, table, options):
        self.client, self.name, self.table, self.options = client, name, table, options
        self.slots = 0
        self.ahead = {}  # module -> its prefetch entry: prefetched, not sent yet (flush_pulls)
        self.pushes = []  # [(keys, gradient)]: from backward, not sent yet
        self.sent = []  # requests of the pushes sent

    def flush_pulls(self):
        """Sends every pending prefetch as one batch: one pull (no wait)."""
        if self.ahead:
            ahead, self.ahead = self.ahead, {}
            _GroupBatch(self, ahead)

    def flush_pushes(self):
        """Sends every gradient backward gave as one push (no wait)."""
        if not self.pushes:
            return
        pending, self.pushes = self.pushes, []
        keys = np.concatenate([k for k, _ in pending]) if len(pending) > 1 else pending[0][0]
        grads = np.concatenate([g for _, g in pending]) if len(pending) > 1 else pending[0][1]
        self.sent.append(self.client.push_async(self.table, grads, ids=keys))

    def wait(self):
        self.flush_pushes()
        sent, self.sent = self.sent, []
        for r in sent:
            r.wait()
        return len(sent)


class _GroupBatch:
    """The prefetched rows of a group's modules for one batch. Their ids are
    checked and deduplicated in one call (keys slot << 48 | id), pulled in
    one request per server, and held as one tensor of rows whose gradient
    (every module's, summed per row by autograd) is pushed once. The
    EmbeddingBags given 2-d ids (a bag per row) are pooled in one
    embedding_bag call per mode at the first forward that needs it, each
    forward taking its slice: a module per feature costs little more
    Python per step than one table. A module prefetched but not forwarded
    pushes nothing (its rows are left out of the push)."""

    __slots__ = ("group", "entries", "uniq", "inverse", "req", "rows", "pools", "used")

    def __init__(self, group, ahead):
        self.group, self.entries = group, ahead
        mods = list(ahead)
        tens = [ahead[m][0] for m in mods]
        if len({t.shape[1:] for t in tens}) == 1 and all(t.dtype == torch.int64 for t in tens):
            ids = (torch.cat(tens) if len(tens) > 1 else tens[0]).reshape(-1)  # one call (columns of a batch)
        else:
            ids = torch.cat([t.reshape(-1).long() for t in tens])
        counts = [t.numel() for t in tens]
        keys = ids.numpy()
        if keys.size:
            limits = [m.num_embeddings for m in mods if m.num_embeddings is not None]
            if int(keys.min()) < 0 or int(keys.max()) >= min(limits + [1 << GROUP_ID_BITS]):
                for m, t in zip(mods, tens):  # which module: its own message
                    if t.numel():
                        _check_unique(m._what(), torch.stack(torch.aminmax(t.long())), m.num_embeddings, group)
            keys = keys | np.repeat(np.array([m._prefix for m in mods], dtype=np.int64), counts)
        uniq, inverse = np.unique(keys, return_inverse=True)
        self.uniq, self.inverse = uniq, torch.from_numpy(inverse)
        self.req = group.client.pull_async(group.table, ids=uniq) if len(uniq) else None
        self.rows, self.pools, self.used = None, {}, set()
        at = 0
        for m, n in zip(mods, counts):
            e = ahead[m]
            e[2], e[3], e[4] = self, at, at + n
            at += n

    def lookup(self, m, entry):
        """(inverse of `m`'s ids, the batch's rows) for m's own forward."""
        self.used.add(m)
        return self.inverse[entry[3]:entry[4]].view(entry[0].shape), self.leaf()

    def leaf(self):
        """The batch's rows: (unique ids, dim); with autograd on, a leaf
        whose gradient is pushed (with the group's others) at the step."""
        if self.rows is None:
            got = self.req.wait() if self.req is not None else np.zeros((0, self.group.options["cols"]), np.float32)
            self.rows = torch.from_numpy(got)
        if torch.is_grad_enabled() and len(self.uniq) and not self.rows.requires_grad:
            self.rows.requires_grad_(True)
            self.rows.register_hook(self._pusher())
        return self.rows

    def pooled(self, m, entry):
        """m's bags (its 2-d ids, a bag per row), from the one pooling of
        every such EmbeddingBag of the batch with m's mode."""
        self.used.add(m)
        pool = self.pools.get(m.mode)
        if pool is None:
            pool = self.pools[m.mode] = self._pool(m.mode)
        return pool[m]

    def _pool(self, mode):
        same = [(m, e) for m, e in self.entries.items() if isinstance(m, EmbeddingBag) and m.mode == mode
                and e[0].dim() == 2 and e[0].shape[1] > 0]
        widths = {e[0].shape[1] for _, e in same}
        if len(same) == len(self.entries):  # every module: the batch's inverse as it is
            inverse = self.inverse
        else:
            inverse = torch.cat([self.inverse[e[3]:e[4]] for _, e in same])
        if len(widths) == 1:
            offsets = torch.arange(0, inverse.numel(), widths.pop())
        else:
            starts, at = [], 0
            for _, e in same:
                starts.append(torch.arange(at, at + e[4] - e[3], e[0].shape[1]))
                at += e[4] - e[3]
            offsets = torch.cat(starts)
        out = torch.nn.functional.embedding_bag(inverse, self.leaf(), offsets, mode=mode)
        # One split: its backward is one concatenation (a slice each would
        # zero-fill the whole output once per module in backward).
        return dict(zip((m for m, _ in same), out.split([e[0].shape[0] for _, e in same])))

    def _pusher(self):
        """The hook on the rows: their gradient to the group's pushes. It
        holds what it needs, not the batch (no cycle through the rows: the
        batch's memory goes back as soon as the step is done with it)."""
        group, used, uniq, inverse = self.group, self.used, self.uniq, self.inverse
        spans = {m: (e[3], e[4]) for m, e in self.entries.items()}

        def push(grad):
            pushed = [m for m in used if not m.__dict__.get("frozen", False)]
            g = grad.detach()
            if g.dtype != torch.float32:
                g = g.float()
            keys = uniq
            if len(pushed) < len(spans):  # only the rows of the modules forwarded (and not frozen)
                if not pushed:
                    return
                mask = torch.zeros(len(keys), dtype=torch.bool)
                for m in pushed:
                    mask[inverse[spans[m][0]:spans[m][1]]] = True
                keys, g = keys[mask.numpy()], g[mask]
            group.pushes.append((keys, g.contiguous().numpy()))
        return push


_groups = {}  # (id(client), group name) -> _TableGroup


def _group_for(client, name, create, options):
    """The group `name` of `client`, its table made by `create()` the first
    time; every module of a group must have the same table options."""
    g = _groups.get((id(client), name))
    if g is None or g.client is not client:
        g = _groups[(id(client), name)] = _TableGroup(client, name, create(), options)
    elif g.options != options:
        differ = sorted(k for k in set(g.options) | set(options) if g.options.get(k) != options.get(k))
        raise ValueError(f"group {name!r}: its modules share one table, so they need the same table options; "
                         f"this one differs in {', '.join(differ)}")
    return g


def _read_rows(read, n, dim, chunk):
    """Rows 0 .. n - 1 of a table, `read(ids)` a piece of them at a time
    (`chunk` rows): an (n, dim) tensor."""
    return torch.cat([read(torch.arange(lo, min(lo + chunk, n))) for lo in range(0, n, chunk)] or
                     [torch.zeros(0, dim)])


def _write_rows(client, table, weight, keys_of, what, dim, num_embeddings, chunk):
    """Writes rows 0 .. len(weight) - 1 of `table` (Client.assign: their
    optimizer state restarts), `chunk` rows a request, keys_of(ids) the
    table's keys; waits for every server. `weight` must be (n, dim), n at
    most num_embeddings (when given); else ValueError naming `what`."""
    w = torch.as_tensor(weight).detach().to(torch.float32).contiguous()
    if w.dim() != 2 or w.shape[1] != dim:
        raise ValueError(f"{what}: the rows must be (n, {dim}), got {tuple(w.shape)}")
    if num_embeddings is not None and w.shape[0] > num_embeddings:
        raise ValueError(f"{what}: {w.shape[0]} rows, more than num_embeddings {num_embeddings}")
    reqs = []
    for lo in range(0, w.shape[0], chunk):
        hi = min(lo + chunk, w.shape[0])
        reqs.append(client.assign_async(table, w[lo:hi].numpy(), ids=keys_of(torch.arange(lo, hi))))
    for r in reqs:
        r.wait()


class _SparseLookup(torch.nn.Module):
    """What Embedding and EmbeddingBag share: the sparse table, the checks
    of the ids, the pull of a batch's unique ids and the push of their
    gradient in backward. It has no parameters: its rows are on the
    servers (state_dict() is empty; snapshots keep them)."""

    def __init__(self, *args, name=None, client=None, group=None, init="normal", value=None, low=None, high=None,
                 mean=None, stddev=None, seed=0, optimizer="sgd", lr=0.01, dtype="f32", admit_after=0,
                 evict_after_clocks=0, evict_after_sec=0, max_rows=0, cold_tier=False, sparse=None, padding_idx=None,
                 max_norm=None, scale_grad_by_freq=False, **optimizer_args):
        super().__init__()
        kind = "embedding_bag" if isinstance(self, EmbeddingBag) else "embedding"
        cls = type(self).__name__
        old = optimizer_args.pop("dim", None)
        if (args and isinstance(args[0], shardps.Client)) or old is not None:
            # The first order, (client, name, dim, num_embeddings=None): still
            # taken, with a warning that shows how it was read.
            if client is None and args and isinstance(args[0], shardps.Client):
                client, args = args[0], args[1:]
            if name is None and args and isinstance(args[0], str):
                name, args = args[0], args[1:]
            if old is None and args:
                old, args = args[0], args[1:]
            num_embeddings = args[0] if args else optimizer_args.pop("num_embeddings", None)
            if len(args) > 1 or old is None or name is None:
                raise TypeError(f"{cls}(client, name, dim, num_embeddings=None) (the old order) got {len(args)} "
                                f"positional arguments after dim; write {cls}(num_embeddings, embedding_dim, "
                                f"name=..., client=...)")
            warnings.warn(f"{cls}(client, name, dim, num_embeddings) is the old argument order (read as "
                          f"name={name!r}, dim={old}, num_embeddings={num_embeddings}); write it as torch's, "
                          f"{cls}({num_embeddings}, {old}, name={name!r}, client=...) (or "
                          f"shardps.torch.set_client(ps) once): the old order goes in a later release",
                          DeprecationWarning, stacklevel=3)
            dim = old
        else:
            # torch's order: (num_embeddings, embedding_dim); num_embeddings
            # None: any id >= 0 (hashed ids need no size).
            if len(args) > 2:
                raise TypeError(f"{cls}(num_embeddings, embedding_dim, ...) takes 2 positional arguments, got "
                                f"{len(args)}; give the rest by keyword (mode=..., name=...)")
            num_embeddings = args[0] if args else optimizer_args.pop("num_embeddings", None)
            dim = args[1] if len(args) > 1 else optimizer_args.pop("embedding_dim", None)
            if dim is None:
                raise TypeError(f"{cls}: embedding_dim is missing ({cls}(num_embeddings, embedding_dim, ...))")
        for what, v, plain in (("padding_idx", padding_idx, None), ("max_norm", max_norm, None),
                               ("scale_grad_by_freq", scale_grad_by_freq, False)):
            if v != plain:
                raise ValueError(f"{cls}: {what}={v!r} is not supported (torch.nn.{cls}'s option; the rows are "
                                 f"updated on the servers)")
        # sparse=True/False: torch's choice of gradient layout; here each
        # batch's rows are pushed in any case.
        client = _the_client(client, cls)
        name = name if name is not None else _default_name(kind)
        _positive("embedding_dim", dim)
        if num_embeddings is not None:
            _positive("num_embeddings", num_embeddings)
        if init == "normal" and mean is None and stddev is None:
            mean, stddev = 0.0, 1.0  # torch.nn.Embedding's N(0, 1)
        self.client, self.embedding_dim, self.num_embeddings = client, dim, num_embeddings
        self.sparse = sparse
        options = dict(kind="sparse", cols=dim, init=init, value=value, low=low, high=high, mean=mean, stddev=stddev,
                       seed=seed, optimizer=optimizer, lr=lr, max_rows=max_rows, dtype=dtype, admit_after=admit_after,
                       evict_after_clocks=evict_after_clocks, evict_after_sec=evict_after_sec, cold_tier=cold_tier,
                       **optimizer_args)
        # Plain attributes (torch.nn.Module's __setattr__ costs per call).
        d = self.__dict__
        d["_pushes"], d["_ahead"] = [], None  # prefetch(): (ids, unique ids, inverse, keys, pull)
        d["_group"], d["_prefix"] = None, 0
        if group is None:
            self.table = client.create_table(name, **options)
        else:
            if num_embeddings is not None and num_embeddings > 1 << GROUP_ID_BITS:
                raise ValueError(f"{cls}: num_embeddings {num_embeddings} is over 2^{GROUP_ID_BITS}, the most a "
                                 f"module of a group may have")
            g = _group_for(client, group, lambda: client.create_table(group, **options), options)
            if g.slots >= 1 << (63 - GROUP_ID_BITS):
                raise ValueError(f"group {group!r} has {g.slots} modules, the most a group may hold")
            self.table = g.table
            d["_group"], d["_prefix"] = g, g.slots << GROUP_ID_BITS
            g.slots += 1

    def _what(self):
        return f"{type(self).__name__} '{self.table.name}'"

    def _check_ids(self, ids, what):
        """TypeError/ValueError unless `ids` is a CPU tensor of int64 or int32."""
        if not isinstance(ids, torch.Tensor):
            raise TypeError(f"{self._what()}: {what} must be a torch.Tensor of int64 (or int32) ids, "
                            f"got {type(ids).__name__}")
        if ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"{self._what()}: {what} must be int64 (or int32), got {ids.dtype}")
        if ids.device.type != "cpu":
            raise ValueError(f"{self._what()}: {what} must be on the CPU, got a tensor on {ids.device}")

    def _unique(self, ids, what="ids"):
        """(unique ids, ascending, int64; each position's index into them),
        after checking `ids`: a CPU tensor of int64 or int32, every id >= 0
        and < num_embeddings (when given)."""
        self._check_ids(ids, what)
        uniq, inverse = _unique(ids.long())
        _check_unique(self._what(), uniq, self.num_embeddings, self._group)
        return uniq, inverse

    def _keys(self, uniq):
        """The table's keys of the unique ids: the ids, or slot << 48 | id in a group."""
        keys = uniq.numpy()
        # int64 in a group too (slots < 2^15): its keys are all of one type.
        return keys if self._group is None else keys | self._prefix

    def prefetch(self, ids):
        """Issues the pull of the rows of `ids` now, without waiting: the
        next forward whose ids equal these (the same tensor, or equal
        values, not changed in place since) uses them instead of pulling.
        Prefetches of several modules inside client.hold_requests() -- or
        in ShardedModel.step(ahead=...), which issues them behind the tick,
        for the next iteration -- leave in one message per server. Ids
        checked as forward checks them; in a group, with the group's other
        prefetches when they are sent (at the step, or the first forward)."""
        if self._group is not None:  # [ids, version, batch, lo, hi]: one batch with the group's others
            self._check_ids(ids, "ids")
            entry = [ids, _version(ids), None, 0, 0]
            self._group.ahead[self] = entry
            self.__dict__["_ahead"] = entry
            return
        uniq, inverse = self._unique(ids)
        keys = self._keys(uniq)
        req = self.client.pull_async(self.table, ids=keys) if uniq.numel() else None
        self.__dict__["_ahead"] = (ids, _version(ids), uniq, inverse, keys, req)

    def _take_ahead(self, ids):
        """The prefetch entry for `ids` (None: not prefetched, or for other
        ids); the module's prefetch is used up either way."""
        ahead = self._ahead
        if ahead is None:
            return None
        self.__dict__["_ahead"] = None
        if self._group is not None:
            self._group.ahead.pop(self, None)
        a = ahead[0]
        if _version(a) != ahead[1] or not isinstance(ids, torch.Tensor):  # changed in place since the prefetch
            return None
        if a is not ids and (a.shape != ids.shape or a.dtype != ids.dtype or not (
                (a.data_ptr() == ids.data_ptr() and a.stride() == ids.stride()) or torch.equal(a, ids))):
            return None
        if self._group is not None and ahead[2] is None:  # the group's batch not sent yet: all of it now
            self._group.ahead[self] = ahead
            self._group.flush_pulls()
            if ahead[2] is None:
                return None
        return ahead

    def _lookup(self, ids, what="ids", ahead=None):
        """(unique ids or None, inverse, rows): the prefetched ones when
        `ids` are what prefetch() was given, else checked and pulled now."""
        ahead = ahead if ahead is not None else self._take_ahead(ids)
        if ahead is not None:
            if self._group is not None:
                inverse, rows = ahead[2].lookup(self, ahead)
                return None, inverse, rows
            _, _, uniq, inverse, keys, req = ahead
            return uniq, inverse, self._rows(uniq, keys, None if req is None else req.wait())
        uniq, inverse = self._unique(ids, what)
        return uniq, inverse, self._rows(uniq, self._keys(uniq))

    def _rows(self, uniq, keys, pulled=None):
        """The rows of `uniq` (table keys `keys`) pulled from the servers (or
        `pulled`, their array from a prefetch), (len(uniq), dim) float32.
        With autograd on, a leaf whose gradient (each row's summed over
        every position of its id) is pushed when backward reaches it."""
        if uniq.numel() == 0:
            rows = torch.zeros(0, self.embedding_dim)
        else:
            rows = torch.from_numpy(pulled if pulled is not None else self.client.pull(self.table, ids=keys))
        if torch.is_grad_enabled() and uniq.numel() and not self.__dict__.get("frozen", False):
            rows.requires_grad_(True)
            rows.register_hook(self._pusher(keys))
        return rows

    def _pusher(self, keys):
        def push(grad):
            g = grad.detach()
            if g.dtype != torch.float32:
                g = g.float()
            if not g.is_contiguous():
                g = g.contiguous()
            if self._group is not None:  # sent with the group's others (flush_pushes: at the step)
                self._group.pushes.append((keys, g.numpy()))
                return
            # The request keeps `g`'s array and `keys` alive until it completes.
            self._pushes.append(self.client.push_async(self.table, g.numpy(), ids=keys))
        return push

    def read(self, ids):
        """The current rows of `ids` (any shape) as the servers hold them:
        a tensor of ids.shape + (dim,), no gradient, nothing pushed."""
        uniq, inverse = self._unique(ids)
        with torch.no_grad():
            return torch.nn.functional.embedding(inverse, self._rows(uniq, self._keys(uniq)))

    # -- the rows as a whole: pretrained rows, checkpoints, export

    CHUNK_ROWS = 1 << 16  # rows a state_dict / load moves per request

    def _all_rows(self, what):
        if self.num_embeddings is None:
            raise ValueError(f"{self._what()}: {what} needs num_embeddings (a table of hashed ids has no row "
                             f"list: its rows are kept by the job's snapshots, shardps-snapshot)")
        return self.num_embeddings

    @property
    def weight(self):
        """The rows 0 .. num_embeddings - 1 as the servers hold them, a new
        (num_embeddings, embedding_dim) tensor without gradient (pulled in
        pieces). `module.weight = W` (or load_weight(W)) writes them."""
        return _read_rows(self.read, self._all_rows("weight"), self.embedding_dim, self.CHUNK_ROWS)

    @weight.setter
    def weight(self, value):
        self.load_weight(value)

    def load_weight(self, weight):
        """Writes rows 0 .. len(weight) - 1 (a (rows, embedding_dim) tensor or
        array, rows <= num_embeddings when given): the servers' rows take
        these values and their optimizer state restarts (Client.assign), in
        pieces of CHUNK_ROWS rows. Waits until every server has them."""
        _write_rows(self.client, self.table, weight, self._keys, self._what(), self.embedding_dim,
                    self.num_embeddings, self.CHUNK_ROWS)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, **kw):
        """torch's from_pretrained: a module of embeddings.shape rows and
        dim (num_embeddings = its rows) holding them; `freeze` (torch's
        default, True): backward pushes nothing. Other arguments as the
        constructor's (name, client, group, mode, optimizer, ...)."""
        e = torch.as_tensor(embeddings)
        if e.dim() != 2:
            raise ValueError(f"{cls.__name__}.from_pretrained: embeddings must be 2-d (rows, dim), got "
                             f"{tuple(e.shape)}")
        m = cls(e.shape[0], e.shape[1], **kw)
        m.load_weight(e)
        m.__dict__["frozen"] = bool(freeze)
        return m

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        # `weight`, as torch.nn.Embedding's (loadable into one): a table with
        # num_embeddings only; hashed ids' tables are in the snapshots.
        if self.num_embeddings is not None:
            destination[prefix + "weight"] = self.weight

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        key = prefix + "weight"
        if key in state_dict:
            try:
                self.load_weight(state_dict[key])
            except (ValueError, shardps.Error) as e:
                error_msgs.append(str(e))
        elif strict and self.num_embeddings is not None:
            missing_keys.append(key)

    def wait(self):
        """Waits for every push that backward sent (raises a failed one's
        error); in a group, sends the group's gradients first (one push for
        all its modules). Returns the number of pushes waited for."""
        pushes = self._pushes
        self.__dict__["_pushes"] = []
        for r in pushes:
            r.wait()
        return len(pushes) + (self._group.wait() if self._group is not None else 0)

    def step(self):
        """The end of an iteration's updates: wait(). Then client.clock()
        (ShardedModel.step() does both for the embeddings inside its model)."""
        return self.wait()

    def extra_repr(self):
        n = "" if self.num_embeddings is None else f", num_embeddings={self.num_embeddings}"
        return f"table={self.table.name!r}, dim={self.embedding_dim}{n}, dtype={self.table.dtype}"


class Embedding(_SparseLookup):
    """torch.nn.Embedding whose rows are a sparse shardps table:

        emb = shardps.torch.Embedding(None, 16, name="emb", client=ps, init="uniform", low=-0.05, high=0.05,
                                      optimizer="adagrad", lr=0.05)
        out = emb(ids)          # ids: int64 (or int32) tensor of any shape -> ids.shape + (16,)

    Ids are any int64 >= 0 (hashed or not; no fixed size), or < `num_embeddings`
    when given (else IndexError, as torch). forward pulls the batch's unique
    ids and indexes them, so autograd flows; backward pushes the gradient of
    each pulled row (summed over the positions of its id) and the servers
    apply the optimizer (`optimizer`, `lr`, and `momentum`, `eps`,
    `initial_accumulator`, ... as keyword arguments). `init` and `value`,
    `low`/`high`, `mean`/`stddev`, `seed`: the servers' initializer (default
    N(0, 1) as torch's); an id never pushed reads its initial values.
    `dtype`, `admit_after`, `evict_after_clocks`, `evict_after_sec`,
    `max_rows`, `cold_tier`: the embedding table's options
    (Client.create_table).
    Under torch.no_grad() forward only pulls. The pushes are waited for by
    step() (or ShardedModel.step()), which must come before the clock."""

    def forward(self, ids):
        _, inverse, rows = self._lookup(ids)
        return torch.nn.functional.embedding(inverse, rows)


class EmbeddingBag(_SparseLookup):
    """torch.nn.EmbeddingBag (mode "sum", "mean" or "max") over a sparse
    shardps table; the constructor as Embedding's, plus `mode` and
    `include_last_offset`. forward(input, offsets=None,
    per_sample_weights=None) as torch's: a 2-d input is one bag per row;
    a 1-d input needs `offsets` (each bag's start); `per_sample_weights`
    (the input's shape, mode "sum" only) weighs each id."""

    def __init__(self, *args, mode="mean", include_last_offset=False, **kw):
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"mode must be one of sum, mean, max, got {mode!r}")
        super().__init__(*args, **kw)
        self.mode, self.include_last_offset = mode, bool(include_last_offset)

    def forward(self, input, offsets=None, per_sample_weights=None):
        ahead = self._take_ahead(input) if self._ahead is not None else None
        if ahead is not None and self._group is not None and offsets is None and per_sample_weights is None and \
                input.dim() == 2 and input.shape[1] > 0:  # the group's one pooling: this module's bags
            return ahead[2].pooled(self, ahead)
        self._check_ids(input, "input")
        offsets = _bag_offsets(self._what(), input, offsets)
        if per_sample_weights is not None:
            if self.mode != "sum":
                raise ValueError(f"{self._what()}: per_sample_weights is for mode 'sum' only, not {self.mode!r}")
            if not isinstance(per_sample_weights, torch.Tensor) or per_sample_weights.shape != input.shape or \
                    not per_sample_weights.is_floating_point():
                raise ValueError(f"{self._what()}: per_sample_weights must be a floating tensor of the input's "
                                 f"shape {tuple(input.shape)}")
            per_sample_weights = per_sample_weights.float()
        _, inverse, rows = self._lookup(input, "input", ahead)
        return torch.nn.functional.embedding_bag(inverse, rows, offsets, mode=self.mode,
                                                 per_sample_weights=per_sample_weights,
                                                 include_last_offset=self.include_last_offset)

    def extra_repr(self):
        return super().extra_repr() + f", mode={self.mode!r}"


class EmbeddingBagConfig:
    """One table of an EmbeddingBagCollection, in TorchRec's shape: its
    `name` (the sparse table's), `embedding_dim`, `num_embeddings` (None:
    any id >= 0), `feature_names` (the features looked up in it; default
    [name]), `pooling` ("sum", "mean" or "max"), and the table's options
    as keyword arguments (init, low/high, mean/stddev, seed, optimizer, lr,
    dtype, admit_after, cold_tier, ...: as Embedding's)."""

    def __init__(self, name, embedding_dim, num_embeddings=None, feature_names=None, pooling="sum", **table_options):
        if not isinstance(name, str) or not name:
            raise ValueError(f"EmbeddingBagConfig: name must be a non-empty string, got {name!r}")
        _positive("embedding_dim", embedding_dim)
        if num_embeddings is not None:
            _positive("num_embeddings", num_embeddings)
        if pooling not in ("sum", "mean", "max"):
            raise ValueError(f"EmbeddingBagConfig '{name}': pooling must be one of sum, mean, max, got {pooling!r}")
        self.name, self.embedding_dim, self.num_embeddings = name, embedding_dim, num_embeddings
        self.feature_names = list(feature_names) if feature_names is not None else [name]
        if not self.feature_names:
            raise ValueError(f"EmbeddingBagConfig '{name}': feature_names is empty")
        self.pooling, self.table_options = pooling, dict(table_options)

    def __repr__(self):
        return (f"EmbeddingBagConfig(name={self.name!r}, embedding_dim={self.embedding_dim}, "
                f"num_embeddings={self.num_embeddings}, feature_names={self.feature_names!r}, "
                f"pooling={self.pooling!r})")


class EmbeddingBagCollection(torch.nn.Module):
    """Every sparse feature of a batch in one lookup (TorchRec's
    EmbeddingBagCollection): `tables` is a list of EmbeddingBagConfig, each
    a shardps sparse table pooled over the bags of its features.

        ebc = shardps.torch.EmbeddingBagCollection(ps, [
            EmbeddingBagConfig("user", 16, feature_names=["user_id"], optimizer="adagrad", lr=0.05),
            EmbeddingBagConfig("item", 16, feature_names=["item_id", "last_item"], pooling="mean")])
        out = ebc({"user_id": ids_2d, "item_id": (values, offsets), "last_item": ids_2d})

    forward(features, per_sample_weights=None): `features` maps each
    feature name to its ids for the batch -- a 2-d tensor (one bag per row)
    or (values, offsets) as EmbeddingBag takes them -- or is a TorchRec
    KeyedJaggedTensor (keys(), values(), offsets()); every feature has the
    same number of bags (the batch size B). `per_sample_weights`: {feature:
    weights of its ids' shape}, for tables pooled by "sum". Each table's
    ids (over all its features) are deduplicated, and all tables' rows are
    pulled together: one request per server for the whole batch
    (Client.hold_requests), into one buffer. Backward sums each id's
    gradient and pushes every table's at once, again one request per
    server, without waiting; step() (or ShardedModel.step()) waits for them
    before the clock. `output`: "dict" ({feature: (B, dim)}, the default),
    "stacked" ((B, features, dim), every dim equal) or "concat" ((B, sum of
    dims), TorchRec's KeyedTensor.values()), in the order of `tables` and
    their feature_names."""

    def __init__(self, client, tables, output="dict"):
        super().__init__()
        if output not in ("dict", "stacked", "concat"):
            raise ValueError(f"output must be one of dict, stacked, concat, got {output!r}")
        tables = list(tables)
        if not tables or not all(isinstance(t, EmbeddingBagConfig) for t in tables):
            raise ValueError("tables must be a non-empty list of shardps.torch.EmbeddingBagConfig")
        self.client, self.configs, self.output = client, tables, output
        self.feature_names = [f for t in tables for f in t.feature_names]
        if len(set(self.feature_names)) != len(self.feature_names):
            raise ValueError(f"a feature is in more than one table: {self.feature_names}")
        if len({t.name for t in tables}) != len(tables):
            raise ValueError(f"two tables of the same name: {[t.name for t in tables]}")
        if output == "stacked" and len({t.embedding_dim for t in tables}) != 1:
            raise ValueError("output='stacked' needs every table's embedding_dim equal, got "
                             f"{[t.embedding_dim for t in tables]}")
        self.tables = []
        for t in tables:
            opts = dict(t.table_options)
            if opts.get("init", "normal") == "normal" and "mean" not in opts and "stddev" not in opts:
                opts.update(mean=0.0, stddev=1.0)  # torch.nn.EmbeddingBag's N(0, 1)
            self.tables.append(client.create_table(t.name, kind="sparse", cols=t.embedding_dim, **opts))
        self._pushes = []
        self._ahead = None  # prefetch(): (features, checked, plan, buffer, sizes, keys, requests)

    def _features(self, features):
        """{feature: (ids, offsets or None)}, from a dict or a KeyedJaggedTensor."""
        if hasattr(features, "keys") and hasattr(features, "values") and hasattr(features, "offsets") and \
                not isinstance(features, dict):
            keys, values = list(features.keys()), features.values()
            offsets = features.offsets()  # one per bag, per key, and the end: (len(keys) * B + 1,)
            b = (offsets.numel() - 1) // max(len(keys), 1)
            out = {}
            for i, k in enumerate(keys):
                o = offsets[i * b:(i + 1) * b + 1]
                out[k] = (values[int(o[0]):int(o[-1])], (o[:-1] - o[0]))
            features = out
        if not isinstance(features, dict):
            raise TypeError(f"EmbeddingBagCollection: features must be a dict {{feature: ids}} or a "
                            f"KeyedJaggedTensor, got {type(features).__name__}")
        missing = [f for f in self.feature_names if f not in features]
        unknown = [f for f in features if f not in self.feature_names]
        if missing or unknown:
            said = ([f"missing: {missing}"] if missing else []) + ([f"not in any table: {unknown}"] if unknown else [])
            raise KeyError(f"EmbeddingBagCollection: features {'; '.join(said)}")
        out = {}
        for f in self.feature_names:
            v = features[f]
            ids, offsets = v if isinstance(v, tuple) else (v, None)
            if not isinstance(ids, torch.Tensor) or ids.dtype not in (torch.int64, torch.int32):
                raise TypeError(f"feature '{f}': ids must be an int64 (or int32) tensor, got "
                                f"{getattr(ids, 'dtype', type(ids).__name__)}")
            if ids.device.type != "cpu":
                raise ValueError(f"feature '{f}': ids must be on the CPU, got a tensor on {ids.device}")
            out[f] = (ids.long(), _bag_offsets(f"feature '{f}'", ids, offsets))
        bags = {f: (ids.shape[0] if offsets is None else offsets.numel()) for f, (ids, offsets) in out.items()}
        if len(set(bags.values())) > 1:
            raise ValueError(f"EmbeddingBagCollection: every feature needs the same number of bags, got {bags}")
        return out

    @staticmethod
    def _same(a, b):
        """Whether the features `b` are those `a` (given to prefetch): the
        same object, or dicts of equal ids (and offsets)."""
        if a is b:
            return True
        if not isinstance(a, dict) or not isinstance(b, dict) or a.keys() != b.keys():
            return False

        def parts(v):
            return v if isinstance(v, tuple) else (v,)
        for k in a:
            pa, pb = parts(a[k]), parts(b[k])
            if len(pa) != len(pb) or not all(isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor) and
                                              x.shape == y.shape and torch.equal(x, y) for x, y in zip(pa, pb)):
                return False
        return True

    def _plan(self, feats):
        """Per table: (config, table, its features' unique ids, [(feature,
        inverse, offsets)]), the ids checked against the table."""
        plan = []
        for c, table in zip(self.configs, self.tables):
            parts = [feats[f][0] for f in c.feature_names]
            uniq, inverse = _unique(torch.cat([p.flatten() for p in parts]) if len(parts) > 1 else parts[0].flatten())
            _check_unique(f"table '{c.name}'", uniq, c.num_embeddings)
            pieces, at = [], 0
            for f, p in zip(c.feature_names, parts):
                pieces.append((f, inverse[at:at + p.numel()].view(p.shape), feats[f][1]))
                at += p.numel()
            plan.append((c, table, uniq, pieces))
        return plan

    def _issue(self, plan):
        """Every table's pull, into one buffer, in one request per server:
        (the buffer, each table's share of it, each table's keys, requests)."""
        sizes = [uniq.numel() * c.embedding_dim for c, _, uniq, _ in plan]
        flat = torch.empty(sum(sizes))
        buf, reqs, keys, at = flat.numpy(), [], [], 0
        with self.client.hold_requests():
            for (c, table, uniq, _), n in zip(plan, sizes):
                k = uniq.numpy()  # int64, as the ids are
                keys.append(k)
                if n:
                    reqs.append(self.client.pull_async(table, out=buf[at:at + n].reshape(-1, c.embedding_dim),
                                                       ids=k))
                at += n
        return flat, sizes, keys, reqs

    def prefetch(self, features):
        """Issues every table's pull for `features` now, in one request per
        server, without waiting: the next forward with these features (the
        same object, or dicts of equal ids) uses them. In
        ShardedModel.step(ahead=...) they leave behind the tick, with the
        dense pulls: the next batch's rows on their way during the wait."""
        feats = self._features(features)
        plan = self._plan(feats)
        self._ahead = (features, feats, plan) + self._issue(plan)

    def forward(self, features, per_sample_weights=None):
        ahead, self._ahead = self._ahead, None
        if ahead is not None and self._same(ahead[0], features):
            _, feats, plan, flat, sizes, keys, reqs = ahead
        else:
            feats = self._features(features)
            plan = self._plan(feats)
            flat, sizes, keys, reqs = self._issue(plan)
        weights = per_sample_weights or {}
        for f, w in weights.items():
            t = next((c for c in self.configs if f in c.feature_names), None)
            if t is None:
                raise KeyError(f"per_sample_weights: feature '{f}' is not in any table")
            if t.pooling != "sum":
                raise ValueError(f"per_sample_weights: feature '{f}' is pooled by {t.pooling!r} (weights: 'sum' only)")
            if not isinstance(w, torch.Tensor) or w.shape != feats[f][0].shape or not w.is_floating_point():
                raise ValueError(f"per_sample_weights['{f}'] must be a floating tensor of its ids' shape "
                                 f"{tuple(feats[f][0].shape)}")
        for r in reqs:
            r.wait()
        if torch.is_grad_enabled() and flat.numel():
            flat.requires_grad_(True)
            flat.register_hook(self._pusher(plan, sizes, keys))
        pooled = {}
        # One split of the rows: its backward is one concatenation (a slice
        # per table would zero-fill all of them once per table in backward).
        for (c, _, uniq, pieces), part in zip(plan, flat.split(sizes)):
            rows = part.view(-1, c.embedding_dim)
            for f, inverse, offsets in pieces:
                w = weights.get(f)
                pooled[f] = torch.nn.functional.embedding_bag(
                    inverse, rows, offsets, mode=c.pooling, per_sample_weights=None if w is None else w.float())
        if self.output == "dict":
            return pooled
        outs = [pooled[f] for f in self.feature_names]
        return torch.stack(outs, dim=1) if self.output == "stacked" else torch.cat(outs, dim=1)

    def _pusher(self, plan, sizes, keys):
        def push(grad):
            g = grad.detach()
            if not g.is_contiguous():
                g = g.contiguous()
            buf, at = g.numpy(), 0
            # Every table's gradient in one request per server; each
            # request keeps its slice of `g` (and its keys) alive.
            with self.client.hold_requests():
                for (c, table, _, _), n, k in zip(plan, sizes, keys):
                    if n:
                        self._pushes.append(self.client.push_async(
                            table, buf[at:at + n].reshape(-1, c.embedding_dim), ids=k))
                    at += n
        return push

    def read(self, table, ids):
        """The current rows of `ids` in table `table` (its name), as the
        servers hold them: ids.shape + (dim,), no gradient."""
        c, t = next(((c, t) for c, t in zip(self.configs, self.tables) if c.name == table), (None, None))
        if c is None:
            raise KeyError(f"no table '{table}' in this collection: {[c.name for c in self.configs]}")
        flat = ids.reshape(-1).long().numpy()
        rows = self.client.pull(t, ids=flat) if flat.size else np.zeros((0, c.embedding_dim), np.float32)
        return torch.from_numpy(rows).reshape(*ids.shape, c.embedding_dim)

    # -- the rows as a whole: checkpoints, export (TorchRec's state_dict keys)

    CHUNK_ROWS = _SparseLookup.CHUNK_ROWS

    def _save_to_state_dict(self, destination, prefix, keep_vars):
        # `embedding_bags.NAME.weight` per table with num_embeddings, as
        # TorchRec's collection (each loadable into a torch.nn.EmbeddingBag);
        # hashed ids' tables are in the snapshots.
        for c in self.configs:
            if c.num_embeddings is not None:
                destination[f"{prefix}embedding_bags.{c.name}.weight"] = _read_rows(
                    lambda ids, name=c.name: self.read(name, ids), c.num_embeddings, c.embedding_dim, self.CHUNK_ROWS)

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys,
                              error_msgs):
        for c, t in zip(self.configs, self.tables):
            key = f"{prefix}embedding_bags.{c.name}.weight"
            if key in state_dict:
                try:
                    _write_rows(self.client, t, state_dict[key], lambda ids: ids.numpy(), f"table '{c.name}'",
                                c.embedding_dim, c.num_embeddings, self.CHUNK_ROWS)
                except (ValueError, shardps.Error) as e:
                    error_msgs.append(str(e))
            elif strict and c.num_embeddings is not None:
                missing_keys.append(key)
        if strict:
            mine = f"{prefix}embedding_bags."
            unexpected_keys.extend(k for k in state_dict if k.startswith(mine) and
                                   k[len(mine):].removesuffix(".weight") not in {c.name for c in self.configs})

    def wait(self):
        """Waits for every push that backward sent (raises a failed one's
        error). Returns the number of pushes waited for."""
        pushes, self._pushes = self._pushes, []
        for r in pushes:
            r.wait()
        return len(pushes)

    def step(self):
        """The end of an iteration's updates: wait(). Then client.clock()."""
        return self.wait()

    def extra_repr(self):
        return f"tables={[c.name for c in self.configs]}, features={self.feature_names}, output={self.output!r}"


class _PairwiseDot(torch.autograd.Function):
    @staticmethod
    def forward(ctx, v):
        v = v.detach().contiguous()
        out = torch.empty(v.shape[0], v.shape[1] * (v.shape[1] - 1) // 2)
        shardps._ext.pairwise_dot(v.numpy(), out.numpy())
        ctx.save_for_backward(v)
        return out

    @staticmethod
    def backward(ctx, dz):
        v, = ctx.saved_tensors
        dv = torch.empty_like(v)
        shardps._ext.pairwise_dot_backward(v.numpy(), dz.detach().float().contiguous().numpy(), dv.numpy())
        return dv


def pairwise_dot(v):
    """DLRM's interaction: for v (batch, n, dim) float32 on the CPU, every
    pair i < j of a row's vectors, their dot product, as (batch, n (n - 1)
    / 2) in torch.triu_indices(n, n, 1)'s order -- what
    `torch.bmm(v, v.transpose(1, 2))[:, iu[0], iu[1]]` computes, with its
    gradient, in a C++ kernel (the GIL released) instead of a small matrix
    product per example and a scatter in backward: about half the time at
    batch 64 and 27 vectors of 16 here (docs/python.md)."""
    if not isinstance(v, torch.Tensor) or v.dim() != 3 or v.dtype != torch.float32 or v.device.type != "cpu":
        raise ValueError(f"pairwise_dot: v must be a (batch, n, dim) float32 CPU tensor, got "
                         f"{getattr(v, 'dtype', type(v).__name__)} of shape {tuple(getattr(v, 'shape', ()))}")
    return _PairwiseDot.apply(v)


class WorkerSampler(torch.utils.data.Sampler):
    """torch.utils.data's sampler for a shardps job: this worker's share of
    a dataset's indices, as torch's DistributedSampler gives a DDP rank its
    share, with the rank and the number of workers taken from the client
    (`client`, else the one of set_client):

        sampler = shardps.torch.WorkerSampler(dataset, shuffle=True, seed=1)
        loader = torch.utils.data.DataLoader(dataset, batch_size=64, sampler=sampler)
        for epoch in range(epochs):
            sampler.set_epoch(epoch)     # another order every epoch, the same on every worker
            for x, y in loader: ...

    Every worker gets the same number of indices -- the same number of steps,
    which sync needs: with drop_last (the default) the dataset's tail that
    does not divide evenly is left out of the epoch; without it, the first
    indices are repeated to fill the last share. Each epoch's permutation
    depends on (seed, epoch) only, the same on every worker, and the shares
    are disjoint. `dataset` may be a Dataset (its len()) or an int."""

    def __init__(self, dataset, client=None, shuffle=True, seed=0, drop_last=True):
        c = _the_client(client, "WorkerSampler")
        self.rank, self.workers = c.rank, c.num_workers
        if self.workers < 1 or not 0 <= self.rank < self.workers:
            raise ValueError(f"WorkerSampler: this client is not a worker of the job (rank {self.rank} of "
                             f"{self.workers} workers); connect as a worker")
        self.size = dataset if isinstance(dataset, int) else len(dataset)
        if self.size < 0:
            raise ValueError(f"WorkerSampler: the dataset's size must be >= 0, got {self.size}")
        self.shuffle, self.seed, self.drop_last, self.epoch = shuffle, int(seed), drop_last, 0
        per = self.size // self.workers if drop_last else -(-self.size // self.workers)
        self.per_worker = per

    def set_epoch(self, epoch):
        """The epoch whose order the next iteration gives (as DistributedSampler's)."""
        self.epoch = int(epoch)

    def __iter__(self):
        if self.shuffle:
            order = torch.randperm(self.size, generator=torch.Generator().manual_seed(self.seed * 1000003 + self.epoch))
        else:
            order = torch.arange(self.size)
        total = self.per_worker * self.workers
        if total > self.size:  # not drop_last: the first indices again, to fill the last share
            order = torch.cat([order, order[:total - self.size]])
        return iter(order[self.rank:total:self.workers].tolist())

    def __len__(self):
        return self.per_worker


# A state_dict on disk, streamed (client/python/shardps/checkpoint.py).
from shardps.checkpoint import load, save  # noqa: E402  (it uses the classes above)
# The user's optimizer run by the servers (client/python/shardps/optim.py).
from shardps.optim import DistributedOptimizer  # noqa: E402
