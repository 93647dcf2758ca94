"""shardps-launch over ssh, for real: three "hosts" (network namespaces, each
with its own address and its own sshd), the launcher in the first one as a
login node would be. Skips with the reason where namespaces cannot be made."""

import json
import os
import re
import signal

import pytest

from hostenv import netns_hosts_or_skip
from launchlib import CTL, Launch, ctl, make_keys, small_mlp, started_by, wait_none_left, wait_until


@pytest.fixture(scope="module")
def hosts():
    with netns_hosts_or_skip(3) as env:
        yield env


def name(env, h):
    return f"root@{env.address(h)}"


def launch_in_h1(env, run_dir, hosts_lines, *extra, worker=None):
    hosts_file = os.path.join(os.path.dirname(run_dir), "hosts")
    with open(hosts_file, "w") as f:
        f.write("# test hosts\n" + "\n".join(hosts_lines) + "\n")
    args = ["--hosts", hosts_file, "--set", "launch.ssh_options=" + json.dumps(env.ssh_options), *extra,
            "--", *(worker or small_mlp(epochs=2))]
    return Launch(args, run_dir, prefix=env.exec_prefix("h1"))


def three_host_lines(env):
    return [f"{name(env, 'h1')} coordinator servers=1 workers=0",
            f"{name(env, 'h2')} servers=1 workers=1",
            f"{name(env, 'h3')} servers=0 workers=1"]


def test_job_across_three_hosts(hosts, tmp_path):
    """With --etcd local and a standby coordinator: the standby goes on
    another host than the leader, etcd's members on three hosts (theirs
    first)."""
    env = hosts
    run_dir = str(tmp_path / "run")
    launch = launch_in_h1(env, run_dir, three_host_lines(env), "--servers", "2", "--workers", "2",
                          "--etcd", "local", "--standbys", "1")
    coordinator = launch.coordinator(120)
    # The coordinator advertises its host's address, not loopback; servers
    # and workers are given the standby's endpoint too.
    assert re.fullmatch(rf"tcp://{re.escape(env.address('h1'))}:\d+,tcp://{re.escape(env.address('h2'))}:\d+",
                        coordinator), coordinator
    rc = launch.wait(300)
    out = launch.output()
    assert rc == 0, out
    assert re.search(rf"standby coordinators: tcp://{re.escape(env.address('h2'))}:\d+ on {re.escape(name(env, 'h2'))}",
                     out), out
    members = re.search(r"etcd: 3 members serving \((.*)\)", out)
    assert members and [m.rsplit(":", 1)[0] for m in members.group(1).split(", ")] == [
        env.address("h1"), env.address("h2"), env.address("h3")], out  # (one host lost: one member lost)
    assert "hosts checked: " in out, out
    h2, h3 = name(env, "h2"), name(env, "h3")
    assert re.search(rf"^\[worker 0 @{re.escape(h2)}\] worker 0 \| epoch 2 done .* test accuracy", out, re.M), out
    assert re.search(rf"^\[worker 1 @{re.escape(h3)}\] worker 1 \| finished 2 epochs", out, re.M), out
    # Each server advertised the address of its own host.
    log = open(os.path.join(run_dir, "coordinator.log")).read()
    assert f"server 0 registered at tcp://{env.address('h1')}:" in log, log
    assert f"server 1 registered at tcp://{env.address('h2')}:" in log, log
    # Across hosts security is on by default: the launcher made the job's
    # keys (mode 700) and each host got the keys of its processes.
    keys = os.path.join(run_dir, "job-keys")
    assert f"security on: CURVE with the job's own keys, made in {keys} (mode 700)" in out, out
    assert os.stat(keys).st_mode & 0o777 == 0o700
    assert sorted(os.listdir(os.path.join(run_dir, "keys"))) == ["access", "server.key", "worker.key"]
    wait_none_left(run_dir)


def test_security_on_by_default_a_keyless_peer_is_refused_and_the_run_dir_is_enough(hosts, tmp_path):
    env = hosts
    run_dir = str(tmp_path / "run")
    launch = launch_in_h1(env, run_dir, three_host_lines(env), "--servers", "2", "--workers", "2",
                          worker=small_mlp(epochs=500))
    coordinator = launch.coordinator(120)
    launch.wait_for_line(r"worker 1 \| epoch \d+ step", 180)
    # A peer without the job's keys, on another host (h3 runs only a
    # worker): refused during the handshake, told why, and logged.
    p = env.run_in("h3", [CTL, "status", coordinator, "--timeout-sec", "30"], timeout=60)
    assert p.returncode != 0 and "PermissionDenied" in p.stderr and "this client has no key" in p.stderr and \
        "observer.key" in p.stderr, p.stdout + p.stderr

    def refused():
        log = open(os.path.join(run_dir, "coordinator.log")).read()
        return "refused a connection to the coordinator" in log and "security is on in this job" in log
    wait_until(refused, 30, "the coordinator's log line of the refused connection")
    # The operator, where the launcher runs, needs nothing but the run directory.
    p = env.run_in("h1", [CTL, "--run-dir", run_dir, "status"], timeout=60)
    assert p.returncode == 0 and "worker" in p.stdout, p.stdout + p.stderr
    p = env.run_in("h1", [CTL, "--run-dir", run_dir, "stop", "--timeout-sec", "120"], timeout=180)
    assert p.returncode == 0, p.stdout + p.stderr
    assert launch.wait(120) == 0, launch.output()
    wait_none_left(run_dir)


def test_sigterm_stops_every_remote_process(hosts, tmp_path):
    # Also: addresses taken from a named interface (each namespace's eth0).
    env = hosts
    run_dir = str(tmp_path / "run")
    # And --no-security: a warning that names what it exposes; any peer
    # gets in (here the status, without a key).
    launch = launch_in_h1(env, run_dir, three_host_lines(env), "--servers", "2", "--workers", "2",
                          "--interface", "eth0", "--no-security", worker=small_mlp(epochs=500))
    launch.wait_for_line(r"worker 1 \| epoch \d+ step", 180)
    assert f"{name(env, 'h2')} ({env.address('h2')})" in launch.output(), launch.output()
    assert re.search(r"WARNING: security is off \(--no-security.*\) in a job across hosts \(.*\): anyone who can "
                     r"reach the job's ports there can read the whole model", launch.output()), launch.output()
    assert not os.path.exists(os.path.join(run_dir, "job-keys"))
    p = env.run_in("h3", [CTL, "status", launch.coordinator(), "--timeout-sec", "30"], timeout=60)
    assert p.returncode == 0, p.stdout + p.stderr
    rc, out = ctl("status", launch.coordinator(), "--json") if env.root_reachable else (0, "")
    if out:
        st = json.loads(out)
        hostnames = {(p["role"], p["rank"]): p for p in st["processes"]}
        assert hostnames[("server", 1)]["metrics_url"].startswith(f"http://{env.address('h2')}:"), st
    launch.signal(signal.SIGTERM)
    assert launch.wait(60) == 128 + signal.SIGTERM, launch.output()
    wait_none_left(run_dir)


def test_killed_launcher_leaves_no_remote_process(hosts, tmp_path):
    env = hosts
    run_dir = str(tmp_path / "run")
    launch = launch_in_h1(env, run_dir, three_host_lines(env), "--servers", "2", "--workers", "2",
                          worker=small_mlp(epochs=500))
    launch.wait_for_line(r"worker 0 \| epoch \d+ step", 180)
    assert started_by(run_dir)
    os.kill(launch.p.pid, signal.SIGKILL)
    launch.wait(10)
    wait_none_left(run_dir)


def test_host_whose_sshd_is_down_is_named_before_training(hosts, tmp_path):
    env = hosts
    run_dir = str(tmp_path / "run")
    env.stop_sshd("h3")
    try:
        launch = launch_in_h1(env, run_dir, three_host_lines(env), "--servers", "2", "--workers", "2")
        rc = launch.wait(120)
    finally:
        env.start_sshd("h3")
    out = launch.output()
    assert rc == 2, out
    assert f"host {name(env, 'h3')}: ssh does not answer" in out, out
    assert "coordinator tcp://" not in out, out  # nothing started
    wait_none_left(run_dir)


def test_host_whose_address_is_unreachable_is_named_before_training(hosts, tmp_path):
    env = hosts
    run_dir = str(tmp_path / "run")
    bad = env.add_unreachable_address("h3")
    lines = three_host_lines(env)
    lines[2] = f"{name(env, 'h3')} address={bad} servers=0 workers=1"
    launch = launch_in_h1(env, run_dir, lines, "--servers", "2", "--workers", "2")
    rc = launch.wait(120)
    out = launch.output()
    assert rc == 2, out
    assert re.search(rf"host {re.escape(name(env, 'h3'))}: its address {re.escape(bad)} cannot be reached from host", out), out
    assert "coordinator tcp://" not in out, out
    wait_none_left(run_dir)


def test_security_keys_travel_to_each_host(hosts, tmp_path):
    env = hosts
    keys = make_keys(str(tmp_path / "keys"))
    run_dir = str(tmp_path / "run")
    launch = launch_in_h1(env, run_dir, three_host_lines(env), "--servers", "2", "--workers", "2", "--keys", keys)
    rc = launch.wait(300)
    out = launch.output()
    assert rc == 0, out
    assert re.search(r"worker 0 \| epoch 2 done .* test accuracy", out), out
    # The keys each host needs were copied into the run directory (mode
    # 600); the admin and observer keys stay with the launcher.
    copied = sorted(os.listdir(os.path.join(run_dir, "keys")))
    assert copied == ["access", "server.key", "worker.key"], copied
    assert os.stat(os.path.join(run_dir, "keys", "worker.key")).st_mode & 0o777 == 0o600
    wait_none_left(run_dir)
