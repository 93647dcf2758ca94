#!/usr/bin/python3
"""A DLRM (Naumov et al. 2019) click model trained by N PyTorch processes
through shardps, one per worker rank, on a click log in the Criteo TSV format
(tools/make-clicks writes one):

    tools/make-clicks /tmp/clicks --examples 50000 --test-examples 10000
    tools/shardps-launch --servers 2 --workers 2 -- \\
        /usr/bin/python3 client/examples/torch_dlrm.py --coordinator {coordinator} --rank {rank} \\
        --train-tsv /tmp/clicks/train.tsv --test-tsv /tmp/clicks/test.tsv

The model is ../shared/bench/torch_dlrm.py's: 26 embeddings of --dim (uniform
in [-0.05, 0.05]); bottom MLP 13-64-DIM; the pairwise dot products of the 27
vectors (351; shardps.torch.pairwise_dot) with the dense vector into the top MLP 367-128-64-1; BCE loss;
Adagrad (--lr 0.05) everywhere, batch --batch (128) per worker. Each category
is hashed into its feature's --rows rows as there, (int(hex, 16) % (rows - 1))
+ 1, row 0 = missing (--rows 0: every value its own row), and all 26 features
live in ONE sparse shardps table, each in its own key space: key =
(feature << 56) | row, as the C++ worker's CriteoKey (worker/data/criteo.h). The
embeddings are a shardps.torch.Embedding (rows pulled per batch, gradients
pushed in backward), the MLPs a shardps.torch.ShardedModel; the servers run
Adagrad for both.

The training log is streamed by shardps.CriteoReader (shardps-worker's C++
parser on a thread of its own, a few batches ahead, the GIL released while
it waits), --chunk-batches x workers batches at a time: each chunk is
shuffled (the same permutation on every worker) and dealt out batch by
batch (batch k to worker k % workers), so each worker parses only its own
lines and every worker takes the same number of steps (what sync needs).
With --work-pool the batches come from the job's work pool instead
(shardps.CriteoPoolReader, as shardps-worker takes them: a dead worker's
batches go to the others). Each batch (and its rows) is taken in the step
before it (the pipelined step,
docs/python.md). Worker 0 evaluates on the test log after every epoch and prints
"test AUC 0.xxxx | logloss 0.xxxx". From the build tree set
PYTHONPATH=build/client/python:client/python (docs/python.md).
"""
import os

for _k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_k, "1")

import argparse
import sys
import time

import numpy as np
import torch

import shardps
import shardps.torch

FEATURES = 26


def my_batches(path, rows, batch, rank, world, chunk_batches, seed, epoch):
    """This worker's batches of one epoch as (labels, dense, keys) tensors:
    shardps.CriteoReader, the C++ parser of shardps-worker on a thread of
    its own, a few batches ahead (its waits release the GIL). Each chunk of
    chunk_batches x workers batches is shuffled the same way on every
    worker and dealt out batch by batch, and every worker takes the same
    number of steps; each parses only its own lines."""
    reader = shardps.CriteoReader(path, batch, rank=rank, world=world, rows=rows, chunk_batches=chunk_batches,
                                  seed=seed, epoch=epoch)
    for y, x, keys in reader:
        yield torch.from_numpy(y), torch.from_numpy(x), torch.from_numpy(keys)


def pool_batches(ps, path, rows, batch, epoch):
    """This worker's batches of one epoch from the job's work pool
    (shardps.CriteoPoolReader: as shardps-worker takes them; a dead worker's
    batches are trained by the others; under sync one claimed per clock)."""
    for y, x, keys in shardps.CriteoPoolReader(ps, path, batch, rows=rows, epoch=epoch):
        yield torch.from_numpy(y), torch.from_numpy(x), torch.from_numpy(keys)


def test_chunks(path, rows, n=8192):
    """Every line of the test log, in file order, n at a time."""
    for y, x, keys in shardps.CriteoReader(path, n, rows=rows, shuffle=False, last_partial=True):
        yield torch.from_numpy(y), torch.from_numpy(x), torch.from_numpy(keys)


class DLRM(torch.nn.Module):
    def __init__(self, emb, dim):
        super().__init__()
        self.emb = emb  # shardps.torch.Embedding: (b, 26) keys -> (b, 26, dim)
        self.bottom = torch.nn.Sequential(torch.nn.Linear(13, 64), torch.nn.ReLU(), torch.nn.Linear(64, dim),
                                          torch.nn.ReLU())
        n = FEATURES + 1
        self.top = torch.nn.Sequential(torch.nn.Linear(n * (n - 1) // 2 + dim, 128), torch.nn.ReLU(),
                                       torch.nn.Linear(128, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))

    def forward(self, x, keys):
        d = self.bottom(x)
        v = torch.cat([d.unsqueeze(1), self.emb(keys)], dim=1)  # (b, 27, dim)
        # Every pair i < j of the 27 vectors, their dot product: what
        # torch.bmm(v, v.transpose(1, 2))[:, iu[0], iu[1]] gives, in
        # shardps-worker's kernel (a small matrix product per example and a
        # scatter in backward cost twice as much in torch 1.13).
        z = shardps.torch.pairwise_dot(v)
        return self.top(torch.cat([d, z], dim=1)).squeeze(1)


def auc(y, p):
    """The area under the ROC curve (rank statistic; as the baseline's)."""
    o = np.argsort(p, kind="mergesort")
    r = np.empty(len(p))
    r[o] = np.arange(1, len(p) + 1)
    pos = y == 1
    n1, n0 = pos.sum(), (~pos).sum()
    return float((r[pos].sum() - n1 * (n1 + 1) / 2) / (n1 * n0))


def evaluate(model, path, rows):
    ys, logits = [], []
    with torch.no_grad():  # pulls only: nothing is pushed, no row is made
        for y, x, keys in test_chunks(path, rows):
            ys.append(y)
            logits.append(model(x, keys))
    y, logit = torch.cat(ys), torch.cat(logits)
    ll = torch.nn.functional.binary_cross_entropy_with_logits(logit, y).item()
    return auc(y.numpy(), logit.numpy()), ll


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--coordinator", default=os.environ.get("SHARDPS_COORDINATOR"))
    ap.add_argument("--rank", type=int, default=int(os.environ.get("SHARDPS_RANK", "-1")))
    ap.add_argument("--train-tsv", required=True)
    ap.add_argument("--test-tsv", required=True)
    ap.add_argument("--rows", type=int, default=1 << 20,
                    help="rows per feature (hash size; row 0 = missing); 0: every value its own row")
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--batch", type=int, default=128, help="examples per step per worker")
    ap.add_argument("--lr", type=float, default=0.05, help="Adagrad's learning rate (embeddings and MLPs)")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dtype", default="f32", choices=["f32", "bf16", "f16"], help="the embedding table's values")
    ap.add_argument("--admit-after", type=int, default=0, help="an id gets a row at its k-th push (0: the first)")
    ap.add_argument("--chunk-batches", type=int, default=64, help="batches per worker read (and shuffled) at once")
    ap.add_argument("--work-pool", action="store_true",
                    help="take the batches from the job's work pool, as shardps-worker does (file order; a dead "
                         "worker's batches go to the others), instead of a shuffled share of the log")
    ap.add_argument("--prefix", default="dlrm.", help="the tables' name prefix")
    ap.add_argument("--min-auc", type=float, default=-1, help="exit 3 if the final test AUC is lower")
    args = ap.parse_args()
    if not args.coordinator:
        ap.error("--coordinator (or SHARDPS_COORDINATOR) is required")
    if args.rows == 1 or args.rows < 0 or args.rows > 1 << 56:
        ap.error("--rows must be 0 or in [2, 2^56]")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    try:
        n_train = shardps.CriteoReader(args.train_tsv, args.batch, steps=0).lines
    except shardps.Error as e:
        raise SystemExit(f"error: {e}")

    with shardps.connect(args.coordinator, rank=None if args.rank < 0 else args.rank) as ps:
        rank, world = ps.rank, ps.num_workers
        # torch.optim.Adagrad's eps (1e-10) and initial accumulator (0), on the servers.
        emb = shardps.torch.Embedding(None, args.dim, name=args.prefix + "emb", client=ps, init="uniform",
                                      low=-0.05, high=0.05, seed=args.seed, optimizer="adagrad", lr=args.lr, eps=1e-10,
                                      dtype=args.dtype, admit_after=args.admit_after)
        model = DLRM(emb, args.dim)
        # The MLPs start as torch's own layers would (the baseline's init).
        sm = shardps.torch.ShardedModel(ps, model, optimizer="adagrad", lr=args.lr, eps=1e-10, init="torch",
                                        seed=args.seed, prefix=args.prefix)
        steps = n_train // (args.batch * world)
        dense = sum(p.numel() for p in model.parameters())
        print(f"worker {rank} | torch dlrm | {n_train} train examples, {steps} steps of {args.batch} per worker "
              f"and epoch | {dense} dense parameters, embeddings in one sparse table of dim {args.dim} "
              f"({args.dtype}) | {ps.consistency} consistency | adagrad lr {args.lr}", flush=True)
        if steps == 0:
            raise SystemExit(f"{args.train_tsv}: {n_train} examples are fewer than one batch per worker")
        sm.pull()
        loss_fn = torch.nn.BCEWithLogitsLoss()
        final_auc, train_s, samples = -1.0, 0.0, 0
        for epoch in range(1, args.epochs + 1):
            t0, total, done, seen = time.time(), 0.0, 0, 0
            batches = (pool_batches(ps, args.train_tsv, args.rows, args.batch, epoch) if args.work_pool else
                       my_batches(args.train_tsv, args.rows, args.batch, rank, world, args.chunk_batches, args.seed,
                                  epoch))
            # Pipelined: each batch is taken, and its rows requested, in the
            # step before it (behind the tick, with the MLPs' pulls: a work
            # pool's batch is claimed at its clock), so they travel while that
            # step waits; under sync they are what the forward's own pull
            # would read (docs/python.md, "The next batch ahead").
            upcoming = [None]

            def ahead():
                upcoming[0] = next(batches, None)
                if upcoming[0] is not None:
                    model.emb.prefetch(upcoming[0][2])
            ahead()
            while upcoming[0] is not None:
                if ps.stop_requested:
                    break
                y, x, keys = upcoming[0]
                loss = loss_fn(model(x, keys), y)
                with ps.hold_requests():  # the gradients backward pushes leave together: one message per server
                    loss.backward()
                # They arrive, the clock ends, the MLPs' next parameters and
                # the next batch (and its rows) are fetched.
                sm.step(ahead=ahead, ahead_in_hold=not args.work_pool)  # (a claim waits: not in the hold)
                total += loss.item()
                done += 1
                seen += len(y)
            secs = time.time() - t0
            train_s += secs
            samples += seen
            if ps.stop_requested:
                print(f"worker {rank} | stopped on request in epoch {epoch}", flush=True)
                break
            line = (f"worker {rank} | epoch {epoch} | {secs:.1f} s | {seen / max(secs, 1e-9):.0f} "
                    f"samples/s | train loss {total / max(1, done):.4f}")
            if rank == 0:
                t1 = time.time()
                final_auc, ll = evaluate(model, args.test_tsv, args.rows)
                line += f" | test AUC {final_auc:.4f} | logloss {ll:.4f} | evaluated in {time.time() - t1:.1f} s"
            print(line, flush=True)
        print(f"worker {rank} | finished | {samples} examples | {samples / max(train_s, 1e-9):.0f} samples/s in training",
              flush=True)
    if rank == 0 and args.min_auc >= 0 and final_auc < args.min_auc:
        print(f"error: test AUC {final_auc:.4f} is below --min-auc {args.min_auc}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
