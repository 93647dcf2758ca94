"""A seeded chaos test (docs/fault-tolerance.md): a job of 2 servers and 3
workers training the MLP on Fashion-MNIST, with every recovery on, loses
a worker, later a server, later the coordinator (kill -9), each at a
moment drawn from a seeded generator. The job must finish (exit 0), reach
the test accuracy of the same job without faults within a point (the
mean of its last two epochs), and
every snapshot it completed must still verify. Under sync and under
bounded staleness, and under bounded staleness with replicas = 2 and 4
replica groups on the 2 servers (the server's groups fail over to their
backups: nothing rolls back) and a standby coordinator instead of
--restart-coordinator (--etcd local --standbys 1: the leader is killed
twice, each time a standby takes over).
SHARDPS_CHAOS_SEED picks another seed (default 1); the seed is printed."""

import json
import os
import random
import re
import signal
import subprocess
import time

import pytest

from launchlib import BUILD, WORKER, Launch, pid_of, read_json, wait_json, wait_none_left

SNAPSHOT = os.path.join(BUILD, "tools", "shardps-snapshot")
SEED = int(os.environ.get("SHARDPS_CHAOS_SEED", "1"))
EPOCHS = 6


def worker_command():
    return [WORKER, "--coordinator", "{coordinator}", "--rank", "{rank}", "--model", "mlp", "--hidden", "64",
            "--epochs", str(EPOCHS), "--optimizer", "adam", "--lr", "0.0003",
            "--progress-sec", "0.2"]


def final_accuracy(out):
    """The mean test accuracy of the last two epochs (under bounded staleness
    one epoch's accuracy moves by about a point from the next)."""
    acc = [float(re.search(rf"worker 0 \| epoch {e} done \| .* test accuracy (\d+\.\d+)%", out).group(1))
           for e in (EPOCHS - 1, EPOCHS)]
    return sum(acc) / 2


def job_args(consistency, replicas=1):
    return ["--servers", "2", "--workers", "3", "--consistency", consistency, "--staleness",
            "2" if consistency == "bounded" else "0", "--replicas", str(replicas),
            "--set", "job.heartbeat_timeout_ms=1500"] + (["--set", "job.groups=4"] if replicas > 1 else [])


@pytest.mark.parametrize("consistency,replicas", [("sync", 1), ("bounded", 1), ("bounded", 2)])
def test_chaos_worker_then_server_then_coordinator(tmp_path, consistency, replicas):
    rng = random.Random(f"{SEED}-{consistency}" + (f"-r{replicas}" if replicas > 1 else ""))
    print(f"chaos seed {SEED} ({consistency}, replicas {replicas})")
    # The same job without faults.
    calm = Launch([*job_args(consistency, replicas), "--", *worker_command()], str(tmp_path / "calm"))
    assert calm.wait(300) == 0, calm.output()
    calm_acc = final_accuracy(calm.output())

    run_dir = str(tmp_path / "chaos")
    snaps = str(tmp_path / "snaps")
    standby = replicas > 1 and os.access("/usr/bin/etcd", os.X_OK)  # (else --restart-coordinator)
    launch = Launch(["-v", *job_args(consistency, replicas), "--snapshot-dir", snaps, "--snapshot-every-clocks", "25",
                     "--set", "job.keep_snapshots=100000", "--restart-workers", "--restart-servers",
                     *(["--etcd", "local", "--standbys", "1"] if standby else ["--restart-coordinator"]), "--",
                     *worker_command()], run_dir)

    def kill_after(pattern, program, *args, since=0):
        """Waits for a line matching `pattern`, then a seeded 0.2-1.2 s, then
        kill -9 of the launch's `program` process (with `args`)."""
        launch.wait_for_line(pattern, 180, since)
        time.sleep(rng.uniform(0.2, 1.2))
        pid = pid_of(run_dir, program, *args)
        assert pid, f"no {program} {args} to kill:\n{launch.output()}"
        os.kill(pid, signal.SIGKILL)
        return len(launch.lines)

    killed = []  # the leading coordinators killed (standbys)
    victim = str(rng.randrange(3))
    mark = kill_after(r"worker \d \| epoch 1 step", "shardps-worker", "--rank", victim)
    launch.wait_for_line(rf"worker {victim} on localhost .*: starting it again", 120, mark)
    mark = kill_after(r"snapshot \S+ complete", "shardps-server", "--rank", str(rng.randrange(2)), since=mark)
    recovered = (r"starting a replacement .* filled with copies while the job goes on" if replicas > 1 else
                 r"rolled back to .*: starting every server and worker again")
    if not standby:
        kill_after(recovered, "shardps-coordinator", since=mark)
    else:
        for k in range(2):  # the leader, twice: each time a standby takes over
            launch.wait_for_line(recovered if k == 0 else r"starting it again as a standby", 180, mark)
            time.sleep(rng.uniform(0.2, 1.2))
            leader = wait_json(os.path.join(run_dir, "job.json"), lambda d: any(
                p["role"] == "coordinator" and p.get("leading") and p["state"] == "running" and
                p["launcher_pid"] not in killed for p in d["processes"]), 60, "a coordinator that leads")
            pid = next(p["launcher_pid"] for p in leader["processes"] if p["role"] == "coordinator" and
                       p.get("leading") and p["state"] == "running" and p["launcher_pid"] not in killed)
            killed.append(pid)
            mark = len(launch.lines)
            os.kill(pid, signal.SIGKILL)
    rc = launch.wait(400)
    out = launch.output()
    assert rc == 0, out
    assert re.search(rf"worker {victim} on localhost killed by signal SIGKILL .*: starting it again", out), out
    assert re.search(r"server \d on localhost killed by signal SIGKILL .*: " +
                     (r"server \d is dead; its groups are served by their backups" if replicas > 1 else
                      "rolling the job back"), out), out
    if standby:
        assert len(re.findall(r"coordinator( 1)? on localhost killed by signal SIGKILL .*: a standby leads if it led; "
                              r"starting it again as a standby", out)) == 2, out
    else:
        assert re.search(r"the coordinator on localhost killed by signal SIGKILL .*: starting it again", out), out
    acc = final_accuracy(out)
    print(f"{consistency}: test accuracy (mean of the last 2 epochs) {acc:.2f} % with faults, {calm_acc:.2f} % "
          f"without")
    for line in out.splitlines():
        if "done |" in line or "on the way:" in line:
            print(line)
    assert abs(acc - calm_acc) <= 1.0, out
    # The run directory tells the same story (tools/shardps_launch/rundir.py).
    job = read_json(os.path.join(run_dir, "job.json"))
    assert job["state"] == "completed" and job["final"]["exit_status"] == 0, job
    assert job["rollbacks"] == (0 if replicas > 1 else 1), job
    whats = [e["what"] for e in job["events"]]
    assert any(f"worker {victim} on localhost" in w and w.endswith("started again") for w in whats), whats
    assert any(("failed over to the backups" if replicas > 1 else "rolled back to") in w for w in whats), whats
    assert sum(1 for w in whats if re.match(r"(the )?coordinator( 1)? on localhost", w)) == (2 if standby else 1), whats
    assert read_json(os.path.join(run_dir, "prometheus-targets.json")) == []

    # Every snapshot the job completed still verifies.
    listed = subprocess.run([SNAPSHOT, "list", snaps, "--json"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, timeout=60)
    assert listed.returncode == 0, listed.stdout
    complete = [s["dir"] for s in json.loads(listed.stdout) if s["complete"]]
    logged = set(re.findall(r"snapshot (\S+) complete", out))
    assert logged and logged <= set(complete), (f"logged as complete, not complete now: {sorted(logged - set(complete))}; "
                                                f"list: {listed.stdout}")
    for d in complete:
        v = subprocess.run([SNAPSHOT, "verify", d], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
        assert v.returncode == 0, f"{d}: {v.stdout}"
    wait_none_left(run_dir)
