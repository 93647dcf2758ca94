"""shardps-launch --slurm: the srun command lines (always), and a real job in
a real single-node Slurm (Debian's slurmctld, slurmd and munge, started by
the test; skipped with the reason where they cannot start)."""

import os
import re
import signal
import subprocess
import time

import pytest

from hostenv import slurm_cluster_or_skip
from launchlib import BUILD, LAUNCH, Launch, ctl, small_mlp, started_by, wait_none_left


def test_srun_command_lines_place_every_process_on_the_allocation():
    env = {**os.environ, "SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "node[1-2],gpu07"}
    p = subprocess.run([LAUNCH, "--slurm", "--dry-run", "--bin-dir", BUILD, "--servers", "2", "--workers", "4",
                        "--set", 'launch.srun_options=["--cpu-bind=none"]', "--", *small_mlp()],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stdout
    lines = [l.strip() for l in p.stdout.splitlines() if l.startswith("  ")]
    placed = [re.match(r"(\w+) (\d+) on (\S+): (.*)", l).groups() for l in lines]
    assert [(r, int(k), h) for r, k, h, _ in placed] == [
        ("coordinator", 0, "node1"), ("server", 0, "node1"), ("server", 1, "node2"),
        ("worker", 0, "node1"), ("worker", 1, "node2"), ("worker", 2, "gpu07"), ("worker", 3, "node1")], p.stdout
    for role, rank, host, cmd in placed:
        # One step per process, sharing the allocation's CPUs, on its node.
        assert cmd.startswith(f"srun --overlap --nodes=1 --ntasks=1 --nodelist={host} "), cmd
        assert "--unbuffered" in cmd and "--cpu-bind=none" in cmd, cmd
    assert "shardps-server --coordinator 'tcp://<address of node1>:<port>' --rank 1 --bind tcp://0.0.0.0:0 " \
           "--advertise '<address of node2>'" in placed[2][3], placed[2][3]
    assert re.search(r"shardps-worker --coordinator 'tcp://<address of node1>:<port>' --rank 2 ", placed[5][3])
    # Security is on (a Slurm job spans nodes): the launcher would make the
    # job's keys, and each process gets the key of its role.
    assert "security on: CURVE with the job's own keys, to be made in " in p.stdout, p.stdout
    assert re.search(r"--key \S*/keys/server\.key --access \S*/keys/access", placed[2][3]), placed[2][3]
    # --no-security: off, with the warning naming what that exposes.
    p = subprocess.run([LAUNCH, "--slurm", "--dry-run", "--bin-dir", BUILD, "--servers", "2", "--workers", "4",
                        "--no-security", "--", *small_mlp()],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env, timeout=60)
    assert p.returncode == 0, p.stdout
    assert "WARNING: security is off (--no-security or [security] enabled = false) in a job across hosts " \
           "(node1, node2, gpu07)" in p.stdout, p.stdout
    assert "--key" not in p.stdout, p.stdout


def test_outside_an_allocation_slurm_mode_says_so():
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    p = subprocess.run([LAUNCH, "--slurm", "--bin-dir", BUILD, "--", "true"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, env=env, timeout=60)
    assert p.returncode == 2 and "inside a Slurm allocation (salloc or sbatch)" in p.stdout, p.stdout


@pytest.fixture(scope="module")
def slurm():
    with slurm_cluster_or_skip() as cluster:
        yield cluster


def salloc_launch(slurm, run_dir, *args, worker):
    # One node: the job's processes talk over loopback (--advertise).
    return Launch(["--slurm", "--advertise", "127.0.0.1", *args, "--", *worker], run_dir,
                  prefix=["salloc", "-N1", "-n1", "--time=10"], env=slurm.env)


def test_job_in_a_real_allocation(slurm, tmp_path):
    run_dir = str(tmp_path / "run")
    launch = salloc_launch(slurm, run_dir, "--servers", "2", "--workers", "2", worker=small_mlp(epochs=2))
    rc = launch.wait(300)
    out = launch.output()
    assert rc == 0, out
    node = slurm.node
    assert re.search(rf"^\[worker 0 @{node}\] worker 0 \| epoch 2 done .* test accuracy", out, re.M), out
    assert re.search(rf"^\[worker 1 @{node}\] worker 1 \| finished 2 epochs", out, re.M), out
    # Security on by default: the keys were made here and handed to the node
    # through srun steps (mode 600 in the run directory there).
    assert f"security on: CURVE with the job's own keys, made in {run_dir}/job-keys (mode 700)" in out, out
    assert sorted(os.listdir(os.path.join(run_dir, "keys"))) == ["access", "server.key", "worker.key"]
    assert os.stat(os.path.join(run_dir, "keys", "server.key")).st_mode & 0o777 == 0o600
    wait_none_left(run_dir)


def test_sigterm_in_an_allocation_leaves_nothing(slurm, tmp_path):
    run_dir = str(tmp_path / "run")
    launch = salloc_launch(slurm, run_dir, "--servers", "1", "--workers", "2", worker=small_mlp(epochs=500))
    launch.wait_for_line(r"worker 1 \| epoch \d+ step", 180)
    # Security is on: a tool without a key is refused; with the run
    # directory alone it finds the coordinator and its key.
    coordinator = launch.coordinator(10)
    rc, out = ctl("status", coordinator, "--timeout-sec", "30")
    assert rc != 0 and "this client has no key" in out, out
    rc, out = ctl("--run-dir", run_dir, "status")
    assert rc == 0 and "worker" in out, out
    # The launcher is salloc's child.
    children = subprocess.run(["pgrep", "-P", str(launch.p.pid)], stdout=subprocess.PIPE, text=True).stdout.split()
    assert children, "salloc has no child"
    for pid in children:
        os.kill(int(pid), signal.SIGTERM)
    launch.wait(60)
    assert "SIGTERM: the job was stopped" in launch.output(), launch.output()
    wait_none_left(run_dir)
