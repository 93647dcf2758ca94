#!/usr/bin/python3
"""Wide & Deep (Cheng et al. 2016) on a Criteo-format click log, written as
a plain PyTorch model -- one torch.nn.EmbeddingBag per feature and part, 52
tables -- and moved onto shardps by changing only its embedding constructor
and its optimizer line:

    # one process, plain PyTorch:
    /usr/bin/python3 client/examples/torch_widedeep.py --local \\
        --train-tsv /tmp/clicks/train.tsv --test-tsv /tmp/clicks/test.tsv
    # the same model through shardps, 2 servers + 2 workers:
    tools/shardps-launch --servers 2 --workers 2 -- /usr/bin/python3 client/examples/torch_widedeep.py \\
        --coordinator {coordinator} --rank {rank} --train-tsv /tmp/clicks/train.tsv --test-tsv /tmp/clicks/test.tsv

The model: the wide part, a 1-wide embedding per feature summed with a
linear map of the 13 dense features; the deep part, a --dim embedding per
feature concatenated with the dense features into an MLP (13 + 26 dim)-256-
128-1; the two logits added; BCE; Adagrad (--lr) everywhere; batch --batch
per process; embeddings uniform in [-0.05, 0.05]. Each of the 26 features
has its own --rows-row table (row 0: missing; CriteoKey's row). The lines marked "only here" are all that
differs between the two runs: `Bag` makes torch.nn.EmbeddingBag or
shardps.torch.EmbeddingBag, and torch.optim.Adagrad is wrapped in
shardps.torch.DistributedOptimizer (the servers run it). Through shardps the
loop also prefetches each batch's rows in the step before it
(ShardedModel.step(ahead=...)). The embeddings of one width are a group
(group=...): the 26 feature tables of a width are one table on the servers,
each module its own rows in it, so a step sends the 52 modules' rows as 2
pulls and their gradients as 2 pushes per server, with the tick and the
MLP's pulls in one message.

Data: shardps.CriteoReader (shardps-worker's C++ parser, a thread ahead), in
both runs. Worker 0 (or the one process) prints the test AUC after every
epoch; with --json FILE each epoch's figures are appended as a JSON line.
"""
import os

for _k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_k, "1")

import argparse
import json
import sys
import time

import numpy as np
import torch

import shardps
import shardps.torch

FEATURES = 26
ROW_MASK = (1 << 56) - 1  # CriteoKey: feature << 56 | row


class WideDeep(torch.nn.Module):
    """The model as a PyTorch user writes it; `Bag(num_embeddings, dim)`
    makes each feature's embedding bag."""

    def __init__(self, Bag, rows, dim):
        super().__init__()
        self.wide = torch.nn.ModuleList([Bag(rows, 1) for _ in range(FEATURES)])
        self.deep = torch.nn.ModuleList([Bag(rows, dim) for _ in range(FEATURES)])
        self.wide_dense = torch.nn.Linear(13, 1)
        self.mlp = torch.nn.Sequential(torch.nn.Linear(13 + FEATURES * dim, 256), torch.nn.ReLU(),
                                       torch.nn.Linear(256, 128), torch.nn.ReLU(), torch.nn.Linear(128, 1))

    def forward(self, x, ids):
        # ids: (b, 26), one id a feature: bag f of row i is ids[i, f:f+1].
        cols = [ids[:, f:f + 1] for f in range(FEATURES)]
        wide = self.wide_dense(x) + sum(self.wide[f](c) for f, c in enumerate(cols))
        deep = self.mlp(torch.cat([x] + [self.deep[f](c) for f, c in enumerate(cols)], dim=1))
        return (wide + deep).squeeze(1)

    def prefetch(self, ids):
        """shardps only: each table's rows of this batch, requested now."""
        for f in range(FEATURES):
            c = ids[:, f:f + 1]
            self.wide[f].prefetch(c)
            self.deep[f].prefetch(c)


def batches(reader):
    for y, x, keys in reader:
        yield torch.from_numpy(y), torch.from_numpy(x), torch.from_numpy(keys & ROW_MASK)


def auc(y, p):
    """The area under the ROC curve (a rank statistic)."""
    o = np.argsort(p, kind="mergesort")
    r = np.empty(len(p))
    r[o] = np.arange(1, len(p) + 1)
    pos = y == 1
    n1, n0 = pos.sum(), (~pos).sum()
    return float((r[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def evaluate(model, path, rows):
    ys, logits = [], []
    with torch.no_grad():
        for y, x, ids in batches(shardps.CriteoReader(path, 8192, rows=rows, shuffle=False, last_partial=True)):
            ys.append(y)
            logits.append(model(x, ids))
    y, logit = torch.cat(ys), torch.cat(logits)
    return auc(y.numpy(), logit.numpy()), torch.nn.functional.binary_cross_entropy_with_logits(logit, y).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--local", action="store_true", help="one plain PyTorch process (no shardps job)")
    ap.add_argument("--coordinator", default=os.environ.get("SHARDPS_COORDINATOR"))
    ap.add_argument("--rank", type=int, default=int(os.environ.get("SHARDPS_RANK", "-1")))
    ap.add_argument("--train-tsv", required=True)
    ap.add_argument("--test-tsv", required=True)
    ap.add_argument("--rows", type=int, default=1 << 18, help="rows per feature table (row 0: missing)")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--batch", type=int, default=128, help="examples per step per process")
    ap.add_argument("--lr", type=float, default=0.05)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--json", help="append each epoch's figures as a JSON line")
    args = ap.parse_args()
    if not args.local and not args.coordinator:
        ap.error("--coordinator (or SHARDPS_COORDINATOR) is required, or --local")
    if args.rows < 2:
        ap.error("--rows must be at least 2")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    ps = None
    if args.local:
        rank, world = 0, 1
        def Bag(n, d):  # (only here)
            bag = torch.nn.EmbeddingBag(n, d, mode="sum", sparse=True)
            torch.nn.init.uniform_(bag.weight, -0.05, 0.05)
            return bag
    else:
        ps = shardps.torch.set_client(shardps.connect(args.coordinator, rank=None if args.rank < 0 else args.rank))
        rank, world = ps.rank, ps.num_workers
        def Bag(n, d):  # (only here; group: the 26 tables of a width share one on the servers)
            return shardps.torch.EmbeddingBag(n, d, mode="sum", init="uniform", low=-0.05, high=0.05, seed=args.seed,
                                              optimizer="adagrad", lr=args.lr, eps=1e-10, group=f"widedeep.{d}")
    model = WideDeep(Bag, args.rows, args.dim)
    opt = torch.optim.Adagrad(model.parameters(), lr=args.lr)
    if not args.local:  # (only here: the servers run the optimizer)
        opt = shardps.torch.DistributedOptimizer(opt, model, init="torch", seed=args.seed)
    loss_fn = torch.nn.BCEWithLogitsLoss()
    train_s, samples, final_auc = 0.0, 0, -1.0
    try:
        for epoch in range(1, args.epochs + 1):
            reader = shardps.CriteoReader(args.train_tsv, args.batch, rank=rank, world=world, rows=args.rows,
                                          seed=args.seed, epoch=epoch)
            it = batches(reader)
            t0, total, done = time.time(), 0.0, 0
            nxt = next(it, None)
            if ps is not None and nxt is not None:
                with ps.hold_requests():
                    model.prefetch(nxt[2])
            while nxt is not None:
                y, x, ids = nxt
                nxt = next(it, None)
                loss = loss_fn(model(x, ids), y)
                opt.zero_grad()
                loss.backward()
                if ps is None:
                    opt.step()
                else:  # the gradients out, the clock, the pulls and the next batch's rows: one message per server
                    opt.step(ahead=None if nxt is None else (lambda ids=nxt[2]: model.prefetch(ids)))
                total += loss.item()
                done += 1
            secs = time.time() - t0
            train_s += secs
            samples += done * args.batch
            line = (f"worker {rank} | wide&deep ({'one process' if ps is None else f'{world} workers'}) | epoch "
                    f"{epoch} | {done} steps | {secs:.1f} s | {done * args.batch / max(secs, 1e-9):.0f} samples/s | "
                    f"train loss {total / max(1, done):.4f}")
            if rank == 0:
                final_auc, ll = evaluate(model, args.test_tsv, args.rows)
                line += f" | test AUC {final_auc:.4f} | logloss {ll:.4f}"
                if args.json:
                    with open(args.json, "a") as f:
                        f.write(json.dumps({"epoch": epoch, "auc": final_auc, "logloss": ll, "workers": world,
                                            "samples_per_s": done * args.batch / max(secs, 1e-9)}) + "\n")
            print(line, flush=True)
        print(f"worker {rank} | finished | {samples / max(train_s, 1e-9):.0f} samples/s in training", flush=True)
    except shardps.Error as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    finally:
        if ps is not None:
            ps.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
