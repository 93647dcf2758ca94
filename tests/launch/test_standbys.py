"""Standby coordinators through the launcher (--etcd local --standbys N):
a real 3-member etcd cluster on loopback started by the launcher, the
leader and a standby on fixed endpoints, servers and workers given both.
Skips, saying why, where etcd is not installed."""

import os
import re
import signal
import time

import pytest

from launchlib import Launch, plain_only, read_json, wait_json, wait_none_left
from test_local import full_mlp, run_dir  # noqa: F401 (a fixture)

pytestmark = pytest.mark.skipif(not os.access("/usr/bin/etcd", os.X_OK), reason="no /usr/bin/etcd (Debian's etcd-server)")


def procs_of(run_dir, role, running=True):
    """job.json's entries of `role`, the running ones (or all)."""
    doc = read_json(os.path.join(run_dir, "job.json")) or {}
    return [p for p in doc.get("processes", []) if p["role"] == role and (not running or p["state"] == "running")]


def leader_of(run_dir, timeout, what, not_pid=None):
    """The job.json entry of the coordinator that leads (it answered the
    launcher's status poll), other than process `not_pid` (one killed, which
    job.json may not show dead yet), within `timeout` s."""
    def leads(p):
        return (p["role"] == "coordinator" and p.get("leading") and p["state"] == "running" and
                p["launcher_pid"] != not_pid)
    doc = wait_json(os.path.join(run_dir, "job.json"), lambda d: any(leads(p) for p in d.get("processes", [])),
                    timeout, what)
    return next(p for p in doc["processes"] if leads(p))


# (Its C++ paths — the store, the take-over, etcd lost — run under both
# sanitizers in etcd_state_test and replica_test's StandbyTest.)
@plain_only
def test_the_job_survives_its_leader_and_its_etcd(run_dir):
    """sync, replicas 2, 2 servers + 2 workers, --etcd local --standbys 1.
    Mid-training: one etcd member killed (the job does not notice); the
    leading coordinator killed (-9): the standby leads, the dead one is
    started again as a standby; then both etcd members left stopped past
    the leader's lease (SIGSTOP), then continued: the leader steps down,
    a coordinator leads again once etcd answers. The job finishes (exit 0),
    every epoch trains every example once, nothing is left running."""
    launch = Launch(["--servers", "2", "--workers", "2", "--replicas", "2", "--etcd", "local", "--standbys", "1",
                     "--set", "job.heartbeat_timeout_ms=20000", "--", *full_mlp(5)], run_dir)
    try:
        launch.wait_for_line(r"etcd: 3 members serving", 60)
        launch.wait_for_line(r"standby coordinators: tcp://127\.0\.0\.1:\d+ on localhost", 60)
        doc = read_json(os.path.join(run_dir, "job.json"))
        assert len(doc["coordinators"]) == 2 and doc["etcd"]["started_by_launcher"], doc
        assert doc["coordinator"] == ",".join(doc["coordinators"]), doc
        launch.wait_for_line(r"worker 0 \| epoch 1 done", 240)

        # One member of three: not noticed.
        os.kill(procs_of(run_dir, "etcd")[2]["launcher_pid"], signal.SIGKILL)
        launch.wait_for_line(r"etcd 2 on localhost killed by signal SIGKILL .*: 2 of 3 etcd members left; the "
                             r"cluster goes on", 30)

        # The leader: the standby takes over.
        first = leader_of(run_dir, 30, "a coordinator that leads")
        since = len(launch.lines)
        t0 = time.monotonic()
        os.kill(first["launcher_pid"], signal.SIGKILL)
        launch.wait_for_line(r"killed by signal SIGKILL .*: a standby leads if it led; starting it again as a "
                             r"standby", 30, since)
        second = leader_of(run_dir, 60, "the standby to lead", first["launcher_pid"])
        took = time.monotonic() - t0
        # (the standby, or the killed one started again: whichever takes the lapsed key first)
        launch.wait_for_line(r"worker 0 \| epoch 3 done", 240, since)

        # Every member left stopped past the lease, then continued.
        since = len(launch.lines)
        members = procs_of(run_dir, "etcd")
        assert len(members) == 2, members
        for m in members:
            os.kill(m["launcher_pid"], signal.SIGSTOP)
        try:
            launch.wait_for_line(r"coordinator.* exited with status 1 .*starting it again as a standby", 30, since)
        finally:
            for m in members:
                os.kill(m["launcher_pid"], signal.SIGCONT)
        leader_of(run_dir, 60, "a coordinator to lead once etcd is back")

        assert launch.wait(300) == 0, launch.output()
        out = launch.output()
        for epoch in range(1, 6):
            assert re.search(rf"worker 0 \| epoch {epoch} done \| 60000 of 60000 examples", out), out
        assert "worker 1 | finished 5 epochs" in out, out
        logs = "".join(open(os.path.join(run_dir, f)).read() for f in os.listdir(run_dir)
                       if f.startswith("coordinator") and f.endswith(".log"))
        assert "resuming the job saved in etcd://" in logs, logs[-3000:]
        assert re.search(r"cannot renew its lead|cannot save the coordinator's state", logs), logs[-3000:]
        print(f"a standby led {took:.1f} s after the leader was killed (as seen in job.json)")
    finally:
        if launch.p.poll() is None:
            launch.kill()
    wait_none_left(run_dir)
    assert read_json(os.path.join(run_dir, "job.json"))["state"] == "completed"
