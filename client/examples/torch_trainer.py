#!/usr/bin/python3
"""Fashion-MNIST MLP (784-256-128-10) trained by N PyTorch processes through
shardps, one per worker rank:

    tools/shardps-launch --servers 2 --workers 2 --consistency sync -- \\
        /usr/bin/python3 client/examples/torch_trainer.py --coordinator {coordinator} --rank {rank}

Each worker trains on its shard of every epoch (the same shuffled split for
every worker), pushes each layer's gradient as backward produces it, and
the servers apply the optimizer (--optimizer sgd|momentum|adagrad|adam).
Worker 0 prints the test accuracy after every epoch. From the build tree
set PYTHONPATH=build/client/python:client/python (docs/python.md).
"""
import os

for _k in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_k, "1")

import argparse
import gzip
import struct
import sys
import time

import numpy as np
import torch

import shardps
import shardps.torch


def read_idx(path):
    with gzip.open(path, "rb") as f:
        raw = f.read()
    ndim = raw[3]
    dims = struct.unpack(">" + "I" * ndim, raw[4:4 + 4 * ndim])
    return np.frombuffer(raw, dtype=np.uint8, offset=4 + 4 * ndim).reshape(dims)


def load(data_dir, split, limit):
    prefix = "train" if split == "train" else "t10k"
    x = read_idx(os.path.join(data_dir, f"{prefix}-images-idx3-ubyte.gz")).reshape(-1, 784).astype(np.float32) / 255
    y = read_idx(os.path.join(data_dir, f"{prefix}-labels-idx1-ubyte.gz")).astype(np.int64)
    if limit:
        x, y = x[:limit], y[:limit]
    return torch.from_numpy(np.ascontiguousarray(x)), torch.from_numpy(y)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--coordinator", default=os.environ.get("SHARDPS_COORDINATOR"))
    ap.add_argument("--rank", type=int, default=int(os.environ.get("SHARDPS_RANK", "-1")))
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--batch", type=int, default=64, help="examples per step per worker")
    ap.add_argument("--optimizer", default="sgd", choices=["sgd", "momentum", "adagrad", "adam"])
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--hidden", default="256,128")
    ap.add_argument("--data-dir", default="/usr/share/datasets/fashion-mnist")
    ap.add_argument("--train-limit", type=int, default=0)
    ap.add_argument("--test-limit", type=int, default=0)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--prefetch", action="store_true", help="bounded/async: pull the next step during this one")
    ap.add_argument("--predict", type=float, default=0.0,
                    help="bounded/async: weight prediction's lookahead K (0: off; shardps-worker's default is 2)")
    ap.add_argument("--wire-dtype", default="f32", choices=["f32", "bf16", "f16"],
                    help="parameters and gradients on the wire in this type (docs/compression.md)")
    ap.add_argument("--compress", default="none", help="gradients compressed with error feedback: none, sign, topk:F")
    ap.add_argument("--min-accuracy", type=float, default=-1, help="exit 3 if the final accuracy is lower (0..1)")
    args = ap.parse_args()
    if not args.coordinator:
        ap.error("--coordinator (or SHARDPS_COORDINATOR) is required")
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    x, y = load(args.data_dir, "train", args.train_limit)
    tx, ty = load(args.data_dir, "test", args.test_limit)

    dims = [784] + [int(h) for h in args.hidden.split(",")] + [10]
    layers = []
    for i in range(len(dims) - 1):
        layers.append(torch.nn.Linear(dims[i], dims[i + 1]))
        if i + 2 < len(dims):
            layers.append(torch.nn.ReLU())
    model = torch.nn.Sequential(*layers)
    loss_fn = torch.nn.CrossEntropyLoss()

    with shardps.connect(args.coordinator, rank=None if args.rank < 0 else args.rank) as ps:
        rank, world = ps.rank, ps.num_workers
        sm = shardps.torch.ShardedModel(ps, model, optimizer=args.optimizer, lr=args.lr, seed=args.seed,
                                        wire_dtype=args.wire_dtype, compress=args.compress,
                                        prefix="torch.", prefetch=args.prefetch, predict=args.predict)
        print(f"worker {rank} | torch mlp {'-'.join(map(str, dims))} | {ps.consistency} consistency | "
              f"{args.optimizer} lr {args.lr}", flush=True)
        sm.pull()
        steps = len(x) // (args.batch * world)
        t0, samples, final_acc = time.time(), 0, -1.0
        for epoch in range(1, args.epochs + 1):
            g = torch.Generator().manual_seed(args.seed * 1000003 + epoch)  # the same split on every worker
            order = torch.randperm(len(x), generator=g)[rank::world]
            total_loss = 0.0
            for step in range(steps):
                if ps.stop_requested:
                    break
                idx = order[step * args.batch:(step + 1) * args.batch]
                loss = loss_fn(model(x[idx]), y[idx])
                with ps.hold_requests():  # the gradients backward pushes leave together: one message per server
                    loss.backward()
                sm.step()
                total_loss += loss.item()
                samples += len(idx)
            if ps.stop_requested:
                print(f"worker {rank} | stopped on request in epoch {epoch}", flush=True)
                break
            if rank == 0:
                with torch.no_grad(), sm.pulled():  # the values as pulled, not the predicted ones
                    final_acc = (model(tx).argmax(1) == ty).float().mean().item()
                print(f"worker {rank} | epoch {epoch} done | train loss {total_loss / max(1, steps):.4f} | "
                      f"test accuracy {100 * final_acc:.2f}% | {time.time() - t0:.1f} s", flush=True)
        secs = time.time() - t0
        print(f"worker {rank} | finished in {secs:.1f} s | {samples / secs:.0f} samples/s", flush=True)
    if rank == 0 and args.min_accuracy >= 0 and final_acc < args.min_accuracy:
        print(f"error: test accuracy {final_acc:.4f} is below --min-accuracy {args.min_accuracy}", file=sys.stderr)
        return 3
    return 0


if __name__ == "__main__":
    sys.exit(main())
