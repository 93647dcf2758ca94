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
"""

import contextlib

import numpy as np
import torch

import shardps


def _rows_cols(p):
    n = p.numel()
    rows = p.shape[0] if p.dim() >= 1 else 1
    return rows, n // rows


class ShardedModel:
    """Maps `module`'s parameters to tables and moves them between the
    model and the servers. The tables start from the servers' initializer
    (`init`: "he" -- weights normal with stddev sqrt(2 / fan_in), biases
    zero -- or a shardps initializer with `stddev`; `seed`: the same on
    every worker), so pull() before the first step. `optimizer`, `lr` and `optimizer_args` (momentum, beta1,
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
    pull(predict=False) before saving it at the end."""

    def __init__(self, client, module, optimizer="sgd", lr=0.01, init="he", stddev=0.05, seed=1, prefix="",
                 push_in_backward=True, prefetch=False, predict=0.0, **optimizer_args):
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
        for name, p in module.named_parameters():
            if not p.requires_grad:  # frozen: not trained, not a table
                continue
            if not p.is_contiguous():
                raise ValueError(f"parameter '{name}' is not contiguous: pulls could not land in its storage "
                                 f"(make it contiguous, e.g. not channels_last, before mapping the model)")
            rows, cols = _rows_cols(p)
            if init == "he":  # weights: normal, stddev sqrt(2 / fan_in); biases (1-d): zeros
                kind, sd = ("normal", (2.0 / cols) ** 0.5) if p.dim() >= 2 else ("zeros", 0.0)
            else:
                kind, sd = init, stddev
            t = client.create_table(prefix + name, rows=rows, cols=cols, init=kind, stddev=sd, seed=seed,
                                    optimizer=optimizer, lr=lr, **optimizer_args)
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
        if self._prefetch is not None:
            reqs = self._prefetch
            for r in reqs:
                r.wait()
            for view, staged in zip(self.views, self._staged):
                np.copyto(view, staged)
            self._prefetch = None
        else:
            reqs = [self.client.pull_async(t, out=v) for t, v in zip(self.tables, self.views)]
            for r in reqs:
                r.wait()
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
        for p, t in zip(self.params, self.tables):
            if p.grad is not None:
                rows, cols = _rows_cols(p)
                self._pushes.append(self.client.push_async(t, p.grad.detach().contiguous().numpy().reshape(rows, cols)))

    def start_prefetch(self):
        """Sends the next iteration's pulls now (into staging buffers)."""
        if self._staged is None:
            self._staged = [np.empty_like(v) for v in self.views]
        self._prefetch = [self.client.prefetch(t, out=s) for t, s in zip(self.tables, self._staged)]

    def step(self):
        """Ends the iteration: the pushes arrive, the clock ends, the
        parameters for the next iteration are pulled into the model."""
        if not self._pushes:
            self.push_grads()
        if self.prefetching:
            self.start_prefetch()
        for r in self._pushes:
            r.wait()
            self._tau += 0.02 * (r.staleness - self._tau)  # as shardps-worker's StalenessMean
        self._pushes = []
        for p in self.params:
            p.grad = None
        self.client.clock()
        self.pull()
