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
summed gradient, the servers apply the optimizer. ShardedModel.step()
waits for the pushes of every such module inside the model before it ends
the clock; alone, call the module's step() before client.clock().
"""

import contextlib

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
        self.embeddings = [m for m in module.modules() if isinstance(m, _SparseLookup)]
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

    def step(self):
        """Ends the iteration: the pushes arrive (the model's shardps
        embeddings' too), the clock ends, the parameters for the next
        iteration are pulled into the model."""
        if not self._pushes:
            self.push_grads()
        if self.prefetching:
            self.start_prefetch()
        for e in self.embeddings:
            e.wait()
        for p in self.params:
            p.grad = None
        # As shardps-worker: the tick and the next pulls go out at once,
        # without a round trip for the pushes first (the tick is sent behind
        # them; under sync, once they are answered; the pulls behind it).
        pushes, self._pushes = self._pushes, []
        with self.client.hold_requests():  # the tick and the pulls: one message per server
            tick = self.client.clock_async()
            pulls = self._issue_pulls()
        for r in pushes:
            r.wait()
            self._tau += 0.02 * (r.staleness - self._tau)  # as shardps-worker's StalenessMean
        tick.wait()
        self._land(pulls, True)


def _positive(what, value, lowest=1):
    if isinstance(value, bool) or not isinstance(value, int) or value < lowest:
        raise ValueError(f"{what} must be an integer >= {lowest}, got {value!r}")
    return value


class _SparseLookup(torch.nn.Module):
    """What Embedding and EmbeddingBag share: the sparse table, the checks
    of the ids, the pull of a batch's unique ids and the push of their
    gradient in backward. It has no parameters: its rows are on the
    servers (state_dict() is empty; snapshots keep them)."""

    def __init__(self, client, name, dim, num_embeddings=None, *, init="normal", value=None, low=None, high=None,
                 mean=None, stddev=None, seed=0, optimizer="sgd", lr=0.01, dtype="f32", admit_after=0,
                 evict_after_clocks=0, evict_after_sec=0, max_rows=0, **optimizer_args):
        super().__init__()
        _positive("dim", dim)
        if num_embeddings is not None:
            _positive("num_embeddings", num_embeddings)
        if init == "normal" and mean is None and stddev is None:
            mean, stddev = 0.0, 1.0  # torch.nn.Embedding's N(0, 1)
        self.client, self.embedding_dim, self.num_embeddings = client, dim, num_embeddings
        self.table = client.create_table(name, kind="sparse", cols=dim, init=init, value=value, low=low, high=high,
                                         mean=mean, stddev=stddev, seed=seed, optimizer=optimizer, lr=lr,
                                         max_rows=max_rows, dtype=dtype, admit_after=admit_after,
                                         evict_after_clocks=evict_after_clocks, evict_after_sec=evict_after_sec,
                                         **optimizer_args)
        self._pushes = []

    def _what(self):
        return f"{type(self).__name__} '{self.table.name}'"

    def _unique(self, ids, what="ids"):
        """(unique ids, ascending, int64; each position's index into them),
        after checking `ids`: a CPU tensor of int64 or int32, every id >= 0
        and < num_embeddings (when given)."""
        if not isinstance(ids, torch.Tensor):
            raise TypeError(f"{self._what()}: {what} must be a torch.Tensor of int64 (or int32) ids, "
                            f"got {type(ids).__name__}")
        if ids.dtype not in (torch.int64, torch.int32):
            raise TypeError(f"{self._what()}: {what} must be int64 (or int32), got {ids.dtype}")
        if ids.device.type != "cpu":
            raise ValueError(f"{self._what()}: {what} must be on the CPU, got a tensor on {ids.device}")
        uniq, inverse = torch.unique(ids.long(), sorted=True, return_inverse=True)
        if uniq.numel():
            if uniq[0] < 0:
                raise IndexError(f"{self._what()}: id {int(uniq[0])} is negative (ids are int64 >= 0)")
            if self.num_embeddings is not None and uniq[-1] >= self.num_embeddings:
                raise IndexError(f"{self._what()}: id {int(uniq[-1])} is out of range: num_embeddings is "
                                 f"{self.num_embeddings}")
        return uniq, inverse

    def _rows(self, uniq):
        """The rows of `uniq` pulled from the servers, (len(uniq), dim)
        float32. With autograd on, a leaf whose gradient (each row's summed
        over every position of its id) is pushed when backward reaches it."""
        if uniq.numel() == 0:
            rows = torch.zeros(0, self.embedding_dim)
        else:
            keys = uniq.numpy()
            rows = torch.from_numpy(self.client.pull(self.table, ids=keys))
        if torch.is_grad_enabled() and uniq.numel():
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
            # The request keeps `g`'s array and `keys` alive until it completes.
            self._pushes.append(self.client.push_async(self.table, g.numpy(), ids=keys))
        return push

    def read(self, ids):
        """The current rows of `ids` (any shape) as the servers hold them:
        a tensor of ids.shape + (dim,), no gradient, nothing pushed."""
        uniq, inverse = self._unique(ids)
        with torch.no_grad():
            return torch.nn.functional.embedding(inverse, self._rows(uniq))

    def wait(self):
        """Waits for every push that backward sent (raises a failed one's
        error). Returns the number of pushes waited for."""
        pushes, self._pushes = self._pushes, []
        for r in pushes:
            r.wait()
        return len(pushes)

    def step(self):
        """The end of an iteration's updates: wait(). Then client.clock()
        (ShardedModel.step() does both for the embeddings inside its model)."""
        return self.wait()

    def extra_repr(self):
        n = "" if self.num_embeddings is None else f", num_embeddings={self.num_embeddings}"
        return f"table={self.table.name!r}, dim={self.embedding_dim}{n}, dtype={self.table.dtype}"


class Embedding(_SparseLookup):
    """torch.nn.Embedding whose rows are a sparse shardps table:

        emb = shardps.torch.Embedding(ps, "emb", dim=16, init="uniform", low=-0.05, high=0.05,
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
    `max_rows`: the embedding table's options (Client.create_table).
    Under torch.no_grad() forward only pulls. The pushes are waited for by
    step() (or ShardedModel.step()), which must come before the clock."""

    def forward(self, ids):
        uniq, inverse = self._unique(ids)
        return torch.nn.functional.embedding(inverse, self._rows(uniq))


class EmbeddingBag(_SparseLookup):
    """torch.nn.EmbeddingBag (mode "sum", "mean" or "max") over a sparse
    shardps table; the constructor as Embedding's, plus `mode` and
    `include_last_offset`. forward(input, offsets=None,
    per_sample_weights=None) as torch's: a 2-d input is one bag per row;
    a 1-d input needs `offsets` (each bag's start); `per_sample_weights`
    (the input's shape, mode "sum" only) weighs each id."""

    def __init__(self, client, name, dim, num_embeddings=None, *, mode="mean", include_last_offset=False, **kw):
        if mode not in ("sum", "mean", "max"):
            raise ValueError(f"mode must be one of sum, mean, max, got {mode!r}")
        super().__init__(client, name, dim, num_embeddings, **kw)
        self.mode, self.include_last_offset = mode, bool(include_last_offset)

    def forward(self, input, offsets=None, per_sample_weights=None):
        if isinstance(input, torch.Tensor) and input.dim() not in (1, 2):
            raise ValueError(f"{self._what()}: input must be 1-d (with offsets) or 2-d (one bag per row), "
                             f"got {input.dim()} dimensions")
        uniq, inverse = self._unique(input, "input")
        if input.dim() == 2 and offsets is not None:
            raise ValueError(f"{self._what()}: offsets must be None for a 2-d input (each row is a bag)")
        if input.dim() == 1:
            if offsets is None:
                raise ValueError(f"{self._what()}: a 1-d input needs offsets (each bag's start)")
            if not isinstance(offsets, torch.Tensor) or offsets.dim() != 1 or \
                    offsets.dtype not in (torch.int64, torch.int32):
                raise ValueError(f"{self._what()}: offsets must be a 1-d int64 (or int32) tensor")
            offsets = offsets.long()
        if per_sample_weights is not None:
            if self.mode != "sum":
                raise ValueError(f"{self._what()}: per_sample_weights is for mode 'sum' only, not {self.mode!r}")
            if not isinstance(per_sample_weights, torch.Tensor) or per_sample_weights.shape != input.shape or \
                    not per_sample_weights.is_floating_point():
                raise ValueError(f"{self._what()}: per_sample_weights must be a floating tensor of the input's "
                                 f"shape {tuple(input.shape)}")
            per_sample_weights = per_sample_weights.float()
        return torch.nn.functional.embedding_bag(inverse, self._rows(uniq), offsets, mode=self.mode,
                                                 per_sample_weights=per_sample_weights,
                                                 include_last_offset=self.include_last_offset)

    def extra_repr(self):
        return super().extra_repr() + f", mode={self.mode!r}"
