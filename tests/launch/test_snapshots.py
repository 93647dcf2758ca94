"""Snapshots of launched jobs, end to end: a job that ends on its own with a
snapshot directory writes its final snapshot; the cuts a restarted
coordinator completes record where the work resumes, exactly (sync)."""

import json
import os
import re
import signal
import subprocess

from launchlib import BUILD, WORKER, Launch, pid_of, read_json, wait_none_left, wait_until

SNAPSHOT = os.path.join(BUILD, "tools", "shardps-snapshot")


def mlp(examples, *extra):
    """One epoch of the MLP on the first `examples` training examples."""
    return [WORKER, "--coordinator", "{coordinator}", "--rank", "{rank}", "--model", "mlp", "--hidden", "32",
            "--epochs", "1", "--train-limit", str(examples), "--test-limit", "500", "--progress-sec", "0.5", *extra]


def snapshot_cli(*args):
    p = subprocess.run([SNAPSHOT, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
    return p.returncode, p.stdout


def complete_snapshots(snaps):
    rc, out = snapshot_cli("list", snaps, "--json")
    assert rc == 0, out
    return [s for s in json.loads(out) if s["complete"]]


def test_a_job_that_ends_on_its_own_writes_its_final_snapshot(tmp_path):
    """Workers done after a few clocks, no periodic cut reached: the trained
    model is not lost with the servers."""
    run_dir, snaps = str(tmp_path / "run"), str(tmp_path / "snaps")
    launch = Launch(["--servers", "2", "--workers", "2", "--snapshot-dir", snaps, "--snapshot-every-clocks", "100000",
                     "--", *mlp(1200)], run_dir)
    rc = launch.wait(240)
    out = launch.output()
    assert rc == 0, out
    assert "every worker finished: taking the final snapshot" in out, out
    m = re.search(r"the job ended with its final snapshot (\S+)", out)
    assert m, out
    done = complete_snapshots(snaps)
    assert [s["dir"] for s in done] == [m.group(1)], done
    assert snapshot_cli("verify", m.group(1))[0] == 0
    rc, info = snapshot_cli("info", m.group(1), "--json")
    assert rc == 0, info
    assert json.loads(info)["clock"] > 0, info  # after the training, not before it
    assert read_json(os.path.join(run_dir, "job.json"))["state"] == "completed"  # (the stop was the launcher's)
    wait_none_left(run_dir)


def test_cuts_after_a_coordinator_restart_record_where_the_work_resumes(tmp_path):
    """kill -9 of the coordinator after its first snapshot (sync, per-clock
    work): every snapshot, before and after the restart, records the
    examples of the clocks before its cut, no more and no fewer, so a
    restore from any of them trains every example of the epoch once."""
    run_dir, snaps = str(tmp_path / "run"), str(tmp_path / "snaps")
    batch, workers = 16, 2
    launch = Launch(["--servers", "2", "--workers", str(workers), "--restart-coordinator", "--snapshot-dir", snaps,
                     "--snapshot-every-clocks", "10", "--set", "job.keep_snapshots=1000", "--",
                     *mlp(4000, "--batch", str(batch), "--slowdown", "2")], run_dir)
    log = os.path.join(run_dir, "coordinator.log")
    wait_until(lambda: os.path.exists(log) and re.search(r"snapshot \S+ complete", open(log).read()), 120,
               "the first snapshot to complete")
    pid = pid_of(run_dir, "shardps-coordinator")
    assert pid, launch.output()
    os.kill(pid, signal.SIGKILL)
    rc = launch.wait(300)
    out = launch.output()
    assert rc == 0, out
    again = open(os.path.join(run_dir, "coordinator.restart1.log")).read()
    assert "resuming the job saved in" in again, again
    assert "no work position recorded" not in again, again
    after = [s for s in complete_snapshots(snaps) if s["dir"] in again]
    assert after, (again, complete_snapshots(snaps))
    per_clock = batch * workers
    checked = 0
    for s in complete_snapshots(snaps):
        rc, info = snapshot_cli("info", s["dir"], "--json")
        assert rc == 0, info
        i = json.loads(info)
        if i["clock"] * per_clock >= 4000:
            continue  # the epoch's end (the next pool's start)
        assert (i["work_pool"], i["work_position"]) == (1, i["clock"] * per_clock), (s["dir"], i)
        checked += 1
    assert checked >= 2, complete_snapshots(snaps)
    wait_none_left(run_dir)
