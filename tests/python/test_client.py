"""The Python client against a real cluster: round trips, refused arrays,
errors as exceptions, the GIL released while a call blocks, arrays kept
alive by their requests."""
import gc
import json
import threading
import time
import weakref

import numpy as np
import pytest

import shardps


def test_dense_round_trip_rows_and_ids(cluster_factory):
    c = cluster_factory(servers=2, consistency="async")
    with shardps.connect(c.endpoint, rank=0) as ps:
        w = ps.create_table("w", rows=10, cols=4, init="constant", value=1.0, optimizer="sgd", lr=1.0)
        assert (w.rows, w.cols, w.dense) == (10, 4, True)
        np.testing.assert_array_equal(ps.pull(w), np.ones((10, 4), np.float32))
        ps.push(w, np.full((10, 4), 0.25, np.float32))
        out = np.zeros((10, 4), np.float32)
        assert ps.pull(w, out=out) is out  # filled in place
        np.testing.assert_array_equal(out, np.full((10, 4), 0.75, np.float32))
        ps.push(w, np.ones((3, 4), np.float32), rows=(2, 5))
        part = ps.pull("w", rows=(1, 6))
        np.testing.assert_array_equal(part[:, 0], [0.75, -0.25, -0.25, -0.25, 0.75])
        ids = np.array([9, 0], np.uint64)
        ps.push(w, np.full((2, 4), 0.5, np.float32), ids=ids)
        np.testing.assert_array_equal(ps.pull(w, ids=ids), np.full((2, 4), 0.25, np.float32))
        flat = np.empty(40, np.float32)  # a flat array of the right size is fine too
        ps.pull(w, out=flat)
        assert flat[0] == 0.25


def test_wire_dtype_and_compression_of_a_dense_table(cluster_factory):
    c = cluster_factory(servers=2, consistency="async")
    with shardps.connect(c.endpoint, rank=0) as ps:
        w = ps.create_table("w16", rows=100, cols=4, init="constant", value=1.0, optimizer="sgd", lr=1.0,
                            wire_dtype="bf16")
        assert w.wire_dtype == "bf16" and w.compress == "none"
        g = np.full((100, 4), 1.0 / 3.0, np.float32)
        ps.push(w, g)
        # bf16(1/3) = 0.333984375: the server applied the rounded gradient in float32 ...
        exact = ps.table("w16")
        assert exact.wire_dtype == "bf16"  # the table's default
        exact.wire_dtype = "f32"
        np.testing.assert_array_equal(ps.pull(exact), np.full((100, 4), 0.666015625, np.float32))
        # ... which a bf16 pull reads rounded (a tie: to the even 0.6640625).
        np.testing.assert_array_equal(ps.pull(w), np.full((100, 4), 0.6640625, np.float32))
        # Top-k with error feedback: 1 of each server's 200 values now, the rest later.
        w.compress = "topk:0.005"
        assert w.compress.startswith("topk:0.005")
        exact.compress = "topk:0.005"
        before = ps.pull(exact)
        h = np.zeros((100, 4), np.float32)
        h[3, 1], h[70, 2], h[71, 0] = 5.0, -2.0, 1.0
        ps.push(exact, h)
        moved = before - ps.pull(exact)
        assert np.count_nonzero(moved) == 2 and moved[3, 1] == 5.0 and moved[70, 2] == -2.0
        ps.push(exact, np.zeros((100, 4), np.float32))  # the residual: h[71, 0]
        assert (before - ps.pull(exact))[71, 0] == 1.0
        with pytest.raises(ValueError):
            w.wire_dtype = "f64"
        with pytest.raises(shardps.InvalidArgumentError):
            w.compress = "topk:2"
        with pytest.raises(ValueError):
            ps.create_table("bad", rows=1, cols=1, compress="zip")
        e = ps.create_table("e16", kind="sparse", cols=2)
        with pytest.raises(shardps.InvalidArgumentError):
            e.wire_dtype = "bf16"


def test_sparse_round_trip(cluster_factory):
    c = cluster_factory(servers=3, consistency="async")
    with shardps.connect(c.endpoint) as ps:
        e = ps.create_table("emb", kind="sparse", cols=3, optimizer="sgd", lr=0.5)
        ids = np.array([5, 1 << 40, 77], np.uint64)
        np.testing.assert_array_equal(ps.pull(e, ids=ids), np.zeros((3, 3), np.float32))
        g = np.arange(9, dtype=np.float32).reshape(3, 3)
        ps.push_async(e, g, ids=ids).wait(30)
        np.testing.assert_allclose(ps.pull(e, ids=ids), -0.5 * g)


def test_staleness_rule_weighs_a_stale_push(cluster_factory):
    c = cluster_factory(servers=1, consistency="async")
    with shardps.connect(c.endpoint) as ps:
        with pytest.raises(ValueError, match="staleness_rule must be one of default, none, scale-lr, dc"):
            ps.create_table("bad", rows=1, staleness_rule="sometimes")
        w = ps.create_table("w", rows=1, cols=1, optimizer="sgd", lr=1.0, staleness_rule="scale-lr")
        ps.pull(w)  # the push below is based on this pull: version 0
        g = np.ones((1, 1), np.float32)
        for _ in range(2):
            ps.push(w, g)  # staleness 0, then 1: full steps
        r = ps.push_async(w, g)  # 2 updates stale: half a step
        r.wait()
        assert r.staleness == 2
        np.testing.assert_allclose(ps.pull(w), [[-2.5]])


def test_two_pulls_say_how_many_updates_lay_between_them(cluster_factory):
    c = cluster_factory(servers=2, consistency="async")
    with shardps.connect(c.endpoint) as ps:
        w = ps.create_table("w", rows=4, cols=2, optimizer="sgd", lr=1.0)
        first = ps.pull_async(w)
        first.wait()
        for _ in range(3):
            ps.push(w, np.ones((4, 2), np.float32))
        second = ps.pull_async(w)
        second.wait()
        assert second.updates_since(first) == 3
        assert first.updates_since(second) == -1  # the other way round
        v = ps.create_table("v", rows=4, cols=2)
        other = ps.pull_async(v)
        other.wait()
        assert second.updates_since(other) == -1  # another table


def test_arrays_are_refused_with_a_reason(cluster_factory):
    c = cluster_factory(servers=1, consistency="async")
    with shardps.connect(c.endpoint) as ps:
        w = ps.create_table("w", rows=4, cols=6)
        with pytest.raises(TypeError, match="float32 array, got dtype float64"):
            ps.push(w, np.zeros((4, 6)))
        with pytest.raises(ValueError, match="C-contiguous"):
            ps.push(w, np.zeros((4, 12), np.float32)[:, ::2])
        with pytest.raises(ValueError, match=r"has shape \(4, 5\), expected \(4, 6\) or \(24,\)"):
            ps.pull(w, out=np.zeros((4, 5), np.float32))
        ro = np.zeros((4, 6), np.float32)
        ro.setflags(write=False)
        with pytest.raises(ValueError, match="read-only"):
            ps.pull(w, out=ro)
        with pytest.raises(TypeError, match="uint64"):
            ps.pull(w, ids=np.array([1.0, 2.0]))
        e = ps.create_table("e", cols=2, kind="sparse")
        with pytest.raises(IndexError, match=r"id -1 at position 1 is negative \(ids are uint64, or int64 >= 0\)"):
            ps.pull(e, ids=np.array([3, -1]))
        with pytest.raises(IndexError, match="is negative"):
            ps.push(e, np.zeros((1, 2), np.float32), ids=np.array([-5]))
        assert ps.pull(e, ids=np.array([3, 1 << 62])).shape == (2, 2)  # int64 >= 0 is fine
        with pytest.raises(ValueError, match="non-empty range"):
            ps.pull(w, rows=(3, 9))
        with pytest.raises(ValueError, match="optimizer must be one of"):
            ps.create_table("x", rows=1, optimizer="rmsprop")


def test_a_coordinator_host_that_does_not_resolve_is_named_at_once():
    # (.invalid never resolves, RFC 2606; the connect is refused before any wait)
    with pytest.raises(shardps.InvalidArgumentError,
                       match=r"coordinator 'tcp://no-such-host\.invalid:5555': host 'no-such-host\.invalid' "
                             r"does not resolve"):
        shardps.connect("tcp://no-such-host.invalid:5555", timeout=60)
    with pytest.raises(shardps.InvalidArgumentError, match=r"port '0' is not a number in 1\.\.65535"):
        shardps.connect("tcp://127.0.0.1:0")


def test_connect_finds_the_job_from_its_run_directory(cluster_factory, tmp_path):
    # What shardps-launch writes to RUN_DIR/job.json: the coordinator, and
    # the key directory with security on (docs/security.md).
    c = cluster_factory(servers=1, consistency="async")
    job = {"format": 1, "state": "running", "coordinator": c.endpoint,
           "security": {"on": False, "keys": None, "made_by_launcher": False}}
    (tmp_path / "job.json").write_text(json.dumps(job))
    with shardps.connect(run_dir=str(tmp_path / "job.json")) as ps:  # job.json itself, or its directory
        ps.create_table("w", rows=2, cols=3)
    with shardps.connect(run_dir=tmp_path, role="observer") as ps:
        assert (ps.table("w").rows, ps.table("w").cols) == (2, 3)
    # With security on, a worker takes the job's worker.key, an observer its observer.key.
    keys = {"on": True, "keys": "/run/job-keys", "made_by_launcher": True}
    (tmp_path / "job.json").write_text(json.dumps(dict(job, security=keys)))
    assert shardps._from_run_dir(tmp_path, "worker") == (c.endpoint, "/run/job-keys/worker.key", "running")
    assert shardps._from_run_dir(tmp_path, "observer") == (c.endpoint, "/run/job-keys/observer.key", "running")
    # Each wrong run directory says what is wrong with it.
    with pytest.raises(shardps.InvalidArgumentError, match=r"cannot read '.*nowhere/job\.json'.*shardps-launch"):
        shardps.connect(run_dir=tmp_path / "nowhere")
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(shardps.InvalidArgumentError, match=r"'.*bad\.json' is not a job\.json written by"):
        shardps.connect(run_dir=tmp_path / "bad.json")
    (tmp_path / "job.json").write_text(json.dumps(dict(job, coordinator=None, state="starting")))
    with pytest.raises(shardps.UnavailableError, match=r"names no coordinator yet \(the job is starting\)"):
        shardps.connect(run_dir=tmp_path)
    with pytest.raises(shardps.InvalidArgumentError, match=r"give the coordinator's endpoint"):
        shardps.connect()


def test_errors_become_exceptions_of_their_class(cluster_factory):
    c = cluster_factory(servers=1, consistency="async")
    with shardps.connect(c.endpoint) as ps:
        ps.create_table("w", rows=4, cols=2)
        with pytest.raises(shardps.NotFoundError, match="'nope'"):
            ps.table("nope")
        with pytest.raises(shardps.ConflictError, match="another shape"):
            ps.create_table("w", rows=5, cols=2)
        with pytest.raises(shardps.InvalidArgumentError) as e:  # the server's OutOfRange
            ps.pull("w", ids=np.array([7], np.uint64))
        assert isinstance(e.value, shardps.Error) and isinstance(e.value, ValueError)
        assert "7" in str(e.value)
    with pytest.raises(shardps.TimeoutError) as e:
        shardps.connect("tcp://127.0.0.1:9", timeout=0.5)
    assert isinstance(e.value, TimeoutError)  # also the built-in one


def test_gil_is_released_while_a_pull_waits(cluster_factory):
    # Sync, 2 workers: worker 0's pull after its clock waits for worker 1.
    c = cluster_factory(servers=1, workers=2, consistency="sync")
    ps0 = shardps.connect(c.endpoint, rank=0)
    ps1 = shardps.connect(c.endpoint, rank=1)
    w = ps0.create_table("w", rows=8, cols=8)
    ps1.create_table("w", rows=8, cols=8)
    ticks = [0]
    stop = threading.Event()

    def spin():
        while not stop.is_set():
            ticks[0] += 1
    t = threading.Thread(target=spin)
    t.start()
    try:
        ps0.clock()
        r = ps0.pull_async(w)
        before = ticks[0]
        with pytest.raises(shardps.TimeoutError):
            r.wait(timeout=1.0)  # blocked: worker 1 is still at clock 0
        assert ticks[0] > before + 1000, "the other Python thread did not run while wait() blocked"
        ps1.clock()
        assert r.wait(timeout=30).shape == (8, 8)
    finally:
        stop.set()
        t.join()
        ps0.close()
        ps1.close()


def test_clock_async_sends_the_tick_and_the_next_pull_behind_the_pushes(cluster_factory):
    # Sync, 2 workers: worker 0 ticks without waiting for its push and
    # pulls at once; the pull is answered with both workers' gradients.
    c = cluster_factory(servers=2, workers=2, consistency="sync")
    ps0 = shardps.connect(c.endpoint, rank=0)
    ps1 = shardps.connect(c.endpoint, rank=1)
    try:
        w = ps0.create_table("w", rows=4, cols=4, optimizer="sgd", lr=1.0, init="zeros")
        ps1.create_table("w", rows=4, cols=4, optimizer="sgd", lr=1.0, init="zeros")
        push = ps0.push_async(w, np.full((4, 4), 2.0, np.float32))
        tick = ps0.clock_async()
        assert ps0.clock_value == 1
        r = ps0.pull_async(w)
        with pytest.raises(shardps.TimeoutError):
            r.wait(timeout=0.5)  # held back: worker 1 is still at clock 0
        ps1.push(w, np.full((4, 4), 4.0, np.float32))
        ps1.clock()
        np.testing.assert_array_equal(r.wait(timeout=30), -3.0)  # the mean of both gradients
        push.wait(30)
        tick.wait(30)
    finally:
        ps0.close()
        ps1.close()


def test_requests_held_leave_together_at_the_end_of_the_block(cluster_factory):
    c = cluster_factory(servers=2, consistency="async")
    with shardps.connect(c.endpoint, rank=0) as ps:
        tables = [ps.create_table(f"h{i}", rows=50 + i, cols=3, init="constant", value=1.0, optimizer="sgd",
                                  lr=1.0) for i in range(4)]
        with ps.hold_requests() as held:
            assert held is ps
            pushes = [ps.push_async(t, np.full((t.rows, 3), 0.5, np.float32)) for t in tables]
            pull = ps.pull_async(tables[0])
            with pytest.raises(shardps.TimeoutError):
                pull.wait(timeout=0.3)  # held: it has not left
        for r in pushes:
            r.wait(30)
        np.testing.assert_array_equal(pull.wait(30), 0.5)  # behind the push, as issued
        with ps.hold_requests():
            pulls = [ps.pull_async(t) for t in tables]
        for r, t in zip(pulls, tables):
            np.testing.assert_array_equal(r.wait(30), np.full((t.rows, 3), 0.5, np.float32))


def test_a_dropped_array_stays_valid_until_its_request_completes(cluster_factory):
    c = cluster_factory(servers=2, consistency="async")
    with shardps.connect(c.endpoint) as ps:
        n = 1 << 20  # 4 MiB: several messages, in flight after push_async returns
        w = ps.create_table("w", rows=n // 64, cols=64, optimizer="sgd", lr=1.0)
        g = np.full(n, 2.0, np.float32)
        alive = weakref.ref(g)
        r = ps.push_async(w, g)
        del g
        gc.collect()
        junk = [np.full(n, np.nan, np.float32) for _ in range(4)]  # would reuse freed memory
        assert alive() is not None or r.done()
        r.wait(60)
        del junk, r
        np.testing.assert_array_equal(ps.pull(w).ravel()[:: 4096], -2.0)
        ps.pull(w)  # a later call forgets completed requests: nothing holds the array now
        gc.collect()
        assert alive() is None


def test_claim_work_barrier_and_properties(cluster_factory):
    c = cluster_factory(servers=1, workers=1, consistency="bounded", staleness=2)
    with shardps.connect(c.endpoint, rank=0) as ps:
        assert (ps.rank, ps.consistency, ps.staleness, ps.num_servers, ps.num_workers) == (0, "bounded", 2, 1, 1)
        got = []
        while True:
            b, e = ps.claim_work(7, 10, 4)
            if b == e:
                break
            got += range(b, e)
        assert got == list(range(10))
        ps.barrier(timeout=10)
        ps.clock()
        assert ps.clock_value == 1


def test_metrics_url_is_registered_and_shown_by_status(cluster_factory):
    """connect(metrics_url=...): a trainer serving its own /metrics (here
    prometheus_client's) is listed with that URL by the coordinator, which
    is where the launcher's prometheus-targets.json takes it from."""
    import json
    import os
    import subprocess
    import urllib.request

    from conftest import BUILD
    prometheus_client = pytest.importorskip("prometheus_client")
    c = cluster_factory(servers=1, workers=1)
    registry = prometheus_client.CollectorRegistry()
    samples = prometheus_client.Counter("my_trainer_samples", "Examples trained.", registry=registry)
    from wsgiref.simple_server import make_server
    server = make_server("127.0.0.1", 0, prometheus_client.make_wsgi_app(registry))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_port}/metrics"
        with shardps.connect(c.endpoint, rank=0, metrics_url=url):
            samples.inc(64)
            st = json.loads(subprocess.run([os.path.join(BUILD, "tools", "shardps-ctl"), "status", c.endpoint, "--json"],
                                           stdout=subprocess.PIPE, text=True, timeout=60, check=True).stdout)
            worker = [p for p in st["processes"] if p["role"] == "worker"][0]
            assert worker["metrics_url"] == url, st
            body = urllib.request.urlopen(worker["metrics_url"], timeout=10).read().decode()
            assert "my_trainer_samples_total 64.0" in body, body
    finally:
        server.shutdown()
        thread.join(10)
