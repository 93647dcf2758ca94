"""Unit tests of the run directory's files (tools/shardps_launch/rundir.py):
job.json and prometheus-targets.json from the launcher's processes and the
coordinator's answers, written whole and only when they change. Nothing is
started."""

import json
import os
import sys

from launchlib import ROOT

sys.path.insert(0, os.path.join(ROOT, "tools"))
from shardps_launch.procs import ProcessSet  # noqa: E402
from shardps_launch.rundir import RunDirFiles, target_of, write_atomically  # noqa: E402


class FakePopen:
    def __init__(self, pid):
        self.pid = pid


class FakeLog:
    def __init__(self, name):
        self.name = name


class FakeProc:
    """What rundir.py reads of a procs.Proc."""

    def __init__(self, role, rank, pid, incarnation=0, rc=None):
        self.role, self.rank, self.host, self.incarnation, self.rc = role, rank, "localhost", incarnation, rc
        self.p = FakePopen(pid)
        self.log = FakeLog(f"/run/{role}{rank}.log")
        self.endpoint = None  # a coordinator's, when fixed (standbys)

    def poll(self):
        return self.rc

    def describe_exit(self):
        return "running" if self.rc is None else f"exited with status {self.rc}"


class FakePoller:
    def __init__(self, latest):
        self._latest = latest

    def latest(self):
        return self._latest

    def stop(self):
        pass


def processes(procs):
    ps = ProcessSet.__new__(ProcessSet)  # newest() reads only .procs
    ps.procs = procs
    return ps


def load(path):
    with open(path) as f:
        return json.load(f)


def test_target_of_splits_a_metrics_url():
    assert target_of("http://127.0.0.1:4530/metrics") == ("127.0.0.1:4530", "/metrics")
    assert target_of("http://h:1/x/y") == ("h:1", "/x/y")
    assert target_of("") is None
    assert target_of(None) is None
    assert target_of("https://h:1/metrics") is None  # not what the processes serve


def test_write_atomically_leaves_no_temporary_file(tmp_path):
    path = str(tmp_path / "a.json")
    write_atomically(path, {"x": 1})
    write_atomically(path, {"x": 2})
    assert load(path) == {"x": 2}
    assert os.listdir(tmp_path) == ["a.json"]


def test_job_json_and_targets_follow_the_processes_and_the_coordinator(tmp_path):
    run_dir = str(tmp_path / "myjob")
    os.makedirs(run_dir)
    coord, s0, s1 = FakeProc("coordinator", 0, 100), FakeProc("server", 0, 101), FakeProc("server", 1, 102)
    w0, w1 = FakeProc("worker", 0, 103), FakeProc("worker", 1, 104)
    procs = [coord, s0, s1, w0, w1]
    files = RunDirFiles(run_dir, {"servers": 2, "workers": 2, "consistency": "sync"}, processes(procs))
    files.update()
    job = load(os.path.join(run_dir, "job.json"))
    assert job["name"] == "myjob" and job["state"] == "starting" and job["coordinator"] is None
    assert [(p["role"], p["rank"], p["state"]) for p in job["processes"]] == [
        ("coordinator", 0, "running"), ("server", 0, "running"), ("server", 1, "running"),
        ("worker", 0, "running"), ("worker", 1, "running")]
    assert load(os.path.join(run_dir, "prometheus-targets.json")) == []  # no URL known yet

    # The coordinator's answer: pids and metrics URLs (workers serve none).
    files.coordinator = "tcp://127.0.0.1:5555"
    files.poller = FakePoller({
        ("coordinator", 0): {"pid": 100, "metrics_url": "http://127.0.0.1:9000/metrics"},
        ("server", 0): {"pid": 101, "alive": True, "metrics_url": "http://127.0.0.1:9001/metrics"},
        ("server", 1): {"pid": 102, "alive": True, "metrics_url": "http://127.0.0.1:9002/metrics"},
        ("worker", 0): {"pid": 103, "alive": True, "metrics_url": ""},
    })
    files.update("running")
    job = load(os.path.join(run_dir, "job.json"))
    assert job["state"] == "running" and job["coordinator"] == "tcp://127.0.0.1:5555"
    by = {(p["role"], p["rank"]): p for p in job["processes"]}
    assert by[("server", 1)]["metrics_url"] == "http://127.0.0.1:9002/metrics"
    assert by[("server", 1)]["pid"] == 102 and by[("server", 1)]["log"] == "/run/server1.log"
    assert by[("worker", 0)]["metrics_url"] is None
    targets = load(os.path.join(run_dir, "prometheus-targets.json"))
    assert targets == [
        {"targets": ["127.0.0.1:9000"], "labels": {"job": "myjob", "role": "coordinator", "rank": "0", "host": "localhost"}},
        {"targets": ["127.0.0.1:9001"], "labels": {"job": "myjob", "role": "server", "rank": "0", "host": "localhost"}},
        {"targets": ["127.0.0.1:9002"], "labels": {"job": "myjob", "role": "server", "rank": "1", "host": "localhost"}},
    ]

    # Nothing changed: nothing is rewritten.
    before = os.stat(os.path.join(run_dir, "job.json")).st_ino
    files.update()
    assert os.stat(os.path.join(run_dir, "job.json")).st_ino == before

    # Server 1 dies and its next incarnation is started: until it
    # registers, the coordinator still describes the dead one, which is not
    # taken for the new one.
    s1.rc = -9
    s1b = FakeProc("server", 1, 105, incarnation=1)
    procs.append(s1b)
    files.update()
    job = load(os.path.join(run_dir, "job.json"))
    new = [p for p in job["processes"] if p["role"] == "server" and p["rank"] == 1][1]
    assert new["incarnation"] == 1 and new["pid"] is None and new["metrics_url"] is None, new
    assert "127.0.0.1:9002" not in [t["targets"][0] for t in load(os.path.join(run_dir, "prometheus-targets.json"))]
    # It registers elsewhere: the old one is listed as exited, without a
    # URL; the target moves.
    files.poller = FakePoller({**files.poller.latest(),
                               ("server", 1): {"pid": 105, "alive": True, "metrics_url": "http://127.0.0.1:9003/metrics"}})
    files.note("server 1 on localhost killed: rolled back to /s/snap-1 (clock 25)", rollback=True)
    job = load(os.path.join(run_dir, "job.json"))
    assert job["rollbacks"] == 1 and job["restarts"] == 1
    assert job["events"][0]["what"].startswith("server 1 on localhost killed")
    old, new = [p for p in job["processes"] if p["role"] == "server" and p["rank"] == 1]
    assert old["state"] == "exited with status -9" and old["metrics_url"] is None and old["incarnation"] == 0
    assert new["metrics_url"] == "http://127.0.0.1:9003/metrics" and new["incarnation"] == 1
    targets = load(os.path.join(run_dir, "prometheus-targets.json"))
    assert [t["targets"][0] for t in targets] == ["127.0.0.1:9000", "127.0.0.1:9001", "127.0.0.1:9003"]

    # A server the coordinator no longer counts alive is no target.
    files.poller = FakePoller({**files.poller.latest(),
                               ("server", 0): {"pid": 101, "alive": False, "metrics_url": "http://127.0.0.1:9001/metrics"}})
    files.update()
    targets = load(os.path.join(run_dir, "prometheus-targets.json"))
    assert "127.0.0.1:9001" not in [t["targets"][0] for t in targets]

    # The end: every process stopped, the final state written, nothing up.
    for p in procs:
        p.rc = 0 if p.rc is None else p.rc
    files.finish("completed", 0, None)
    job = load(os.path.join(run_dir, "job.json"))
    assert job["state"] == "completed" and job["final"]["state"] == "completed" and job["final"]["exit_status"] == 0
    assert load(os.path.join(run_dir, "prometheus-targets.json")) == []


def test_a_run_directory_that_went_away_is_not_an_error(tmp_path):
    run_dir = str(tmp_path / "gone")
    files = RunDirFiles(run_dir, {}, processes([]))
    files.update()  # no directory: nothing written, nothing raised
    assert not os.path.exists(run_dir)


def test_with_standbys_the_coordinator_that_answers_is_the_one_leading(tmp_path):
    """Every coordinator has its endpoint; the status names the one that
    answered: it leads, its metrics are the target; after it dies, the
    answer still cached is not taken for the one started again."""
    run_dir = str(tmp_path / "job")
    os.makedirs(run_dir)
    a, b = FakeProc("coordinator", 0, 100), FakeProc("coordinator", 1, 200)
    a.endpoint, b.endpoint = "tcp://h1:7000", "tcp://h2:7001"
    procs = [a, b]
    files = RunDirFiles(run_dir, {"servers": 1, "workers": 1, "consistency": "sync"}, processes(procs))
    files.coordinator = "tcp://h1:7000,tcp://h2:7001"
    files.etcd = {"endpoints": ["h1:2379"], "prefix": "shardps/job-1", "started_by_launcher": True}
    files.poller = FakePoller({("coordinator", 0): {"pid": 100, "endpoint": "tcp://h1:7000",
                                                    "metrics_url": "http://h1:9000/metrics"}})
    files.update("running")
    job = load(os.path.join(run_dir, "job.json"))
    assert job["coordinators"] == ["tcp://h1:7000", "tcp://h2:7001"] and job["etcd"]["prefix"] == "shardps/job-1"
    assert [(p["rank"], p["endpoint"], p["leading"]) for p in job["processes"]] == [
        (0, "tcp://h1:7000", True), (1, "tcp://h2:7001", False)]
    assert [t["targets"] for t in load(os.path.join(run_dir, "prometheus-targets.json"))] == [["h1:9000"]]
    # The leader dies and is started again as a standby; the standby leads.
    a.rc = -9
    a2 = FakeProc("coordinator", 0, 101, incarnation=1)
    a2.endpoint = a.endpoint
    procs.append(a2)
    files.update()  # (the cached answer is the dead one's: nobody leads yet)
    job = load(os.path.join(run_dir, "job.json"))
    assert [p.get("leading") for p in job["processes"]] == [False, False, False]
    files.poller = FakePoller({("coordinator", 0): {"pid": 200, "endpoint": "tcp://h2:7001",
                                                    "metrics_url": "http://h2:9100/metrics"}})
    files.update()
    job = load(os.path.join(run_dir, "job.json"))
    assert [(p["rank"], p["incarnation"], p["leading"]) for p in job["processes"]] == [
        (0, 0, False), (1, 0, True), (0, 1, False)]
    assert [t["targets"] for t in load(os.path.join(run_dir, "prometheus-targets.json"))] == [["h2:9100"]]
