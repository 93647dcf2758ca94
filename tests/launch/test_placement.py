"""Unit tests of the launcher's placement (tools/shardps_launch/placement.py):
hosts files, Slurm node lists, and which host runs the coordinator, each
server and each worker. Nothing is started."""

import os
import sys

import pytest

from launchlib import ROOT

sys.path.insert(0, os.path.join(ROOT, "tools"))
from shardps_launch.errors import LaunchError  # noqa: E402
from shardps_launch.placement import (dry_run_addresses, expand_hostlist, job_hosts, parse_hosts_file,  # noqa: E402
                                      place, used_hosts)


def host(name, coordinator=False, servers=-1, workers=-1, address=""):
    return {"name": name, "address": address, "coordinator": coordinator, "servers": servers, "workers": workers}


def names(hosts):
    return [h["name"] for h in hosts]


def write(tmp_path, text, name="hosts"):
    path = tmp_path / name
    path.write_text(text) if isinstance(text, str) else path.write_bytes(text)
    return str(path)


# ------------------------------------------------------------- hosts files

def test_hosts_file_every_field_and_comments(tmp_path):
    path = write(tmp_path, "# the cluster\n\ntrain@node1 coordinator servers=1 workers=0  # the login node\n"
                           "node2 address=10.0.0.2 servers=1 workers=2\n   node3\n")
    assert parse_hosts_file(path) == [
        host("train@node1", coordinator=True, servers=1, workers=0),
        host("node2", servers=1, workers=2, address="10.0.0.2"),
        host("node3"),
    ]


@pytest.mark.parametrize("text,expected", [
    ("a\nb gpus=2\n", r"hosts:2: 'gpus=2' is not one of address=ADDR, coordinator, servers=N, workers=N"),
    ("a servers=two\n", r"hosts:1: 'servers=two' is not one of"),
    ("a servers=-1\n", r"hosts:1: 'servers=-1' is not one of"),
    ("a address=\n", r"hosts:1: 'address=' is not one of"),
    ("a coordinator=yes\n", r"hosts:1: 'coordinator=yes' is not one of"),
    ("# nothing\n\n", r"hosts file '.*hosts' lists no host"),
    (b"node1\n\xff\xfe\n", r"hosts file '.*hosts' is not text \(UTF-8\)"),
])
def test_hosts_file_errors_name_the_line(tmp_path, text, expected):
    with pytest.raises(LaunchError, match=expected):
        parse_hosts_file(write(tmp_path, text))


def test_missing_hosts_file(tmp_path):
    with pytest.raises(LaunchError, match=r"cannot read hosts file '.*/none': No such file or directory"):
        parse_hosts_file(str(tmp_path / "none"))


# -------------------------------------------------------------- placement

def test_one_host_runs_everything():
    h = host("localhost", coordinator=True)
    p = place([h], 2, 3)
    assert p.coordinator is h and p.servers == [h, h] and p.workers == [h, h, h]
    assert used_hosts(p) == [h]


def test_coordinator_on_the_marked_host_else_the_first():
    a, b, c = host("a"), host("b", coordinator=True), host("c")
    assert place([a, b, c], 1, 1).coordinator is b
    assert place([a, host("b"), c], 1, 1).coordinator is a


def test_counts_first_then_round_robin_over_the_hosts_without_one():
    a = host("a", coordinator=True, servers=1, workers=0)
    b = host("b", servers=1, workers=2)
    c, d = host("c"), host("d")
    p = place([a, b, c, d], 4, 5)
    assert names(p.servers) == ["a", "b", "c", "d"]
    assert names(p.workers) == ["b", "b", "c", "d", "c"]
    # The coordinator's host first, then in the order of the ranks.
    assert names(used_hosts(p)) == ["a", "b", "c", "d"]


def test_round_robin_starts_again_at_the_first_free_host():
    hosts = [host("n1"), host("n2"), host("gpu07")]
    p = place(hosts, 2, 4)
    assert names(p.servers) == ["n1", "n2"]
    assert names(p.workers) == ["n1", "n2", "gpu07", "n1"]


def test_used_hosts_leaves_out_a_host_with_nothing_to_run():
    a, b, c = host("a", workers=0, servers=0), host("b"), host("c", servers=0, workers=0)
    p = place([a, b, c], 2, 2)
    assert p.coordinator is a and names(p.servers) == ["b", "b"] and names(p.workers) == ["b", "b"]
    assert names(used_hosts(p)) == ["a", "b"]


def test_exact_counts_need_no_free_host():
    a, b = host("a", servers=1, workers=1), host("b", servers=1, workers=1)
    p = place([a, b], 2, 2)
    assert names(p.servers) == ["a", "b"] and names(p.workers) == ["a", "b"]


@pytest.mark.parametrize("hosts,servers,workers,expected", [
    ([host("a", servers=2), host("b", servers=1)], 2, 1, r"the hosts ask for 3 servers, the job has 2"),
    ([host("a", workers=3)], 1, 2, r"the hosts ask for 3 workers, the job has 2"),
    ([host("a", servers=1), host("b", servers=0)], 2, 1,
     r"the hosts take 1 servers but the job has 2: give a host more, or leave its count out"),
    ([host("a", servers=1, workers=1)], 1, 4, r"the hosts take 1 workers but the job has 4"),
])
def test_counts_that_do_not_add_up(hosts, servers, workers, expected):
    with pytest.raises(LaunchError, match=expected):
        place(hosts, servers, workers)


def test_dry_run_addresses_given_advertised_or_a_placeholder():
    a, b, c = host("a", coordinator=True), host("b", address="10.0.0.2"), host("c")
    assert dry_run_addresses([a, b, c], a, "192.168.1.1") == {"a": "192.168.1.1", "b": "10.0.0.2", "c": "<address of c>"}
    assert dry_run_addresses([a, c], a, "") == {"a": "<address of a>", "c": "<address of c>"}


# ---------------------------------------------------------- hosts by mode

def test_local_mode_is_this_machine_whatever_the_hosts_say():
    assert job_hosts("local", "/nonexistent", [host("x")], {}) == [host("localhost", coordinator=True,
                                                                        address="127.0.0.1")]


def test_ssh_mode_hosts_file_before_the_job_files_hosts(tmp_path):
    path = write(tmp_path, "f1\nf2 coordinator\n")
    assert names(job_hosts("ssh", path, [host("j1")], {})) == ["f1", "f2"]
    assert names(job_hosts("ssh", None, [host("j1"), host("j2")], {})) == ["j1", "j2"]
    with pytest.raises(LaunchError, match=r"ssh mode needs hosts: --hosts FILE or \[launch\] hosts"):
        job_hosts("ssh", None, [], {})


@pytest.fixture
def srun_on_path(tmp_path, monkeypatch):
    """An executable named srun on PATH (job_hosts only looks for it)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    srun = bin_dir / "srun"
    srun.write_text("#!/bin/sh\nexit 1\n")
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", str(bin_dir))


def test_slurm_mode_the_allocations_nodes(srun_on_path):
    env = {"SLURM_JOB_ID": "42", "SLURM_JOB_NODELIST": "node[1-2],gpu07"}
    hosts = job_hosts("slurm", None, [], env)
    assert names(hosts) == ["node1", "node2", "gpu07"]
    assert all(h["address"] == "" and not h["coordinator"] and h["servers"] == h["workers"] == -1 for h in hosts)
    # The older variable, as some Slurm versions set only it.
    assert names(job_hosts("slurm", None, [], {"SLURM_JOB_ID": "1", "SLURM_NODELIST": "c[7-8]"})) == ["c7", "c8"]


@pytest.mark.parametrize("env,expected", [
    ({}, r"inside a Slurm allocation \(salloc or sbatch\): SLURM_JOB_ID is not set"),
    ({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": ""}, r"the allocation lists no node"),
    ({"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n[1-2"},
     r"cannot read the allocation's node list SLURM_JOB_NODELIST='n\[1-2': unbalanced '\['"),
])
def test_slurm_mode_errors(srun_on_path, env, expected):
    with pytest.raises(LaunchError, match=expected):
        job_hosts("slurm", None, [], env)


def test_slurm_mode_needs_srun(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(LaunchError, match="--slurm needs srun on PATH"):
        job_hosts("slurm", None, [], {"SLURM_JOB_ID": "1", "SLURM_JOB_NODELIST": "n1"})


# ------------------------------------------------------ Slurm node lists

@pytest.mark.parametrize("spec,expected", [
    ("n1", ["n1"]),
    ("n[1-3,7]", ["n1", "n2", "n3", "n7"]),
    ("gpu[01-02]-a", ["gpu01-a", "gpu02-a"]),
    ("n[1-3,7],gpu[01-02]-a", ["n1", "n2", "n3", "n7", "gpu01-a", "gpu02-a"]),
    ("rack[1-2]-n[1-2]", ["rack1-n1", "rack1-n2", "rack2-n1", "rack2-n2"]),
    ("n[08-10]", ["n08", "n09", "n10"]),
    ("a, b", ["a", "b"]),
    ("", []),
])
def test_expand_hostlist(spec, expected):
    assert expand_hostlist(spec) == expected


@pytest.mark.parametrize("spec,expected", [
    ("n[1-2", r"unbalanced '\['"),
    ("n1-2]", r"unbalanced '\]'"),
    ("n[a-b]", r"'a-b' is not N or N-M"),
    ("n[1-x]", r"'1-x' is not N or N-M"),
])
def test_expand_hostlist_errors(spec, expected):
    with pytest.raises(ValueError, match=expected):
        expand_hostlist(spec)


# ------------------------------------------------ standbys and their etcd

def test_standbys_go_on_other_hosts_than_the_leader():
    from shardps_launch.coordinators import coordinator_hosts
    a, b, c = host("a"), host("b", coordinator=True), host("c")
    assert names(coordinator_hosts([a, b, c], b, 1)) == ["b"]
    assert names(coordinator_hosts([a, b, c], b, 3)) == ["b", "a", "c"]
    assert names(coordinator_hosts([a, b, c], b, 4)) == ["b", "a", "c", "a"]
    assert names(coordinator_hosts([b], b, 3)) == ["b", "b", "b"]  # one host: all there


def test_ports_in_use_read_from_proc_net_tcp():
    from shardps_launch.coordinators import ports_in_use
    text = ("  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode\n"
            "   0: 0100007F:4E21 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 1 1\n"
            "   1: 00000000:0016 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0        0 2 1\n"
            "   0: 00000000000000000000000001000000:7531 00000000000000000000000000000000:0000 0A 0\n")
    assert ports_in_use(text) == {0x4E21, 22, 0x7531}


def test_etcd_local_members_on_the_coordinators_hosts_under_a_prefix_of_the_job(tmp_path):
    from shardps_launch.coordinators import Etcd, PORT_RANGE, PortPicker, member_hosts
    e = Etcd("local", str(tmp_path), "run")
    lh = host("localhost")
    e.plan(member_hosts([lh], [lh]), {"localhost": "127.0.0.1"}, PortPicker(None, True, False))
    assert len(e.endpoints) == 3 and all(ep.startswith("127.0.0.1:") for ep in e.endpoints)
    ports = [int(ep.rsplit(":", 1)[1]) for ep in e.endpoints] + [m[4] for m in e.members]
    assert len(set(ports)) == 6 and all(PORT_RANGE[0] <= p <= PORT_RANGE[1] for p in ports)
    assert e.url().startswith("etcd://" + ",".join(e.endpoints) + "/shardps/run-")
    argv = e.member_argv(1, "/usr/bin/etcd")
    assert argv[:3] == ["/usr/bin/etcd", "--name", "m1"]
    assert argv[argv.index("--data-dir") + 1] == str(tmp_path / "etcd" / e.token / "m1")  # new for each launch
    assert argv[argv.index("--initial-cluster") + 1].count("=http://127.0.0.1:") == 3
    assert Etcd("local", str(tmp_path), "run").prefix != e.prefix  # each launch its own
    given = Etcd("10.0.0.1:2379, 10.0.0.2:2379", str(tmp_path), "job")
    assert given.url().startswith("etcd://10.0.0.1:2379,10.0.0.2:2379/shardps/job-")


def test_etcd_members_go_on_three_hosts_where_there_are_three():
    from shardps_launch.coordinators import member_hosts
    a, b, c = host("a"), host("b"), host("c")
    assert names(member_hosts([a, b], [a, b, c])) == ["a", "b", "c"]
    assert names(member_hosts([a, a], [a, b])) == ["a", "b", "a"]
    assert names(member_hosts([a], [a])) == ["a", "a", "a"]


def test_ports_are_never_given_twice_on_a_host():
    from shardps_launch.coordinators import PortPicker
    p = PortPicker(None, True, False)
    got = p.pick("localhost", 40) + p.pick("localhost", 40)
    assert len(set(got)) == 80
    dry = PortPicker(None, True, True)
    assert dry.pick("h", 2) == ["<port 0>", "<port 1>"] and dry.pick("h", 1) == ["<port 2>"]
