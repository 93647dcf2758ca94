"""Every kind of user error ends shardps-launch with a message and a
documented exit status, never a Python traceback, and before anything
starts: a bad flag, a missing or malformed job file, a bad hosts file, a
missing binary (shardps-ctl for --restart-servers included), a worker
command that does not exist, an unreachable host, ..."""

import os
import re
import subprocess

import pytest

from launchlib import BUILD, LAUNCH, ROOT, wait_none_left


def documented_exit_statuses():
    """The exit statuses of docs/operations.md's table ("| 2 | ...")."""
    with open(os.path.join(ROOT, "docs", "operations.md")) as f:
        return {int(m.group(1)) for m in re.finditer(r"^\| (\d+) \| ", f.read(), re.M)}


def hosts_file(tmp_path, text):
    path = tmp_path / "hosts"
    path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
    return str(path)


def job_file(tmp_path, text):
    path = tmp_path / "job.toml"
    path.write_text(text)
    return str(path)


def not_executable(tmp_path):
    path = tmp_path / "data.txt"
    path.write_text("not a program\n")
    return str(path)


W = ["--", "true"]  # a worker command that exists

# (id, the launcher's arguments (a function of tmp_path), exit status, message on stderr)
CASES = [
    ("unknown flag", lambda t: ["--no-such-flag", *W], 2, r"error: unrecognized arguments: --no-such-flag"),
    ("bad flag value", lambda t: ["--servers", "two", *W], 2, r"argument --servers: invalid int value: 'two'"),
    ("flag out of range", lambda t: ["--servers", "0", *W], 2, r"--servers must be at least 1, got 0"),
    ("bad mode", lambda t: ["--mode", "k8s", *W], 2, r"argument --mode: invalid choice: 'k8s'"),
    ("missing job file", lambda t: ["--config", str(t / "none.toml"), *W], 2, r"cannot read job file '.*none\.toml'"),
    ("job file is a folder", lambda t: ["--config", str(t), *W], 2, r"--config: File is actually a directory"),
    ("malformed job file", lambda t: ["--config", job_file(t, "[job\nservers = 1\n"), *W], 2, r"job\.toml:1: "),
    ("unknown key", lambda t: ["--config", job_file(t, "[job]\nworkerz = 3\n"), *W], 2,
     r"job\.toml:2: unknown key 'workerz' in \[job\]"),
    ("bad --set", lambda t: ["--set", "servers=2", *W], 2, r"--set 'servers=2': expected SECTION\.KEY=VALUE"),
    ("missing hosts file", lambda t: ["--hosts", str(t / "none"), *W], 2, r"cannot read hosts file '.*none'"),
    ("bad hosts line", lambda t: ["--hosts", hosts_file(t, "a\nb gpus=2\n"), *W], 2,
     r"hosts:2: 'gpus=2' is not one of address=ADDR, coordinator, servers=N, workers=N"),
    ("hosts file not text", lambda t: ["--hosts", hosts_file(t, b"\xff\xfe\n"), *W], 2,
     r"hosts' is not text \(UTF-8\)"),
    ("empty hosts file", lambda t: ["--hosts", hosts_file(t, "# none\n"), *W], 2, r"hosts' lists no host"),
    ("hosts ask too much", lambda t: ["--hosts", hosts_file(t, "a servers=3\n"), "--servers", "2", *W], 2,
     r"the hosts ask for 3 servers, the job has 2"),
    ("ssh without hosts", lambda t: ["--mode", "ssh", *W], 2, r"ssh mode needs hosts"),
    ("unreachable host", lambda t: ["--hosts", hosts_file(t, "root@127.0.0.1\n"), "--set",
                                    'launch.ssh_options=["-p", "1", "-o", "ConnectTimeout=3"]', *W], 2,
     r"checks before starting failed:\n  host root@127\.0\.0\.1: ssh does not answer \(.*\); check that sshd runs"),
    ("slurm outside an allocation", lambda t: ["--slurm", *W], 2, r"inside a Slurm allocation"),
    ("no binaries in --bin-dir", lambda t: ["--bin-dir", str(t), *W], 2,
     r"cannot find shardps-coordinator \(it reads the job file\): looked at .*/shardps-coordinator, "
     r".*/server/shardps-coordinator"),
    ("no shardps-ctl for --restart-servers", lambda t: ["--bin-dir", os.path.join(BUILD, "server"),
                                                        "--restart-servers", "--snapshot-dir", str(t / "s"), *W], 2,
     r"cannot find shardps-ctl \(--restart-servers: the rollback runs shardps-ctl rollback on this machine\): "
     r"looked at .*/server/shardps-ctl, .*/server/tools/shardps-ctl"),
    ("no shardps-worker in --bin-dir", lambda t: ["--bin-dir", os.path.join(BUILD, "server"), "--",
                                                  "shardps-worker"], 2,
     r"cannot find shardps-worker \(the worker command\): looked at .*/server/shardps-worker"),
    ("worker command not on PATH", lambda t: ["--", "no-such-trainer", "--rank", "{rank}"], 2,
     r"the worker command cannot be run: 'no-such-trainer' is not found on PATH"),
    ("job file's worker command not on PATH",
     lambda t: ["--config", job_file(t, '[launch]\nworker_command = ["no-such-trainer", "{rank}"]\n')], 2,
     r"the worker command cannot be run: 'no-such-trainer' is not found on PATH"),
    ("worker command missing", lambda t: ["--", str(t / "trainer")], 2, r"'.*/trainer' does not exist"),
    ("worker command not executable", lambda t: ["--", not_executable(t)], 2,
     r"'.*data\.txt' is not an executable file"),
    ("no worker command", lambda t: [], 2, r"no worker command: give it after --, or as \[launch\] worker_command"),
    ("restore without snapshots", lambda t: ["--restore", *W], 2, r"--restore needs a snapshot directory"),
    ("too few server ports", lambda t: ["--servers", "2", "--set", 'launch.server_ports="7000-7000"', *W], 2,
     r"server_ports 7000-7000 has no port left for server 1"),
    ("missing keys", lambda t: ["--keys", str(t / "nokeys"), *W], 2, r"security: cannot read '.*nokeys/server\.key'"),
    ("standbys without etcd", lambda t: ["--standbys", "1", *W], 2,
     r"\[coordinator\] standbys need the job's state in etcd"),
    ("bad --etcd", lambda t: ["--etcd", "somewhere", *W], 2, r"\[launch\] etcd 'somewhere' is not \"local\" or HOST:PORT"),
    ("etcd that does not answer", lambda t: ["--etcd", "127.0.0.1:1", "--standbys", "1", *W], 2,
     r"etcd cannot be reached: 127\.0\.0\.1:1: .*Connection refused"),
    ("run directory cannot be made", lambda t: ["--run-dir", not_executable(t) + "/run", *W], 2,
     r"cannot create the run directory .*data\.txt/run: Not a directory"),
]


@pytest.mark.parametrize("make_args,status,message", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_user_error_is_a_message_and_an_exit_status(tmp_path, make_args, status, message):
    run_dir = str(tmp_path / "run")
    env = {k: v for k, v in os.environ.items() if not k.startswith("SLURM_")}
    # A case's own --run-dir or --bin-dir comes later and wins.
    p = subprocess.run([LAUNCH, "--run-dir", run_dir, "--bin-dir", BUILD, *make_args(tmp_path)],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, timeout=60)
    assert "Traceback" not in p.stderr + p.stdout, p.stderr
    assert p.returncode == status, p.stderr
    assert status in documented_exit_statuses()
    assert re.search(message, p.stderr), p.stderr
    # Nothing was started: no process, no log.
    assert "coordinator tcp://" not in p.stdout + p.stderr
    assert not (os.path.isdir(run_dir) and [f for f in os.listdir(run_dir) if f.endswith(".log")]), os.listdir(run_dir)
    wait_none_left(run_dir)
