"""Unit tests of the job-file mapping (tools/shardps_launch: jobfile,
commands, binaries): the launcher's flags -> the job's overrides, the job
(as shardps-coordinator --print-config prints it) -> the command line and
environment of every process launched, and the binaries a job needs.
Nothing is started, but for two tests that ask the real coordinator to
read a job file (--print-config)."""

import copy
import json
import os
import subprocess
import sys

import pytest

from launchlib import COORDINATOR, ROOT

sys.path.insert(0, os.path.join(ROOT, "tools"))
from shardps_launch.binaries import Binaries, check_worker_command, job_needs  # noqa: E402
from shardps_launch.commands import (REMOTE_WRAPPER, JobCommands, endpoint_in, local_paths,  # noqa: E402
                                     on_endpoint, worker_path)
from shardps_launch.errors import LaunchError  # noqa: E402
from shardps_launch.jobfile import check_job, overrides, parse_args  # noqa: E402
from shardps_launch import security  # noqa: E402

# What shardps-coordinator --print-config prints without a job file
# (test_defaults_are_the_coordinators checks it still does).
DEFAULTS = {
    "job": {"servers": 1, "workers": 1, "max_workers": 1, "partitions": 64, "consistency": "sync", "staleness": 0,
            "replicas": 1, "groups": 1,
            "heartbeat_timeout_ms": 5000, "join_timeout_ms": 120000, "snapshot_dir": "", "state_dir": "",
            "snapshot_every_clocks": 0, "snapshot_every_sec": 0, "keep_snapshots": 3, "snapshot_full_every": 8, "server_memory_mb": 0},
    "tables": [],
    "launch": {"mode": "local", "hosts": [], "interface": "", "advertise": "", "coordinator_port": 0,
               "server_ports": [0, 0], "worker_command": [], "env": {}, "server_cpus": [], "bin_dir": "",
               "run_dir": "", "timeout_sec": 3600, "restart_workers": False, "restart_servers": False,
               "restart_coordinator": False, "max_restarts": 3, "etcd": "", "ssh_options": [], "srun_options": []},
    "coordinator": {"store": "", "standbys": 0},
    "metrics": {"enabled": True, "port": 0, "address": ""},
    "security": {"keys": "", "enabled": None},
}


def config(sets=(), **sections):
    """The defaults with `sections` ({"launch": {...}}) merged in, and the overrides `sets`."""
    cfg = copy.deepcopy(DEFAULTS)
    for name, values in sections.items():
        cfg[name].update(values)
    cfg["_sets"] = list(sets)
    return cfg


def bins(name):
    return f"/opt/shardps/bin/{name}"


def commands(cfg, worker=("train", "--rank", "{rank}"), keys="", key_paths=None, restore=False):
    return JobCommands(cfg, bins, list(worker), "/runs/r1", "/home/me", key_paths or local_paths(keys), keys,
                       restore)


def print_config(*args):
    if not os.access(COORDINATOR, os.X_OK):
        pytest.skip(f"{COORDINATOR} is not built")
    p = subprocess.run([COORDINATOR, "--print-config", *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=30)
    assert p.returncode == 0, p.stdout
    return json.loads(p.stdout)


def test_defaults_are_the_coordinators():
    assert print_config() == DEFAULTS


# ------------------------------------------------------ flags -> the job

def test_flags_become_overrides_after_the_sets(tmp_path):
    args, worker = parse_args(["--set", "job.partitions=8", "--servers", "3", "--workers", "4", "--consistency",
                               "bounded", "--staleness", "2", "--snapshot-dir", "snaps", "--run-dir", str(tmp_path),
                               "--timeout", "60", "--restart-workers", "--restart-servers", "--restart-coordinator",
                               "--max-restarts", "5", "--advertise", "10.0.0.1", "--ssh-option=-p2222",
                               "--", "train", "--rank", "{rank}"])
    assert worker == ["train", "--rank", "{rank}"]
    snaps = os.path.abspath("snaps")  # paths made absolute: the processes may run elsewhere
    assert overrides(args) == [
        "job.partitions=8", "job.servers=3", "job.workers=4", 'job.consistency="bounded"', "job.staleness=2",
        f"job.snapshot_dir={json.dumps(snaps)}", f"launch.run_dir={json.dumps(str(tmp_path))}",
        "launch.timeout_sec=60", "launch.max_restarts=5", 'launch.advertise="10.0.0.1"',
        "launch.restart_workers=true", "launch.restart_servers=true", "launch.restart_coordinator=true",
        'launch.ssh_options=["-p2222"]']


def test_no_flags_no_overrides():
    args, worker = parse_args([])
    assert overrides(args) == [] and worker == []


def test_modes_from_flags(tmp_path):
    args, _ = parse_args(["--slurm"])
    assert 'launch.mode="slurm"' in overrides(args)
    args, _ = parse_args(["--hosts", "hosts.txt"])  # a hosts file means ssh
    assert args.hosts == os.path.abspath("hosts.txt") and 'launch.mode="ssh"' in overrides(args)
    args, _ = parse_args(["--hosts", "h", "--mode", "local"])
    assert 'launch.mode="local"' in overrides(args)


@pytest.mark.parametrize("argv", [["--servers", "0"], ["--timeout", "0"], ["--workers", "-1"], ["--servers", "x"],
                                  ["--mode", "k8s"], ["--no-such-flag"]])
def test_bad_flags_exit_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        parse_args(argv)
    assert e.value.code == 2
    assert "shardps-launch: error:" in capsys.readouterr().err


def test_the_worker_command_after_dashes_else_the_job_files():
    args, _ = parse_args([])
    assert check_job(args, config(launch={"worker_command": ["a", "b"]}), ["x"]) == ["x"]
    assert check_job(args, config(launch={"worker_command": ["a", "b"]}), []) == ["a", "b"]
    with pytest.raises(LaunchError, match=r"no worker command: give it after --, or as \[launch\] worker_command"):
        check_job(args, config(), [])


def test_what_the_coordinator_cannot_check():
    args, _ = parse_args(["--restore"])
    with pytest.raises(LaunchError, match=r"--restore needs a snapshot directory"):
        check_job(args, config(), ["x"])
    assert check_job(args, config(job={"snapshot_dir": "/s"}), ["x"]) == ["x"]
    args, _ = parse_args([])
    with pytest.raises(LaunchError, match=r"server_ports 7000-7001 has no port left for server 2"):
        check_job(args, config(job={"servers": 3}, launch={"server_ports": [7000, 7001]}), ["x"])
    check_job(args, config(job={"servers": 2}, launch={"server_ports": [7000, 7001]}), ["x"])


# -------------------------------------------------- the job -> commands

def test_coordinator_command_line():
    cfg = config(["job.servers=2", 'job.consistency="bounded"'], launch={"coordinator_port": 7100},
                 metrics={"port": 9100})
    argv = commands(cfg, restore=True).coordinator("localhost", "127.0.0.1", "/jobs/job.toml")
    assert argv == [bins("shardps-coordinator"), "--bind", "tcp://127.0.0.1:7100", "--advertise", "127.0.0.1",
                    "--config", "/jobs/job.toml", "--set", "job.servers=2", "--set", 'job.consistency="bounded"',
                    "--restore", "--metrics-port", "9100", "--metrics-address", "127.0.0.1"]


def test_a_coordinator_not_on_loopback_binds_every_interface():
    argv = commands(config()).coordinator("localhost", "10.1.2.3", None)
    assert argv[:5] == [bins("shardps-coordinator"), "--bind", "tcp://0.0.0.0:0", "--advertise", "10.1.2.3"]
    assert "--config" not in argv
    argv = commands(config(launch={"mode": "ssh"})).coordinator("h1", "127.0.0.1", None)
    assert argv[2] == "tcp://0.0.0.0:0"


def test_server_command_lines_ports_cpus_memory_metrics():
    cfg = config(job={"server_memory_mb": 512}, launch={"server_ports": [7000, 7009], "server_cpus": ["0-3", "4-7"]},
                 metrics={"port": 9100, "address": "0.0.0.0"})
    c = commands(cfg)
    argv = [c.server(r, "localhost", "127.0.0.1", "tcp://127.0.0.1:7100") for r in range(3)]
    assert argv[2] == [bins("shardps-server"), "--coordinator", "tcp://127.0.0.1:7100", "--rank", "2",
                       "--bind", "tcp://127.0.0.1:7002", "--advertise", "127.0.0.1",
                       "--metrics-port", "9103", "--metrics-address", "0.0.0.0", "--cpus", "0-3",
                       "--memory-budget-mb", "512", "--cold-dir", c.run_dir]
    assert argv[1][argv[1].index("--cpus") + 1] == "4-7"
    assert argv[0][argv[0].index("--bind") + 1] == "tcp://127.0.0.1:7000"


def test_free_ports_and_no_metrics():
    c = commands(config(metrics={"enabled": False}))
    argv = c.server(1, "n2", "10.0.0.2", "tcp://10.0.0.1:5")
    assert argv == [bins("shardps-server"), "--coordinator", "tcp://10.0.0.1:5", "--rank", "1",
                    "--bind", "tcp://0.0.0.0:0", "--advertise", "10.0.0.2", "--no-metrics", "--cold-dir", c.run_dir]


def test_worker_command_placeholders_and_environment():
    c = commands(config(job={"workers": 4}), worker=["sh", "-c", "train {rank}/{workers} at {coordinator}"])
    argv, env = c.worker(3, "n1", "tcp://10.0.0.1:7100")
    assert argv == ["sh", "-c", "train 3/4 at tcp://10.0.0.1:7100"]
    assert env == {"SHARDPS_COORDINATOR": "tcp://10.0.0.1:7100", "SHARDPS_RANK": "3", "SHARDPS_WORKERS": "4"}


def test_shardps_worker_gets_the_metrics_settings_unless_its_command_has_its_own():
    worker = ["/opt/bin/shardps-worker", "--rank", "{rank}"]
    c = commands(config(job={"servers": 2, "workers": 4}, metrics={"port": 9100, "address": "10.0.0.9"}), worker=worker)
    assert c.worker(3, "n1", "tcp://x:1")[0] == ["/opt/bin/shardps-worker", "--rank", "3", "--metrics-port", "9106",
                                                  "--metrics-address", "10.0.0.9"]
    assert commands(config(), worker=worker).worker(0, "n1", "tcp://x:1")[0][-2:] == ["--metrics-port", "0"]
    assert commands(config(metrics={"enabled": False}), worker=worker).worker(0, "n1", "tcp://x:1")[0][-1] == "--no-metrics"
    own = worker + ["--metrics-port=7000"]
    assert commands(config(), worker=own).worker(1, "n1", "tcp://x:1")[0] == [own[0], "--rank", "1", "--metrics-port=7000"]
    assert commands(config(), worker=["python3", "train.py"]).worker(0, "n1", "tcp://x:1")[0] == ["python3", "train.py"]


def test_security_every_role_gets_its_key():
    got = []

    def key_paths(host, names):  # the launcher copies them there over ssh; here: where they would be
        got.append((host, tuple(names)))
        return {n: f"/remote/{host}/{n}" for n in names}
    c = commands(config(), keys="/keys", key_paths=key_paths)
    assert c.server(0, "h2", "10.0.0.2", "tcp://x:1")[-4:] == ["--key", "/remote/h2/server.key",
                                                               "--access", "/remote/h2/access"]
    assert c.coordinator("h1", "10.0.0.1", None)[-4:] == ["--key", "/remote/h1/server.key",
                                                          "--access", "/remote/h1/access"]
    assert c.worker(0, "h3", "tcp://x:1")[1]["SHARDPS_KEY"] == "/remote/h3/worker.key"
    assert got == [("h2", ("server.key", "access")), ("h1", ("server.key", "access")), ("h3", ("worker.key",))]
    assert commands(config(), keys="/keys").worker(0, "localhost", "tcp://x:1")[1]["SHARDPS_KEY"] == "/keys/worker.key"


def test_security_is_on_across_hosts_unless_turned_off():
    # A job across hosts has security on (the launcher makes the keys) unless
    # told not to; a local job has it when asked; given keys are used anywhere.
    for mode in ("ssh", "slurm"):
        assert security.plan(config(launch={"mode": mode})) == "make"
        assert security.plan(config(launch={"mode": mode}, security={"enabled": False})) == "off"
    assert security.plan(config()) == "off"
    assert security.plan(config(security={"enabled": True})) == "make"
    assert security.plan(config(launch={"mode": "ssh"}, security={"keys": "/k"})) == "given"
    args, _ = parse_args(["--no-security"])
    assert "security.enabled=false" in overrides(args)
    # shardps-keygen is needed here (only) when the launcher makes the keys.
    needs, remote = job_needs(dict(config()["launch"], mode="ssh"), ["train"], make_keys=True)
    assert "shardps-keygen" in needs and "shardps-keygen" not in remote
    warning = security.exposed_warning(["root@10.0.0.2", "root@10.0.0.3"])
    assert "(root@10.0.0.2, root@10.0.0.3)" in warning and "read the whole model" in warning, warning


def test_environment_of_every_process():
    c = commands(config(launch={"env": {"OMP_NUM_THREADS": "1", "SHARDPS_KEY": "no"}}))
    assert c.env_for({"SHARDPS_RANK": "1"}) == {
        "SHARDPS_DIE_WITH_PARENT": "1", "SHARDPS_RUN_DIR": "/runs/r1", "SHARDPS_LAUNCH_CWD": "/home/me",
        "SHARDPS_KEY": "no", "OMP_NUM_THREADS": "1", "SHARDPS_RANK": "1"}
    assert commands(config()).env_for()["SHARDPS_KEY"] == ""  # the launcher's own key is not passed on
    assert worker_path(config(launch={"env": {"PATH": "/opt/x"}})["launch"], {"PATH": "/usr/bin"}) == "/opt/x"
    assert worker_path(config()["launch"], {"PATH": "/usr/bin:/bin"}) == "/usr/bin:/bin"


def test_how_a_command_runs_on_its_host():
    argv = ["/opt/shardps/bin/shardps-server", "--rank", "0"]
    full, env = commands(config()).command_for("server", 0, "localhost", argv, {"A": "1"})
    assert full == argv and env["A"] == "1" and env["SHARDPS_RUN_DIR"] == "/runs/r1"

    full, env = commands(config(launch={"mode": "ssh", "ssh_options": ["-p", "2222"]})).command_for(
        "server", 0, "root@h2", argv, {"A": "it's"})
    assert env == {}
    assert full[:-2] == ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10", "-o", "ServerAliveInterval=5",
                         "-o", "ServerAliveCountMax=3", "-p", "2222"] and full[-2] == "root@h2"
    remote = full[-1]
    assert remote.startswith("SHARDPS_DIE_WITH_PARENT=1 SHARDPS_RUN_DIR=/runs/r1 ")
    assert "A='it'\"'\"'s' exec sh -c " in remote and "setsid \"$@\"" in REMOTE_WRAPPER
    assert remote.endswith(" shardps-remote /opt/shardps/bin/shardps-server --rank 0")

    full, env = commands(config(launch={"mode": "slurm", "srun_options": ["--cpu-bind=none"]})).command_for(
        "worker", 3, "node2", ["train"], {})
    assert full == ["srun", "--overlap", "--nodes=1", "--ntasks=1", "--nodelist=node2", "--kill-on-bad-exit=0",
                    "--unbuffered", "--export=ALL", "--job-name=shardps-worker3", "--cpu-bind=none", "train"]
    assert env["SHARDPS_DIE_WITH_PARENT"] == "1"


def test_a_restarted_coordinator_binds_the_old_endpoints_port():
    argv = ["c", "--bind", "tcp://0.0.0.0:0", "--advertise", "10.0.0.1", "--set", "x=tcp://y:1"]
    assert on_endpoint(argv, "tcp://10.0.0.1:40123") == ["c", "--bind", "tcp://0.0.0.0:40123", "--advertise",
                                                           "10.0.0.1", "--set", "x=tcp://y:1"]


@pytest.mark.parametrize("line,endpoint", [
    ("03:11:11.191 I [coordinator] coordinator on tcp://127.0.0.1:40089: 1 servers, 1 workers, sync",
     "tcp://127.0.0.1:40089"),
    ("I [coordinator] coordinator on tcp://10.0.0.1:7100", "tcp://10.0.0.1:7100"),
    ("I [coordinator] coordinator stopped", None),
    ("I [coordinator] server 0 registered at tcp://127.0.0.1:5", None),
])
def test_the_coordinators_endpoint_line(line, endpoint):
    assert endpoint_in(line) == endpoint


# ------------------------------------------------------------ binaries

def test_what_a_job_needs():
    local = config()["launch"]
    assert job_needs(local, ["train"]) == ({"shardps-coordinator": "it runs the job",
                                            "shardps-server": "the parameter servers"}, set())
    needs, remote = job_needs(dict(local, restart_servers=True), ["shardps-worker"])
    assert set(needs) == {"shardps-coordinator", "shardps-server", "shardps-ctl", "shardps-worker"} and not remote
    assert "--restart-servers" in needs["shardps-ctl"]
    needs, remote = job_needs(dict(local, mode="ssh"), ["shardps-worker"])
    assert set(needs) == {"shardps-coordinator", "shardps-server", "shardps-ctl", "shardps-worker"}
    assert remote == {"shardps-server", "shardps-ctl", "shardps-worker"}
    # The rollback runs shardps-ctl on this machine: it must be here, whatever the mode.
    needs, remote = job_needs(dict(local, mode="slurm", restart_servers=True), ["train"])
    assert "shardps-ctl" in needs and remote == {"shardps-server"}
    # With replicas, a dead server is failed over by shardps-ctl declare-dead, run here.
    needs, remote = job_needs(dict(local, mode="ssh"), ["train"], replicas=2)
    assert "declare-dead" in needs["shardps-ctl"] and remote == {"shardps-server"}
    # A job with snapshots stops itself with shardps-ctl at its end (the final snapshot), here.
    needs, remote = job_needs(dict(local, mode="ssh"), ["train"], snapshots=True)
    assert "final snapshot" in needs["shardps-ctl"] and remote == {"shardps-server"}


def executable(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w") as f:
        f.write("#!/bin/sh\n")
    os.chmod(path, 0o755)
    return path


def test_binaries_in_a_bin_directory_or_a_build_directory(tmp_path):
    d = str(tmp_path)
    coord = executable(f"{d}/shardps-coordinator")  # an installed bin directory
    server = executable(f"{d}/server/shardps-server")  # a build directory
    b = Binaries(d, "/nowhere")
    b.resolve({"shardps-coordinator": "x", "shardps-server": "y"})
    assert b.path("shardps-coordinator") == coord and b.path("shardps-server") == server
    assert b.optional("shardps-ctl") is None


def test_missing_binaries_are_named_with_why_and_where(tmp_path):
    d = str(tmp_path)
    executable(f"{d}/shardps-coordinator")
    b = Binaries(d, "/nowhere")
    with pytest.raises(LaunchError) as e:
        b.resolve({"shardps-coordinator": "it runs the job", "shardps-ctl": "--restart-servers: the rollback",
                   "shardps-worker": "the worker command"})
    assert str(e.value) == (
        "cannot find the binaries this job needs:\n"
        f"  shardps-ctl (--restart-servers: the rollback): looked at {d}/shardps-ctl, {d}/tools/shardps-ctl "
        "(--bin-dir is an installed bin directory or a build directory)\n"
        f"  shardps-worker (the worker command): looked at {d}/shardps-worker, {d}/worker/shardps-worker "
        "(--bin-dir is an installed bin directory or a build directory)")
    with pytest.raises(LaunchError, match=r"^cannot find shardps-server \(servers\): looked at "):
        b.resolve({"shardps-server": "servers"})


def test_binaries_that_run_elsewhere_may_be_missing_here(tmp_path):
    d = str(tmp_path)
    b = Binaries(d, "/nowhere")
    b.resolve({"shardps-server": "servers"}, remote={"shardps-server"})  # the hosts' checks look for it there
    assert b.path("shardps-server") == f"{d}/shardps-server"
    with pytest.raises(LaunchError, match="cannot find shardps-server"):
        Binaries(None, d).resolve({"shardps-server": "servers"}, remote={"shardps-server"})


def test_without_a_bin_dir_the_source_trees_build_then_beside_the_script(tmp_path):
    tree = tmp_path / "src"
    (tree / "tools").mkdir(parents=True)
    (tree / "meson.build").write_text("")
    built = executable(f"{tree}/build/server/shardps-server")
    beside = executable(f"{tree}/tools/shardps-server")
    b = Binaries(None, str(tree / "tools"))
    assert b.candidates("shardps-server") == [built, beside]
    assert b.locate("shardps-server") == built
    os.unlink(built)
    assert b.locate("shardps-server") == beside
    assert b.where_looked("shardps-ctl").endswith(", PATH (build shardps first, or pass --bin-dir)")


def test_a_local_worker_command_must_be_runnable(tmp_path):
    check_worker_command("sh", "/usr/bin:/bin")
    check_worker_command(executable(str(tmp_path / "train")), "")
    check_worker_command("{rank}.sh", "")  # known only at the start
    with pytest.raises(LaunchError, match=r"'no-such-trainer' is not found on PATH"):
        check_worker_command("no-such-trainer", "/usr/bin:/bin")
    with pytest.raises(LaunchError, match=r"'sh' is not found on PATH"):
        check_worker_command("sh", str(tmp_path))
    with pytest.raises(LaunchError, match=r"'./nope' does not exist"):
        check_worker_command("./nope", "")
    (tmp_path / "data.txt").write_text("")
    with pytest.raises(LaunchError, match=r"data.txt' is not an executable file"):
        check_worker_command(str(tmp_path / "data.txt"), "")
    with pytest.raises(LaunchError, match=r"is not an executable file"):
        check_worker_command(str(tmp_path), "")


# ------------------------------------- a job file, through the coordinator

def test_a_job_file_to_its_command_lines(tmp_path):
    job = tmp_path / "job.toml"
    job.write_text('[job]\nservers = 2\nworkers = 3\nserver_memory_mb = 256\n'
                   '[launch]\nserver_ports = "7000-7001"\nserver_cpus = ["0", "1"]\nenv = { OMP_NUM_THREADS = "1" }\n'
                   'worker_command = "train --rank {rank} --of {workers} | tee log{rank}"\n'
                   '[metrics]\nport = 9200\n')
    args, worker = parse_args(["--config", str(job), "--set", "job.consistency=\"async\""])
    cfg = print_config("--config", str(job), *[a for s in overrides(args) for a in ("--set", s)])
    cfg["_sets"] = overrides(args)
    worker = check_job(args, cfg, worker)
    assert worker == ["sh", "-c", "train --rank {rank} --of {workers} | tee log{rank}"]
    c = commands(cfg, worker=worker)
    assert c.coordinator("localhost", "127.0.0.1", str(job)) == [
        bins("shardps-coordinator"), "--bind", "tcp://127.0.0.1:0", "--advertise", "127.0.0.1", "--config", str(job),
        "--set", 'job.consistency="async"', "--metrics-port", "9200", "--metrics-address", "127.0.0.1"]
    assert c.server(1, "localhost", "127.0.0.1", "tcp://127.0.0.1:5") == [
        bins("shardps-server"), "--coordinator", "tcp://127.0.0.1:5", "--rank", "1", "--bind", "tcp://127.0.0.1:7001",
        "--advertise", "127.0.0.1", "--metrics-port", "9202", "--metrics-address", "127.0.0.1", "--cpus", "1",
        "--memory-budget-mb", "256", "--cold-dir", c.run_dir]
    argv, env = c.worker(2, "localhost", "tcp://127.0.0.1:5")
    assert argv == ["sh", "-c", "train --rank 2 --of 3 | tee log2"] and env["SHARDPS_WORKERS"] == "3"
    assert c.env_for(env)["OMP_NUM_THREADS"] == "1"
