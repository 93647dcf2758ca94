"""shardps-launch on this machine, end to end: output, exit status, and no
process left behind on any way out; shardps-ctl and /metrics on a running
job; job-file errors."""

import json
import os
import pathlib
import pty
import re
import select
import signal
import socket
import subprocess
import sys
import time
import urllib.request

import pytest

from launchlib import (BUILD, COORDINATOR, CTL, LAUNCH, ROOT, SERVER, WORKER, Launch, ctl, launcher_logic, make_keys,
                       not_under_tsan, pid_of, plain_only, read_json, small_mlp, wait_json, wait_none_left)


@pytest.fixture
def run_dir(tmp_path):
    return str(tmp_path / "run")


def test_success_prefixes_accuracy_and_nothing_left(run_dir):
    launch = Launch(["--servers", "2", "--workers", "2", "--", *small_mlp(epochs=2)], run_dir)
    rc = launch.wait(240)
    out = launch.output()
    assert rc == 0, out
    assert re.search(r"^\[worker 0 @localhost\] worker 0 \| epoch 2 done .* test accuracy \d+\.\d+%", out, re.M), out
    assert re.search(r"^\[worker 1 @localhost\] worker 1 \| finished 2 epochs", out, re.M), out
    assert "all 2 workers finished" in out
    # Coordinator and server output goes to their logs.
    assert "registered as server 1" in open(os.path.join(run_dir, "server1.log")).read()
    # A local job (every process on loopback) runs without security, as
    # ever, and says nothing of it.
    assert "security" not in out, out
    assert read_json(os.path.join(run_dir, "job.json"))["security"] == {"on": False, "keys": None,
                                                                         "made_by_launcher": False}
    wait_none_left(run_dir)


def test_sigterm_to_the_launcher_stops_everything(run_dir):
    launch = Launch(["--servers", "2", "--workers", "2", "--", *small_mlp(epochs=500)], run_dir)
    launch.wait_for_line(r"\[worker 1 @localhost\] worker 1 \| epoch \d+ step", 120)
    launch.signal(signal.SIGTERM)
    rc = launch.wait(30)
    assert rc == 128 + signal.SIGTERM, launch.output()
    assert "SIGTERM: the job was stopped" in launch.output()
    wait_none_left(run_dir)


@launcher_logic
def test_sigint_to_the_launcher_stops_everything(run_dir):
    launch = Launch(["--servers", "1", "--workers", "2", "--", *small_mlp(epochs=500)], run_dir)
    launch.wait_for_line(r"worker 0 \| epoch \d+ step", 120)
    launch.signal(signal.SIGINT)
    assert launch.wait(30) == 128 + signal.SIGINT, launch.output()
    wait_none_left(run_dir)


def full_mlp(epochs, extra=()):
    """The MLP on the whole Fashion-MNIST training set (60000 examples)."""
    return [WORKER, "--coordinator", "{coordinator}", "--rank", "{rank}", "--model", "mlp", "--hidden", "32",
            "--epochs", str(epochs), "--test-limit", "2000", "--progress-sec", "0.1", *extra]


HEARTBEAT_MS = 2000


def wait_for_lines(launch, pattern, count, since, timeout):
    """Waits until `count` output lines from line `since` on match `pattern`
    (each a line of its own); fails after `timeout` s saying what it waited for."""
    end = time.monotonic() + timeout
    while len(launch.lines_since(since, pattern)) < count:
        assert time.monotonic() < end and launch.p.poll() is None, (
            f"no {count} lines matching {pattern!r} within {timeout} s; output:\n{launch.output()}")
        time.sleep(0.1)


@not_under_tsan  # (its threads under TSan: fault_test's ADeadWorkersBatchGoesToTheNextClaimer...; CI's 70 minutes)
def test_killed_worker_under_sync_its_batches_go_to_the_others(run_dir):
    """kill -9 of a worker while the others wait for it at every clock: they
    go on within the heartbeat deadline plus a second, every epoch still
    trains all 60000 examples, and the job exits 0 saying what happened."""
    launch = Launch(["--servers", "2", "--workers", "3", "--set", f"job.heartbeat_timeout_ms={HEARTBEAT_MS}", "--",
                     *full_mlp(3)], run_dir)
    launch.wait_for_line(r"worker 2 \| epoch 1 step", 120)
    pid = pid_of(run_dir, "shardps-worker", "--rank", "2")
    assert pid, launch.output()
    os.kill(pid, signal.SIGKILL)
    killed_at, since = time.monotonic(), len(launch.lines)
    rc = launch.wait(240)
    out = launch.output()
    assert rc == 0, out
    assert re.search(r"worker 2 on localhost killed by signal SIGKILL at [\d.]+ s: the job goes on", out), out
    assert "2 of 3 workers finished, the job completed" in out, out
    assert re.search(r"on the way: worker 2 on localhost killed by signal SIGKILL .*: its work went to the other "
                     r"workers", out), out
    for epoch in (1, 2, 3):
        assert re.search(rf"worker 0 \| epoch {epoch} done \| 60000 of 60000 examples \|", out), out
    # The others were held at most the heartbeat deadline plus a second.
    steps = [t for t, _ in launch.lines_since(since, r"\[worker 0 @localhost\] worker 0 \| epoch \d+ step")]
    assert steps, out
    held = max(b - a for a, b in zip([killed_at] + steps, steps))
    print(f"worker 0 held {held:.2f} s after the kill (heartbeat deadline {HEARTBEAT_MS / 1000} s)")
    assert held < HEARTBEAT_MS / 1000 + 1.0, out
    coord = open(os.path.join(run_dir, "coordinator.log")).read()
    assert "worker 2 silent for more than" in coord, coord
    wait_none_left(run_dir)


def test_restarted_worker_rejoins_and_trains(run_dir):
    """A killed worker is started again and rejoins the running job (which
    runs until it is stopped: however fast the machine, the new worker is
    never too late for it)."""
    launch = Launch(["--servers", "2", "--workers", "2", "--restart-workers", "--set",
                     f"job.heartbeat_timeout_ms={HEARTBEAT_MS}", "--", *full_mlp(100000, ["--train-limit", "20000"])],
                    run_dir)
    launch.wait_for_line(r"worker 1 \| epoch 1 step", 120)
    # The run directory is the job's interface: its pids are the processes'
    # own (worker 1 is killed through job.json's), a script that reads only
    # job.json finds the coordinator, and Prometheus' targets file lists the
    # coordinator's and both servers' /metrics, each answering (and the
    # workers', which come and go with them: test_prometheus follows those).
    job_json, targets_json = os.path.join(run_dir, "job.json"), os.path.join(run_dir, "prometheus-targets.json")
    job = wait_json(job_json, lambda j: j["state"] == "running" and all(
        p["pid"] for p in j["processes"]), 60, "running job with every process's pid")
    w1 = [p for p in job["processes"] if p["role"] == "worker" and p["rank"] == 1][0]
    assert w1["pid"] == pid_of(run_dir, "shardps-worker", "--rank", "1"), job
    assert os.path.exists(w1["log"]), w1
    os.kill(w1["pid"], signal.SIGKILL)
    rc, out = ctl("status", job["coordinator"])
    assert rc == 0 and re.search(r"^server +1 ", out, re.M), out
    def fixed(t):  # the coordinator's and the servers' targets
        return sorted((g["labels"]["role"], g["labels"]["rank"]) for g in t if g["labels"]["role"] != "worker")
    targets = wait_json(targets_json, lambda t: fixed(t) == [("coordinator", "0"), ("server", "0"), ("server", "1")],
                        60, "the coordinator's and 2 servers' targets")
    assert all(t["labels"]["job"] == "run" and t["labels"]["host"] == "localhost" for t in targets), targets
    for t in (g for g in targets if g["labels"]["role"] != "worker"):
        body = urllib.request.urlopen(f"http://{t['targets'][0]}/metrics", timeout=10).read().decode()
        assert "shardps_" in body, t
    job = wait_json(job_json, lambda j: any(p["role"] == "worker" and p["rank"] == 1 and p["incarnation"] == 1
                                            for p in j["processes"]), 60, "restarted worker 1")
    assert job["restarts"] == 1 and "worker 1 on localhost killed by signal SIGKILL" in job["events"][0]["what"], job
    # The new worker 1 trains, an epoch ends with it in the job, then the job is stopped.
    restarted_log = os.path.join(run_dir, "worker1.restart1.log")
    end = time.monotonic() + 120
    while not (os.path.exists(restarted_log) and re.search(r"worker 1 \| epoch \d+ step", open(restarted_log).read())):
        assert time.monotonic() < end, f"the restarted worker 1 trained no step; output:\n{launch.output()}"
        time.sleep(0.1)
    wait_for_lines(launch, r"worker 0 \| epoch \d+ done", 2, len(launch.lines), 240)
    rc, out = ctl("stop", job["coordinator"])
    assert rc == 0, out
    rc = launch.wait(240)
    out = launch.output()
    assert rc == 0, out
    job = read_json(job_json)
    assert job["state"] == "stopped" and job["final"]["exit_status"] == 0, job
    assert read_json(targets_json) == []  # nothing is up any more
    assert re.search(r"worker 1 on localhost killed by signal SIGKILL at [\d.]+ s: starting it again \(restart 1 of "
                     r"at most 3\)", out), out
    restarted = open(restarted_log).read()
    m = re.search(r"worker 1 \| finished \d+ epochs in [\d.]+ s \| (\d+) batches", restarted)
    assert m and int(m.group(1)) > 0, restarted
    done = re.findall(r"worker 0 \| epoch \d+ done \| (\d+) of (\d+) examples", out)
    assert len(done) >= 2 and all(a == b == "20000" for a, b in done), out
    coord = open(os.path.join(run_dir, "coordinator.log")).read()
    assert "worker 1 joined the running job" in coord, coord
    wait_none_left(run_dir)


def test_a_new_rank_joins_a_running_job(run_dir, tmp_path):
    """[job] max_workers: a worker started by hand while the job runs takes
    the next rank and trains; every epoch still trains each example once.
    The job runs until it is stopped, so the new worker is never too late
    for it however fast the machine is."""
    launch = Launch(["--servers", "1", "--workers", "2", "--set", "job.max_workers=3", "--",
                     *full_mlp(100000, ["--train-limit", "20000"])], run_dir)
    coordinator = launch.coordinator()
    launch.wait_for_line(r"worker 1 \| epoch 1 step", 120)
    log = tmp_path / "extra.log"
    with open(log, "w") as out_file:
        extra = subprocess.Popen([WORKER, "--coordinator", coordinator, "--model", "mlp", "--hidden", "32",
                                  "--epochs", "100000", "--train-limit", "20000", "--test-limit", "100",
                                  "--progress-sec", "0.1"], stdout=out_file, stderr=subprocess.STDOUT, text=True)
    try:
        end = time.monotonic() + 120
        while not re.search(r"worker 2 \| epoch \d+ step", log.read_text()):
            assert extra.poll() is None and time.monotonic() < end, f"worker 2 trained no step: {log.read_text()}"
            time.sleep(0.1)
        # An epoch that worker 2 trained in from its start ends, then the job is stopped.
        wait_for_lines(launch, r"worker 0 \| epoch \d+ done", 2, len(launch.lines), 240)
        rc, out = ctl("stop", coordinator)
        assert rc == 0, out
        assert extra.wait(120) == 0, log.read_text()
    finally:
        if extra.poll() is None:
            extra.kill()
            extra.wait()
    m = re.search(r"worker 2 \| finished \d+ epochs in [\d.]+ s \| (\d+) batches", log.read_text())
    assert m and int(m.group(1)) > 0, log.read_text()
    rc = launch.wait(240)
    out = launch.output()
    assert rc == 0, out
    done = re.findall(r"worker 0 \| epoch \d+ done \| (\d+) of (\d+) examples", out)
    assert len(done) >= 2 and all(a == b == "20000" for a, b in done), out
    coord = open(os.path.join(run_dir, "coordinator.log")).read()
    assert "worker 2 joined the running job" in coord, coord
    wait_none_left(run_dir)


@launcher_logic
def test_a_worker_that_reports_an_error_fails_the_job(run_dir):
    """An exit status is the worker's own verdict (not a crash): the job stops."""
    launch = Launch(["--servers", "1", "--workers", "2", "--", "sh", "-c",
                     "if [ {rank} = 1 ]; then echo cannot read my data >&2; exit 1; fi; exec " +
                     " ".join(small_mlp(epochs=500))], run_dir)
    rc = launch.wait(120)
    out = launch.output()
    assert rc == 1, out
    assert "worker 1 on localhost exited with status 1: the job was stopped; its last lines:" in out, out
    assert "cannot read my data" in out, out
    wait_none_left(run_dir)


def test_killed_server_rolls_the_job_back_to_the_newest_snapshot(run_dir, tmp_path):
    """--restart-servers: kill -9 of a server mid-training; the job goes back
    to its newest complete snapshot (servers reload it, workers resume at
    its clock and data position), finishes with exit 0, and its final model
    equals, bit for bit, an uninterrupted run restored from that snapshot."""
    snaps = str(tmp_path / "snaps")
    worker = full_mlp(5, ["--train-limit", "6000", "--optimizer", "adam", "--lr", "0.001",
                          "--save-params", str(tmp_path / "a{rank}.bin")])
    launch = Launch(["-v", "--servers", "2", "--workers", "2", "--snapshot-dir", snaps, "--snapshot-every-clocks",
                     "20", "--set", "job.keep_snapshots=1000", "--restart-servers", "--", *worker], run_dir)
    launch.wait_for_line(r"snapshot \S+snap-0+40 complete", 120)
    pid = pid_of(run_dir, "shardps-server", "--rank", "1")
    assert pid, launch.output()
    os.kill(pid, signal.SIGKILL)
    rc = launch.wait(240)
    out = launch.output()
    assert rc == 0, out
    m = re.search(r"rolled back to (\S+) \(clock (\d+)\): starting every server and worker again", out)
    assert m, out
    snap, clock = m.group(1), int(m.group(2))
    assert clock >= 40, out
    assert re.search(r"server 1 on localhost killed by signal SIGKILL at [\d.]+ s: rolling the job back", out), out
    assert "all 2 workers finished" in out, out
    assert re.search(r"on the way: server 1 .*: rolled back to", out), out
    # The same snapshot, restored by a job that nothing interrupts.
    only = tmp_path / "only"
    only.mkdir()
    # (with the snapshots before it: it may hold only what changed since them)
    for d in sorted(pathlib.Path(snaps).glob("snap-*")):
        if int(d.name[5:]) <= clock:
            subprocess.run(["cp", "-r", str(d), str(only)], check=True)
    worker_b = [a.replace(str(tmp_path / "a{rank}.bin"), str(tmp_path / "b{rank}.bin")) for a in worker]
    again = Launch(["--servers", "2", "--workers", "2", "--snapshot-dir", str(only), "--restore", "--", *worker_b],
                   run_dir + "-b")
    assert again.wait(240) == 0, again.output()
    # (The evaluating worker saves the final parameters.)
    a, b = open(tmp_path / "a0.bin", "rb").read(), open(tmp_path / "b0.bin", "rb").read()
    assert len(a) > 0 and a == b, "the final models differ"
    wait_none_left(run_dir)


def saving_worker(tmp_path, epochs=4):
    """The command of an MLP worker on 6000 examples (Adam) that saves its
    final parameters to tmp_path/NAME{rank}.bin, by NAME."""
    def worker(name):
        return full_mlp(epochs, ["--train-limit", "6000", "--optimizer", "adam", "--lr", "0.001",
                                 "--save-params", str(tmp_path / (name + "{rank}.bin"))])
    return worker


@not_under_tsan  # (its threads under TSan: replica_test's SyncKillOfAServer; CI's 70 minutes)
def test_killed_server_with_replicas_fails_over_and_the_model_is_unchanged(run_dir, tmp_path):
    """[job] replicas = 2: kill -9 of a server mid-training, no restart flag;
    the launcher tells the coordinator (shardps-ctl declare-dead), the
    server's groups are served by their backups, no process is restarted,
    nothing rolls back, the job exits 0, and its final model equals, bit for
    bit, that of the same job without the kill."""
    worker = saving_worker(tmp_path, epochs=16)  # (about 3 s: it must outlast a fail-over, a step and a kill)
    launch = Launch(["--servers", "2", "--workers", "2", "--replicas", "2", "--restart-coordinator", "--",
                     *worker("a")], run_dir)
    launch.wait_for_line(r"worker 0 \| epoch 2 step", 120)
    os.kill(pid_of(run_dir, "shardps-server", "--rank", "1"), signal.SIGKILL)
    # Then the coordinator: started again, it resumes with the map of the
    # fail-over (its saved state), not the job's first one.
    launch.wait_for_line(r"the job goes on \(nothing restarted\)", 60)
    wait_for_lines(launch, r"worker 0 \| epoch \d+ step", 1, len(launch.lines), 60)
    os.kill(pid_of(run_dir, "shardps-coordinator"), signal.SIGKILL)
    rc = launch.wait(240)
    out = launch.output()
    assert rc == 0, out
    assert re.search(r"server 1 on localhost killed by signal SIGKILL at [\d.]+ s: server 1 is dead; its groups are "
                     r"served by their backups \(shard map v2\); the job goes on \(nothing restarted\)", out), out
    assert "all 2 workers finished" in out, out
    assert re.search(r"on the way: server 1 .*: failed over to the backups of its groups", out), out
    assert re.search(r"the coordinator on localhost killed by signal SIGKILL at [\d.]+ s: starting it again", out), out
    job = read_json(os.path.join(run_dir, "job.json"))
    assert job["rollbacks"] == 0 and job["state"] == "completed", job
    assert [p["role"] for p in job["processes"] if p["incarnation"] > 0] == ["coordinator"], job  # no server, no worker
    assert "shard map v2" in open(os.path.join(run_dir, "coordinator.restart1.log")).read()
    again = Launch(["--servers", "2", "--workers", "2", "--replicas", "2", "--", *worker("b")], run_dir + "-b")
    assert again.wait(240) == 0, again.output()
    a, b = open(tmp_path / "a0.bin", "rb").read(), open(tmp_path / "b0.bin", "rb").read()
    assert len(a) > 0 and a == b, "the final models differ"
    # A worker's end is said once by each server, however many groups it serves.
    for s in range(2):
        log = open(os.path.join(run_dir + "-b", f"server{s}.log")).read()
        for w in range(2):
            assert log.count(f"worker {w} is no longer live") <= 1, log
    wait_none_left(run_dir)


@not_under_tsan  # (its threads under TSan: replica_test's AReplacementFilled; CI's 70 minutes)
def test_replacement_server_is_filled_and_takes_over_after_the_other_dies(run_dir, tmp_path):
    """replicas = 2 and --restart-servers: a server killed is failed over and
    a replacement started under its rank, filled with copies of both groups
    while training runs; then the other server is killed and the replacement
    serves everything. No rollback, exit 0, and the final model equals, bit
    for bit, that of the same job without the kills."""
    # (16 epochs, about 3 s: 4 took 0.6 s and once ended before the second
    # kill; a replacement, its fills and a step after them take about 0.5 s.)
    worker = saving_worker(tmp_path, epochs=16)
    launch = Launch(["-v", "--servers", "2", "--workers", "2", "--replicas", "2", "--restart-servers", "--",
                     *worker("a")], run_dir)
    launch.wait_for_line(r"worker 0 \| epoch 2 step", 120)
    os.kill(pid_of(run_dir, "shardps-server", "--rank", "1"), signal.SIGKILL)
    launch.wait_for_line(r"starting a replacement", 60)
    wait_for_lines(launch, r"holds a full copy; its chain", 2, 0, 120)
    wait_for_lines(launch, r"worker 0 \| epoch \d+ step", 1, len(launch.lines), 60)
    os.kill(pid_of(run_dir, "shardps-server", "--rank", "0"), signal.SIGKILL)
    rc = launch.wait(240)
    out = launch.output()
    assert rc == 0, out
    assert re.search(r"server 1 on localhost killed by signal SIGKILL at [\d.]+ s: server 1 is dead; .*starting a "
                     r"replacement", out), out
    assert re.search(r"server 0 on localhost killed by signal SIGKILL at [\d.]+ s: server 0 is dead", out), out
    assert "all 2 workers finished" in out, out
    job = read_json(os.path.join(run_dir, "job.json"))
    assert job["rollbacks"] == 0 and job["state"] == "completed", job
    again = Launch(["--servers", "2", "--workers", "2", "--replicas", "2", "--", *worker("b")], run_dir + "-b")
    assert again.wait(240) == 0, again.output()
    a, b = open(tmp_path / "a0.bin", "rb").read(), open(tmp_path / "b0.bin", "rb").read()
    assert len(a) > 0 and a == b, "the final models differ"
    wait_none_left(run_dir)


@not_under_tsan  # (its threads under TSan: the rollback test above; the refusal is the coordinator's logic)
def test_both_copies_of_a_group_lost_fall_back_to_the_rollback_saying_why(run_dir, tmp_path):
    """replicas = 2, both servers killed at once: the first is failed over
    (to the second, dead too), the second cannot be (its groups would lose
    their last copy): the launcher says why and rolls the job back to its
    newest snapshot (--restart-servers); the job finishes."""
    snaps = str(tmp_path / "snaps")
    launch = Launch(["-v", "--servers", "2", "--workers", "2", "--replicas", "2", "--snapshot-dir", snaps,
                     "--snapshot-every-clocks", "20", "--restart-servers", "--",
                     *full_mlp(10, ["--train-limit", "6000"])], run_dir)
    launch.wait_for_line(r"snapshot \S+snap-0+40 complete", 120)
    pids = [pid_of(run_dir, "shardps-server", "--rank", str(r)) for r in (0, 1)]
    for pid in pids:
        os.kill(pid, signal.SIGKILL)
    rc = launch.wait(240)
    out = launch.output()
    assert rc == 0, out
    assert re.search(r"server \d on localhost killed by signal SIGKILL at [\d.]+ s: no fail-over: .*group \d lost every "
                     r"copy", out), out
    assert re.search(r"rolled back to \S+ \(clock \d+\): starting every server and worker again", out), out
    assert "all 2 workers finished" in out, out
    wait_none_left(run_dir)


def test_killed_server_without_snapshots_stops_the_job_saying_why(run_dir):
    launch = Launch(["--servers", "2", "--workers", "2", "--restart-servers", "--", *small_mlp(epochs=500)], run_dir)
    launch.wait_for_line(r"worker 0 \| epoch \d+ step", 120)
    os.kill(pid_of(run_dir, "shardps-server", "--rank", "1"), signal.SIGKILL)
    rc = launch.wait(60)
    out = launch.output()
    assert rc == 1, out
    assert ("the job cannot be rolled back: InvalidArgument: this job takes no snapshots (--snapshot-dir)" in out), out
    wait_none_left(run_dir)


def free_ports(n):
    """n free TCP ports on loopback (each bound, read, closed)."""
    ports = []
    for _ in range(n):
        with socket.socket() as sk:
            sk.bind(("127.0.0.1", 0))
            ports.append(sk.getsockname()[1])
    return ports


def start_etcd(tmp_path):
    """A one-member etcd on loopback (Debian's etcd-server): (process,
    "127.0.0.1:PORT"); skips the test, saying why, where it cannot start."""
    if not os.access("/usr/bin/etcd", os.X_OK):
        pytest.skip("no /usr/bin/etcd (Debian's etcd-server)")
    ports = free_ports(2)
    client, peer = f"127.0.0.1:{ports[0]}", f"http://127.0.0.1:{ports[1]}"
    log = open(tmp_path / "etcd.log", "w")
    proc = subprocess.Popen(["/usr/bin/etcd", "--name", "t", "--data-dir", str(tmp_path / "etcd"),
                             "--listen-client-urls", "http://" + client, "--advertise-client-urls", "http://" + client,
                             "--listen-peer-urls", peer, "--initial-advertise-peer-urls", peer,
                             "--initial-cluster", "t=" + peer, "--log-level", "warn"], stdout=log, stderr=log)
    deadline = time.time() + 15
    while True:
        try:
            urllib.request.urlopen("http://" + client + "/v3/kv/range", data=b'{"key": "cHJvYmU="}', timeout=1)
            return proc, client
        except OSError as e:
            if time.time() > deadline or proc.poll() is not None:
                proc.kill()
                proc.wait()
                pytest.skip(f"etcd did not start within 15 s: {e}")
            time.sleep(0.1)


@pytest.mark.parametrize("store", ["dir", pytest.param("etcd", marks=plain_only)])  # (etcd_state_test: the store)
def test_killed_coordinator_is_started_again_and_the_job_resumes(run_dir, tmp_path, store):
    """--restart-coordinator: kill -9 of the coordinator mid-training; a new
    one on the same endpoint resumes from the saved state (the servers are
    taken back, the workers' claims are sent again), and every epoch still
    trains every example once. The state in a directory (RocksDB), or in
    etcd ([job] state_dir = etcd://...): then the one started again holds
    nothing of its own, takes the lead once the dead one's lease lapses and
    loads the state from etcd."""
    etcd, sets = None, []
    if store == "etcd":
        etcd, endpoint = start_etcd(tmp_path)
        url = f"etcd://{endpoint}/jobs/a"
        sets = ["--set", f'job.state_dir="{url}"']
    try:
        launch = Launch(["--servers", "2", "--workers", "2", "--restart-coordinator", *sets, "--", *full_mlp(3)],
                        run_dir)
        launch.wait_for_line(r"worker 0 \| epoch 1 done", 120)
        pid = pid_of(run_dir, "shardps-coordinator")
        assert pid, launch.output()
        os.kill(pid, signal.SIGKILL)
        rc = launch.wait(240)
        out = launch.output()
        assert rc == 0, out
        assert re.search(r"the coordinator on localhost killed by signal SIGKILL at [\d.]+ s: starting it again on "
                         r"tcp://\S+ with its saved state", out), out
        assert "all 2 workers finished" in out, out
        for epoch in (1, 2, 3):
            assert re.search(rf"worker 0 \| epoch {epoch} done \| 60000 of 60000 examples \|", out), out
        again = open(os.path.join(run_dir, "coordinator.restart1.log")).read()
        assert "resuming the job saved in" in again, again
        assert re.search(r"server [01] at \S+ is back", again), again
        if etcd:
            first = open(os.path.join(run_dir, "coordinator.log")).read()
            assert re.search(rf"leading the job in {url} as \S+", first), first
            assert f"resuming the job saved in {url}" in again, again
            # job.json names the user's etcd too (not started by the launcher).
            job = json.load(open(os.path.join(run_dir, "job.json")))
            assert job["etcd"] == {"endpoints": [endpoint], "prefix": "jobs/a", "started_by_launcher": False}, job
        wait_none_left(run_dir)
    finally:
        if etcd:
            etcd.terminate()
            etcd.wait(10)


def wait_for_file_text(path, pattern, timeout, what):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if os.path.exists(path) and re.search(pattern, open(path).read()):
            return
        time.sleep(0.1)
    text = open(path).read() if os.path.exists(path) else "(no file)"
    raise AssertionError(f"waited {timeout} s for {what} ({pattern!r} in {path}): {text[-3000:]}")


# (kill -9 of the leader through the launcher, with etcd's members lost too:
# test_standbys.py)
@pytest.mark.parametrize("fault", [pytest.param("stop", marks=plain_only)])
def test_a_standby_coordinator_takes_over_from_a_killed_leader(tmp_path, fault):
    """Two coordinators of one job, its state in etcd: the leader, and a
    --standby that binds nothing until it leads; servers and workers are
    given both endpoints. kill -9 of the leader mid-training (or SIGSTOP
    past its lease, then SIGCONT): the standby takes the lead once the
    leader's lease lapses, resumes the job from etcd, and the job finishes
    (exit 0) with every epoch trained once; a stopped leader, continued,
    finds it no longer leads and exits without ending the job."""
    etcd, endpoint = start_etcd(tmp_path)
    procs = []

    def start(argv, name):
        log = open(tmp_path / (name + ".log"), "w")
        procs.append(subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, cwd=str(tmp_path)))
        return procs[-1]

    try:
        a, b = (f"tcp://127.0.0.1:{p}" for p in free_ports(2))
        coords = f"{a},{b}"
        common = [COORDINATOR, "--servers", "2", "--workers", "2", "--store", f"etcd://{endpoint}/jobs/s",
                  "--no-metrics", "--heartbeat-timeout-ms", "20000"]
        leader = start(common + ["--bind", a], "leader")
        wait_for_file_text(tmp_path / "leader.log", r"leading the job", 30, "the first coordinator to lead")
        start(common + ["--bind", b, "--standby"], "standby")
        wait_for_file_text(tmp_path / "standby.log", r"waiting for the coordinator that leads", 30,
                           "the standby to wait")
        for r in range(2):
            start([SERVER, "--coordinator", coords, "--rank", str(r), "--no-metrics"], f"server{r}")
        workers = [start([x.replace("{coordinator}", coords).replace("{rank}", str(r)) for x in full_mlp(2)],
                         f"worker{r}") for r in range(2)]
        wait_for_file_text(tmp_path / "worker0.log", r"epoch 1 done", 120, "worker 0's first epoch")
        t0 = time.monotonic()
        if fault == "kill":
            leader.kill()
        else:
            leader.send_signal(signal.SIGSTOP)
        wait_for_file_text(tmp_path / "standby.log", r"leading the job", 30, "the standby to lead")
        took = time.monotonic() - t0
        if fault == "stop":
            leader.send_signal(signal.SIGCONT)
            assert leader.wait(30) == 1
            old = open(tmp_path / "leader.log").read()
            # (it finds out renewing its lease, or when its next state write is fenced)
            assert re.search(r"cannot renew its lead of the job in etcd://\S+ \(.*\): it stops acting|"
                             r"no longer leads the job in etcd://", old), old
            assert "telling every server to exit" not in old, old
        for w in workers:
            assert w.wait(240) == 0, open(tmp_path / "worker0.log").read()[-3000:]
        standby = open(tmp_path / "standby.log").read()
        assert f"resuming the job saved in etcd://{endpoint}/jobs/s" in standby, standby
        out1 = open(tmp_path / "worker1.log").read()
        assert "worker 1 | finished 2 epochs" in out1, out1
        out0 = open(tmp_path / "worker0.log").read()
        for epoch in (1, 2):
            assert re.search(rf"epoch {epoch} done \| 60000 of 60000 examples", out0), out0
        print(f"the standby led {took:.1f} s after the leader was {'killed' if fault == 'kill' else 'stopped'}")
    finally:
        for p in procs:
            if p.poll() is None:
                p.terminate()
        for p in procs:
            try:
                p.wait(20)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        etcd.terminate()
        etcd.wait(10)


@launcher_logic
def test_killed_server_fails_the_job_with_its_last_lines(run_dir):
    launch = Launch(["--servers", "2", "--workers", "2", "--", *small_mlp(epochs=500)], run_dir)
    launch.wait_for_line(r"worker 0 \| epoch \d+ step", 120)
    pid = pid_of(run_dir, "shardps-server", "--rank", "1")
    assert pid, launch.output()
    os.kill(pid, signal.SIGKILL)
    rc = launch.wait(60)
    out = launch.output()
    assert rc == 1, out
    assert "server 1 on localhost killed by signal SIGKILL: the job was stopped; its last lines:" in out, out
    assert "[server 1 @localhost]" in out and "registered as server 1" in out, out
    wait_none_left(run_dir)


# Runs the launcher with its main thread held up for a second each time it
# has started a thread (a process's reader), as on a loaded machine: a line
# the process prints at once is read before the launcher's next step.
SLOW_MAIN_THREAD = """
import runpy, sys, threading, time
start = threading.Thread.start
def slow_start(self):
    start(self)
    time.sleep(1.0)
threading.Thread.start = slow_start
sys.argv = sys.argv[1:]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@launcher_logic
def test_an_endpoint_reported_at_once_is_not_missed(run_dir, tmp_path):
    """A coordinator that reports its endpoint the moment it starts (the
    real one behind a script that prints the line first and drops the real
    one's): the launcher goes on at once. It used to add its watcher after
    the start, miss the line, and wait out its 60 s."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    port = free_port()
    fake = bin_dir / "shardps-coordinator"
    fake.write_text(f"""#!/bin/sh
for a; do [ "$a" = --print-config ] && exec {COORDINATOR} "$@"; done
echo "00:00:00.000 I [coordinator] coordinator on tcp://127.0.0.1:{port}: reported at once"
{COORDINATOR} "$@" 2>&1 | sed -u '/ coordinator on tcp:/d'
""")
    fake.chmod(0o755)
    os.symlink(os.path.join(BUILD, "server", "shardps-server"), bin_dir / "shardps-server")
    t0 = time.monotonic()
    launch = Launch(["--bin-dir", str(bin_dir), "--servers", "1", "--workers", "1", "--set",
                     f"launch.coordinator_port={port}", "--", "sh", "-c", "echo worker {rank} at {coordinator}"],
                    run_dir, prefix=[sys.executable, "-c", SLOW_MAIN_THREAD])
    rc = launch.wait(45)
    out = launch.output()
    assert rc == 0, out
    assert f"coordinator tcp://127.0.0.1:{port} on localhost" in out, out
    assert f"[worker 0 @localhost] worker 0 at tcp://127.0.0.1:{port}" in out, out
    assert time.monotonic() - t0 < 30, out
    wait_none_left(run_dir)


@launcher_logic
def test_killed_launcher_leaves_nothing(run_dir):
    # Even SIGKILL, which the launcher cannot catch: its children die with it.
    launch = Launch(["--servers", "2", "--workers", "2", "--", *small_mlp(epochs=500)], run_dir)
    launch.wait_for_line(r"worker 1 \| epoch \d+ step", 120)
    os.kill(launch.p.pid, signal.SIGKILL)
    launch.wait(10)
    wait_none_left(run_dir)


@launcher_logic
def test_worker_command_through_a_shell_pipe_is_tracked(run_dir):
    # A pipeline escaped the old launcher. Here its last stage ignores
    # SIGTERM and outlives the worker: only stopping the whole process group
    # (SIGTERM, then SIGKILL) ends it.
    cmd = " ".join(small_mlp(epochs=500)) + " | (trap '' TERM; cat; sleep 600)"
    launch = Launch(["--servers", "1", "--workers", "2", "--set", f"launch.worker_command={json.dumps(cmd)}"], run_dir)
    launch.wait_for_line(r"\[worker 1 @localhost\] worker 1 \| epoch \d+ step", 120)
    launch.signal(signal.SIGTERM)
    assert launch.wait(30) == 128 + signal.SIGTERM, launch.output()
    wait_none_left(run_dir)


@launcher_logic
def test_timeout_stops_the_job_and_server_side_warnings_are_shown(run_dir):
    launch = Launch(["--servers", "1", "--workers", "1", "--timeout", "5", "--", *small_mlp(epochs=500)], run_dir)
    # A request the coordinator refuses: its warning reaches the terminal.
    rc, out = ctl("snapshot", launch.coordinator(), "--timeout-sec", "10")
    assert rc != 0 and "no snapshot directory" in out, out
    launch.wait_for_line(r"^\[coordinator @localhost\] \S+ W \[coordinator\] request \d+ refused", 30)
    rc = launch.wait(60)
    assert rc == 124, launch.output()
    assert "workers still running after 5 s" in launch.output()
    wait_none_left(run_dir)


def scrape(url):
    from prometheus_client.parser import text_string_to_metric_families
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.headers["Content-Type"].startswith("text/plain; version=0.0.4"), r.headers["Content-Type"]
        text = r.read().decode()
    samples = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            samples[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return samples


def top_frames(coordinator, n, timeout=60):
    """The first `n` frames `shardps-ctl top` draws in a pseudo-terminal
    (each from its clear-screen code on), then Ctrl-C: it must exit 0."""
    master, slave = pty.openpty()
    p = subprocess.Popen([CTL, "top", coordinator, "--interval-sec", "0.5"], stdin=slave, stdout=slave, stderr=slave,
                         start_new_session=True)
    os.close(slave)
    out = b""
    end = time.monotonic() + timeout
    try:
        while out.count(b"\x1b[H\x1b[J") < n + 1 and time.monotonic() < end:
            r, _, _ = select.select([master], [], [], 0.5)
            if r:
                try:
                    out += os.read(master, 65536)
                except OSError:  # the child closed the terminal
                    break
        p.send_signal(signal.SIGINT)
        assert p.wait(timeout=20) == 0, out.decode(errors="replace")
    finally:
        if p.poll() is None:
            p.kill()
        os.close(master)
    text = out.decode(errors="replace").replace("\r\n", "\n")
    frames = ["\x1b[H\x1b[J" + f for f in text.split("\x1b[H\x1b[J")[1:]]
    assert len(frames) >= n, f"top drew {len(frames)} frames in {timeout} s: {text[-3000:]}"
    return frames[:n]


def test_status_shows_who_waits_metrics_grow_and_stop_ends_the_job(run_dir, tmp_path):
    # Bounded staleness 1; worker 1 runs 4x slower on its own shard: worker 0
    # reaches the bound and waits for it.
    slow = small_mlp(epochs=500, extra=["--slowdown", "4", "--slow-rank", "1", "--static-shards"])
    snaps = str(tmp_path / "snaps")
    launch = Launch(["--servers", "2", "--workers", "2", "--consistency", "bounded", "--staleness", "1",
                     "--snapshot-dir", snaps, "--", *slow], run_dir)
    coordinator = launch.coordinator()
    launch.wait_for_line(r"worker 1 \| epoch \d+ step", 120)

    # Who waits on whom, in JSON (polled: the servers report with their
    # heartbeats; at the very start worker 1 may briefly wait for worker 0).
    deadline = time.monotonic() + 60
    while True:
        rc, out = ctl("status", coordinator, "--json")
        assert rc == 0, out
        st = json.loads(out)
        w = next((w for w in st["waiting"] if (w["worker"], w["waits_for"]) == (0, 1)), None)
        if w:
            break
        assert time.monotonic() < deadline, f"worker 0 was not seen waiting for worker 1 within 60 s: {out}"
        time.sleep(0.3)
    assert w["clock"] - w["their_clock"] > 1, st
    roles = sorted((p["role"], p["rank"]) for p in st["processes"])
    assert roles == [("coordinator", 0), ("server", 0), ("server", 1), ("worker", 0), ("worker", 1)], st
    for p in st["processes"]:
        assert p["alive"] and p["host"] and p["pid"] > 0, p
        if p["role"] != "worker":
            assert p["metrics_url"].startswith("http://127.0.0.1:"), p
    assert {x["rank"] for x in st["workers"]} == {0, 1} and all(x["clock"] >= 0 for x in st["workers"]), st

    # The text form says the same (polled too: a moment later worker 0 may be
    # between two held pulls, training a batch while it waits).
    deadline = time.monotonic() + 60
    while True:
        rc, text = ctl("status", coordinator)
        assert rc == 0, text
        if re.search(r"worker 0 at clock \d+ waits for worker 1 at clock \d+ \(bound 1\)", text):
            break
        assert time.monotonic() < deadline, f"the text status never said worker 0 waits for worker 1: {text}"
        time.sleep(0.3)
    assert re.search(r"^server\s+1\s+\S+\s+\d+\s+alive", text, re.M), text

    # The live view: in a pseudo-terminal, frames redrawn in place, the
    # second with each worker's clocks per second; Ctrl-C ends it (0).
    frames = top_frames(coordinator, 2)
    assert frames[0].startswith("\x1b[H\x1b[J"), frames[0][:80]
    assert re.search(r"^clocks: min \d+, max \d+$", frames[1], re.M), frames[1]
    assert re.search(r"^clocks/s: worker 0 \d+\.\d, worker 1 \d+\.\d", frames[1], re.M), frames[1]
    assert re.search(r"^server\s+1\s+\S+\s+\d+\s+alive", frames[1], re.M), frames[1]
    # --once without a terminal: one frame, no escape codes.
    rc, once = ctl("top", coordinator, "--once")
    assert rc == 0 and "\x1b" not in once and once.count("shardps-ctl top") == 1, once
    assert re.search(r"^worker\s+0\s", once, re.M), once

    # Metrics parse as Prometheus text, and the counters grow.
    server_url = next(p["metrics_url"] for p in st["processes"] if p["role"] == "server")
    coord_url = next(p["metrics_url"] for p in st["processes"] if p["role"] == "coordinator")
    a = scrape(server_url)
    deadline = time.monotonic() + 30
    while True:
        b = scrape(server_url)
        if b[("shardps_push_requests_total", ())] > a[("shardps_push_requests_total", ())] and \
           b[("shardps_pull_bytes_total", ())] > a[("shardps_pull_bytes_total", ())]:
            break
        assert time.monotonic() < deadline, "server counters did not grow in 30 s"
        time.sleep(0.2)
    assert b[("shardps_consistency_wait_seconds_count", ())] > 0, "no pull waited under bounded staleness"
    assert any(k[0] == "shardps_table_rows" for k in b), sorted(b)[:20]
    c = scrape(coord_url)
    assert c[("shardps_live_workers", ())] == 2, c
    assert c[("shardps_worker_clock", (("worker", "0"),))] >= 0, c

    # On-demand snapshot, then stop: workers leave, a final snapshot, all exit 0.
    rc, out = ctl("snapshot", coordinator, "--timeout-sec", "120", timeout=150)
    assert rc == 0 and "snapshot complete" in out, out
    rc, out = ctl("stop", coordinator, "--timeout-sec", "120", timeout=150)
    assert rc == 0 and "job stopped" in out, out
    rc = launch.wait(60)
    assert rc == 0, launch.output()
    assert "the job stopped on request" in launch.output()
    assert re.search(r"worker 0 \| stopped on request", launch.output()), launch.output()
    complete = [d for d in os.listdir(snaps) if os.path.exists(os.path.join(snaps, d, "MANIFEST"))]
    assert len(complete) >= 2, os.listdir(snaps)
    wait_none_left(run_dir)


def launch_error(*args, config_text=None, tmp_path=None):
    argv = [LAUNCH, "--bin-dir", BUILD]
    if config_text is not None:
        path = tmp_path / "job.toml"
        path.write_text(config_text)
        argv += ["--config", str(path)]
    argv += [*args, "--", "true"]
    p = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    return p.returncode, p.stdout


@pytest.mark.parametrize("text,expected", [
    ("[job]\nservers = 2\nworkerz = 3\n", r"job\.toml:3: unknown key 'workerz' in \[job\] \(known keys: .*workers"),
    ("[job]\nservers = \"two\"\n", r"job\.toml:2: 'servers' must be an integer"),
    ("[job]\nservers = 0\n", r"job\.toml:2: 'servers' = 0 is out of range \[1, 4096\]"),
    ("[launch]\nmode = \"kubernetes\"\n", r"job\.toml:2: 'mode' must be \"local\", \"ssh\" or \"slurm\", got 'kubernetes'"),
    ("[launch]\nhosts = \"a,b\"\n", r"job\.toml:2: 'hosts' must be an array"),
    ("[launch]\nhosts = [{ name = \"a\", gpus = 2 }]\n", r"unknown key 'gpus' in \[launch.hosts\]"),
    ("[launch]\nserver_ports = \"7000-6000\"\n", r"job\.toml:2: 'server_ports' must be 0 \(free ports\) or a range"),
    ("[launch]\nenv = { A = 1 }\n", r"job\.toml:2: env 'A' must be a string"),
    ("[launch]\nworker_command = [\"a\", 2]\n", r"'worker_command' must be a string or an array of strings"),
    ("[metrics]\nport = 70000\n", r"job\.toml:2: 'port' = 70000 is out of range \[0, 65535\]"),
    ("[metrics]\nenabled = \"yes\"\n", r"'enabled' must be true or false"),
    ("[prometheus]\nport = 1\n", r"job\.toml:1: unknown key 'prometheus' in \[top level\]"),
    ("[job\nservers = 1\n", r"job\.toml:1: "),
])
def test_job_file_errors_name_the_key_line_and_expectation(tmp_path, text, expected):
    rc, out = launch_error(config_text=text, tmp_path=tmp_path)
    assert rc == 2, out
    assert re.search(expected, out), out


@pytest.mark.parametrize("args,expected", [
    (["--set", "job.servers=x"], r"--set job\.servers=x: 'servers' must be an integer"),
    (["--set", "launch.mod=ssh"], r"--set launch\.mod=ssh: unknown key 'mod' in \[launch\]"),
    (["--set", "servers=2"], r"--set 'servers=2': expected SECTION\.KEY=VALUE"),
    (["--set", "cluster.size=2"], r"unknown section 'cluster'"),
    (["--set", "table.name=x"], r"tables are defined in the job file"),
    (["--mode", "ssh"], r"ssh mode needs hosts"),
    (["--slurm"], r"inside a Slurm allocation"),
    (["--config", "/nonexistent/job.toml"], r"cannot read job file '/nonexistent/job.toml'"),
])
def test_bad_overrides_and_modes(args, expected):
    env_backup = os.environ.pop("SLURM_JOB_ID", None)
    try:
        rc, out = launch_error(*args)
    finally:
        if env_backup is not None:
            os.environ["SLURM_JOB_ID"] = env_backup
    assert rc == 2, out
    assert re.search(expected, out), out


def test_set_overrides_the_job_file(tmp_path):
    path = tmp_path / "job.toml"
    path.write_text("[job]\nservers = 2\nconsistency = \"sync\"\n[launch]\ntimeout_sec = 60\n")
    p = subprocess.run([COORDINATOR, "--print-config", "--config", str(path), "--set", "job.servers=3",
                        "--set", "job.consistency=bounded", "--set", "job.staleness=2",
                        "--set", "launch.hosts=[\"a\", {name=\"b\", workers=2}]"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
    assert p.returncode == 0, p.stdout
    cfg = json.loads(p.stdout)
    assert cfg["job"]["servers"] == 3 and cfg["job"]["consistency"] == "bounded" and cfg["job"]["staleness"] == 2
    assert cfg["launch"]["timeout_sec"] == 60
    assert [h["name"] for h in cfg["launch"]["hosts"]] == ["a", "b"] and cfg["launch"]["hosts"][1]["workers"] == 2


def test_every_example_job_file_parses():
    examples = os.path.join(ROOT, "docs", "examples")
    files = sorted(f for f in os.listdir(examples) if f.endswith(".toml"))
    assert files, "no example job files"
    for f in files:
        p = subprocess.run([COORDINATOR, "--print-config", "--config", os.path.join(examples, f)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=30)
        assert p.returncode == 0, f"{f}: {p.stdout}"
        json.loads(p.stdout)


def test_security_every_process_gets_its_key_and_others_are_refused(run_dir, tmp_path):
    keys = make_keys(str(tmp_path / "keys"))
    # A $SHARDPS_KEY in the launcher's environment (an operator's admin key)
    # is not passed on: every process gets the key of its role.
    launch = Launch(["--servers", "2", "--workers", "2", "--keys", keys, "--", *small_mlp(epochs=500)], run_dir,
                    env={"SHARDPS_KEY": os.path.join(keys, "admin.key")})
    coordinator = launch.coordinator(120)
    launch.wait_for_line(r"worker 1 \| epoch \d+ step", 120)
    # Without a key, or with a worker's, the tools are refused; an observer
    # key reads the status, only the admin key stops the job.
    rc, out = ctl("status", coordinator, "--timeout-sec", "30")
    assert rc != 0 and "PermissionDenied" in out and "has no key" in out, out
    rc, out = ctl("--key", os.path.join(keys, "observer.key"), "status", coordinator)
    assert rc == 0 and "worker" in out, out
    rc, out = ctl("--key", os.path.join(keys, "worker.key"), "stop", coordinator, "--timeout-sec", "30")
    assert rc != 0 and "a worker key may not send Stop" in out, out
    rc, out = ctl("--key", os.path.join(keys, "admin.key"), "stop", coordinator, "--timeout-sec", "120")
    assert rc == 0, out
    assert launch.wait(120) == 0, launch.output()
    log = open(os.path.join(run_dir, "coordinator.log")).read()
    assert "refused a connection to the coordinator" in log, log
    # Every worker trained over CURVE with the worker key.
    assert "worker 1 joined" in log, log
    wait_none_left(run_dir)


def test_security_keys_made_by_the_launcher_are_found_from_the_run_directory(run_dir):
    # [security] enabled = true on one machine does what a job across hosts
    # does by default (test_ssh, test_slurm): the launcher makes the job's
    # keys in the run directory, and the tools find them there.
    launch = Launch(["--servers", "1", "--workers", "2", "--set", "security.enabled=true", "--",
                     *small_mlp(epochs=500)], run_dir)
    coordinator = launch.coordinator(120)
    launch.wait_for_line(r"worker 1 \| epoch \d+ step", 120)
    keys = os.path.join(run_dir, "job-keys")
    assert f"security on: CURVE with the job's own keys, made in {keys} (mode 700)" in launch.output()
    assert os.stat(keys).st_mode & 0o777 == 0o700
    assert sorted(os.listdir(keys)) == ["access", "admin.key", "observer.key", "server.key", "worker.key"]
    job = wait_json(os.path.join(run_dir, "job.json"), lambda j: j.get("coordinator"), 30, "the coordinator in job.json")
    assert job["security"] == {"on": True, "keys": keys, "made_by_launcher": True}, job
    # Without a key the tool is refused and told which key it needs.
    rc, out = ctl("status", coordinator, "--timeout-sec", "30")
    assert rc != 0 and "this command needs the job's observer.key" in out, out
    rc, out = ctl("--run-dir", run_dir, "status")  # observer.key, and the coordinator, from job.json
    assert rc == 0 and "worker" in out, out
    rc, out = ctl("status", "--run-dir", run_dir)  # after the subcommand too
    assert rc == 0 and "worker" in out, out
    # The run directory's key comes before a $SHARDPS_KEY (a worker's, say).
    p = subprocess.run([CTL, "--run-dir", os.path.join(run_dir, "job.json"), "stop", "--timeout-sec", "120"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180,
                       env={**os.environ, "SHARDPS_KEY": os.path.join(keys, "worker.key")})
    assert p.returncode == 0, p.stdout  # admin.key
    assert launch.wait(120) == 0, launch.output()
    wait_none_left(run_dir)
    rc, out = ctl("--run-dir", os.path.join(run_dir, "nowhere"), "status")
    assert rc == 2 and "--run-dir: cannot read" in out and "nowhere/job.json" in out, out
    rc, out = ctl("status")
    assert rc == 2 and "give COORDINATOR (tcp://HOST:PORT) or the job's run directory (--run-dir DIR)" in out, out
    # A command with numbers after the coordinator may leave it out too.
    rc, out = ctl("--run-dir", run_dir, "drain-server", "one")
    assert rc == 2 and "SERVER must be an integer in [0, 4095], got 'one' ([COORDINATOR] SERVER)" in out, out


def test_security_missing_keys_are_named_before_anything_starts(run_dir, tmp_path):
    p = subprocess.run([LAUNCH, "--run-dir", run_dir, "--bin-dir", BUILD, "--keys", str(tmp_path / "none"),
                        "--", *small_mlp()], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)
    assert p.returncode == 2, p.stdout
    assert "security: cannot read" in p.stdout and "shardps-keygen" in p.stdout, p.stdout


@launcher_logic
def test_an_operators_key_in_the_environment_does_not_reach_a_plaintext_job(run_dir, tmp_path):
    keys = make_keys(str(tmp_path / "keys"))
    launch = Launch(["--servers", "1", "--workers", "1", "--", *small_mlp(epochs=1)], run_dir,
                    env={"SHARDPS_KEY": os.path.join(keys, "admin.key")})
    assert launch.wait(240) == 0, launch.output()
    wait_none_left(run_dir)


def hand_started(run_dir, *server_args):
    """A coordinator and one server started by hand (no launcher), with
    their logs in run_dir; returns (coordinator, server) Popen objects."""
    os.makedirs(run_dir, exist_ok=True)
    ep = os.path.join(run_dir, "endpoint")
    coord = subprocess.Popen([COORDINATOR, "--servers", "1", "--workers", "1", "--endpoint-file", ep, "--no-metrics"],
                             stdout=open(os.path.join(run_dir, "coordinator.log"), "w"), stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 30
    while not (os.path.exists(ep) and open(ep).read().strip()):
        assert time.monotonic() < deadline and coord.poll() is None, "the coordinator wrote no endpoint in 30 s"
        time.sleep(0.05)
    server = subprocess.Popen([SERVER, "--coordinator", open(ep).read().strip(), "--no-metrics", *server_args],
                              stdout=open(os.path.join(run_dir, "server.log"), "w"), stderr=subprocess.STDOUT)
    end = time.monotonic() + 30
    while "registered as server 0" not in open(os.path.join(run_dir, "server.log")).read():
        assert time.monotonic() < end and server.poll() is None, open(os.path.join(run_dir, "server.log")).read()
        time.sleep(0.05)
    return coord, server


def test_a_server_that_lost_its_coordinator_says_so_and_exits(run_dir):
    # The coordinator killed (its machine lost, say): a server started by
    # hand does not wait for ever; after --coordinator-timeout-sec of
    # silence it names the coordinator and exits 1.
    coord, server = hand_started(run_dir, "--coordinator-timeout-sec", "2")
    try:
        coord.kill()
        coord.wait(10)
        assert server.wait(30) == 1
    finally:
        for p in (coord, server):
            if p.poll() is None:
                p.kill()
                p.wait(10)
    log = open(os.path.join(run_dir, "server.log")).read()
    assert re.search(r"lost the coordinator tcp://\S+: nothing from it for [23] s \(--coordinator-timeout-sec 2\), "
                     r"its job is gone", log), log


def test_a_coordinator_stopped_by_a_signal_ends_every_server_of_its_job(run_dir):
    # SIGTERM to the coordinator ends the job: a server it did not start
    # (by hand, no launcher to stop it) is told to exit, and exits 0.
    coord, server = hand_started(run_dir)
    try:
        coord.send_signal(signal.SIGTERM)
        assert coord.wait(30) == 0
        assert server.wait(30) == 0
    finally:
        for p in (coord, server):
            if p.poll() is None:
                p.kill()
                p.wait(10)
    assert "stopped by a signal: telling every server to exit" in open(os.path.join(run_dir, "coordinator.log")).read()
    assert "coordinator asked to shut down" in open(os.path.join(run_dir, "server.log")).read()
