"""shardps.CriteoReader: shardps-worker's Criteo parser for Python -- the
values as the C++ worker reads them, the batches each worker gets, its
errors, and its waits without the GIL."""
import os
import subprocess
import threading
import time

import numpy as np
import pytest

import shardps

HERE = os.path.dirname(os.path.abspath(__file__))
MAKE_CLICKS = os.path.join(HERE, "..", "..", "tools", "make-clicks")


@pytest.fixture(scope="module")
def log(tmp_path_factory):
    d = tmp_path_factory.mktemp("clicks")
    p = subprocess.run(["/usr/bin/python3", MAKE_CLICKS, str(d), "--examples", "1000", "--test-examples", "10",
                        "--seed", "5"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    assert p.returncode == 0, p.stdout
    return str(d / "train.tsv")


def parse(lines, rows):
    """The Criteo TSV written out in Python: what the reader must give."""
    y = np.array([int(l.split("\t")[0]) for l in lines], np.float32)
    x = np.array([[float(v) if v else 0.0 for v in l.rstrip("\n").split("\t")[1:14]] for l in lines], np.float32)
    x = np.log1p(np.maximum(x, 0)).astype(np.float32)
    fold = rows - 1 if rows > 1 else (1 << 56) - 1
    k = np.array([[(f << 56) | ((int(v, 16) % fold) + 1 if v else 0)
                   for f, v in enumerate(l.rstrip("\n").split("\t")[14:40])] for l in lines], np.int64)
    return y, x, k


@pytest.mark.parametrize("rows", [1 << 20, 0])
def test_values_are_the_c_plus_plus_workers(log, rows):
    lines = open(log).readlines()
    r = shardps.CriteoReader(log, 300, rows=rows, shuffle=False, last_partial=True)
    assert (r.lines, r.steps, len(r)) == (1000, 4, 4)  # 3 x 300 and the last 100
    got = [b for b in r]
    assert [len(b[0]) for b in got] == [300, 300, 300, 100]
    y, x, k = (np.concatenate([b[i] for b in got]) for i in range(3))
    wy, wx, wk = parse(lines, rows)
    assert y.dtype == np.float32 and x.shape == (1000, 13) and k.dtype == np.int64 and k.shape == (1000, 26)
    np.testing.assert_array_equal(y, wy)
    np.testing.assert_allclose(x, wx, rtol=1e-6, atol=1e-6)
    np.testing.assert_array_equal(k, wk)


def test_workers_share_the_epoch_and_each_takes_the_same_steps(log):
    # 1000 lines, batches of 30 for 3 workers: 11 steps each (990 lines);
    # chunks of 2 x 3 batches, each shuffled the same way on every worker.
    per = []
    for rank in range(3):
        r = shardps.CriteoReader(log, 30, rank=rank, world=3, chunk_batches=2, seed=4, epoch=1, rows=0)
        assert r.steps == 11
        per.append([b for b in r])
        assert len(per[-1]) == 11 and all(len(b[0]) == 30 for b in per[-1])
    keys = [tuple(k) for p in per for b in p for k in b[2]]
    every = [tuple(k) for k in parse(open(log).readlines(), 0)[2]]
    # 990 lines, none twice: the first five chunks' 900 whole, then 90 of
    # the last chunk's 100 (shuffled: whichever lines land in its 3 batches).
    assert len(keys) == len(set(keys)) == 990
    assert set(every[:900]) <= set(keys) and set(keys) <= set(every)
    # Shuffled within a chunk, the same under the same seed and epoch; another epoch, another order.
    again = [b[2] for b in shardps.CriteoReader(log, 30, rank=1, world=3, chunk_batches=2, seed=4, epoch=1, rows=0)]
    other = [b[2] for b in shardps.CriteoReader(log, 30, rank=1, world=3, chunk_batches=2, seed=4, epoch=2, rows=0)]
    assert all(np.array_equal(a, b[2]) for a, b in zip(again, per[1]))
    assert not all(np.array_equal(a, b) for a, b in zip(again, other))
    assert [tuple(k) for k in per[0][0][2]] != every[:30]
    # steps= caps this worker's batches.
    assert len(list(shardps.CriteoReader(log, 30, rank=0, world=3, steps=4))) == 4


def test_errors_name_the_file_the_line_and_the_field(log, tmp_path):
    with pytest.raises(shardps.InvalidArgumentError, match=r"cannot read '.*nowhere\.tsv': No such file"):
        shardps.CriteoReader(str(tmp_path / "nowhere.tsv"), 32)
    lines = open(log).readlines()[:50]
    fields = lines[6].split("\t")
    fields[15] = "xyz"  # C2
    lines[6] = "\t".join(fields)
    bad = tmp_path / "bad.tsv"
    bad.write_text("".join(lines))
    r = shardps.CriteoReader(str(bad), 10, shuffle=False)
    with pytest.raises(shardps.InvalidArgumentError, match=r"bad\.tsv:7: field 16 \(C2\): 'xyz' is not hexadecimal"):
        for _ in r:
            pass
    with pytest.raises(shardps.InvalidArgumentError, match="rank 2 is not below world 2"):
        shardps.CriteoReader(log, 10, rank=2, world=2)
    with pytest.raises(shardps.InvalidArgumentError, match="batch must be at least 1"):
        shardps.CriteoReader(log, 0)


def test_a_waiting_reader_lets_other_python_threads_run(tmp_path, log):
    # The reader waits on a pipe that fills only later: while next() waits
    # (in another thread), this thread must go on running Python.
    fifo = str(tmp_path / "fifo")
    os.mkfifo(fifo)
    text = "".join(open(log).readlines()[:20])
    reader = {}
    opened = threading.Thread(target=lambda: reader.setdefault("r", shardps.CriteoReader(fifo, 10, shuffle=False,
                                                                                           steps=2)))
    opened.start()  # counting the lines reads the pipe to its end
    with open(fifo, "w") as f:
        f.write(text)
    opened.join(30)
    assert "r" in reader
    # (The reader's thread opens the pipe again to read the batches.)
    got = []
    t = threading.Thread(target=lambda: got.extend(reader["r"]))
    t.start()
    spins, end = 0, time.monotonic() + 0.3
    while time.monotonic() < end:
        spins += 1  # Python running while next() waits
    assert spins > 1000 and t.is_alive()
    with open(fifo, "w") as f:
        f.write(text)
    t.join(30)
    assert len(got) == 2 and len(got[0][0]) == 10


def train_from_pool(endpoint, rank, log, batch, got, errors, epoch=1, joined=None):
    """One worker: every batch of the pool reader (its keys recorded), as a
    step does: a pull of the batch's rows (under sync it waits for the
    others' clocks), then a clock. `joined`: a barrier passed once
    connected (the workers all in the job before the first claim)."""
    try:
        with shardps.connect(endpoint, rank=rank) as ps:
            if joined is not None:
                joined.wait(60)
            e = ps.create_table("e", kind="sparse", cols=2)
            r = shardps.CriteoPoolReader(ps, log, batch, rows=0, epoch=epoch)
            assert r.lines == 1000
            for y, x, k in r:
                got[rank].append(k)
                ps.pull(e, ids=np.unique(k[:, 0]))
                ps.clock()
    except Exception as e:  # noqa: BLE001 (reported by the test)
        errors.append(f"worker {rank}: {e!r}")


@pytest.mark.parametrize("consistency,batch", [("sync", 64), ("sync", 400), ("bounded", 64)])
def test_the_pool_reader_trains_every_line_once_between_the_workers(cluster_factory, log, consistency, batch):
    """Two workers, each its batches from the job's pool: every line once.
    Under sync with batches of 400 (1000 lines: 400 + 400 at clock 0, 200 +
    none at clock 1) worker 1 ticks an empty clock itself. (Both join
    before either claims: a worker that joins a running job starts at its
    clock, and takes what its rank's slot holds there.)"""
    c = cluster_factory(servers=1, workers=2, consistency=consistency)
    got, errors = {0: [], 1: []}, []
    joined = threading.Barrier(2)
    ts = [threading.Thread(target=train_from_pool, args=(c.endpoint, r, log, batch, got, errors),
                           kwargs={"joined": joined}) for r in (0, 1)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(120)
    assert not errors and not any(t.is_alive() for t in ts), errors
    keys = np.concatenate(got[0] + got[1])
    want = parse(open(log).readlines(), 0)[2]
    assert keys.shape == want.shape
    # Each line once: the rows of both workers are the file's, as multisets.
    np.testing.assert_array_equal(np.sort(keys.view([("", np.int64)] * 26), axis=0),
                                  np.sort(want.view([("", np.int64)] * 26), axis=0))
    if consistency == "sync":
        if batch == 400:
            assert [len(b) for b in got[0]] == [400, 200] and [len(b) for b in got[1]] == [400]
        else:
            assert abs(len(got[0]) - len(got[1])) <= 1


def test_the_pool_reader_refuses_a_second_batch_at_one_clock_and_observers(cluster_factory, log):
    c = cluster_factory(servers=1, workers=1, consistency="sync")
    with shardps.connect(c.endpoint, rank=0) as ps:
        r = iter(shardps.CriteoPoolReader(ps, log, 100, rows=0))
        first = next(r)
        with pytest.raises(shardps.InvalidArgumentError, match="claimed at its clock"):
            next(r)
        ps.clock()
        second = next(r)
        assert not np.array_equal(first[2], second[2])
        with pytest.raises(shardps.InvalidArgumentError, match="epoch must be at least 1"):
            shardps.CriteoPoolReader(ps, log, 100, epoch=0)
        with pytest.raises(shardps.InvalidArgumentError, match="cannot read|No such file"):
            shardps.CriteoPoolReader(ps, log + ".missing", 100)
    with shardps.connect(c.endpoint, role="observer") as obs:
        with pytest.raises(shardps.InvalidArgumentError, match="needs a worker's client"):
            shardps.CriteoPoolReader(obs, log, 100)
