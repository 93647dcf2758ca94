"""A job's coordinators when its state lives in etcd: the leader and its
standbys ([coordinator] standbys, --standbys), each on a fixed endpoint
that every server, worker and tool is given up front; and the etcd they
keep the state in ([launch] etcd, --etcd): "local" starts a 3-member
cluster for the job (Debian's etcd, its data in the run directory),
HOST:PORT,... uses one that runs already (checked before anything
starts). See docs/fault-tolerance.md, "Standby coordinators"."""

import os
import random
import secrets
import shlex
import shutil
import threading
import time
import urllib.request

from .commands import json_set
from .errors import JobFailed, LaunchError
from .output import say
from .supervise import stop_watcher

ETCD_READY_SEC = 30  # for a started cluster to elect a leader and serve
ETCD_MEMBERS = 3  # --etcd local: a majority survives one member lost
# Fixed ports come from below Linux's ephemeral range (32768-60999), so that
# no outgoing connection holds one when its process binds it.
PORT_RANGE = (20000, 32767)


def ports_in_use(text):
    """The local ports of every socket in /proc/net/tcp{,6} text."""
    used = set()
    for line in text.splitlines():
        fields = line.split()
        if len(fields) > 2 and ":" in fields[1] and fields[0].rstrip(":").isdigit():
            try:
                used.add(int(fields[1].rsplit(":", 1)[1], 16))
            except ValueError:
                pass
    return used


def pick_ports(remote, host, n, local, taken=()):
    """`n` distinct TCP ports no socket on `host` uses now (read from its
    /proc/net/tcp and tcp6: here, or through `remote`), none of `taken`."""
    if local:
        text = ""
        for name in ("/proc/net/tcp", "/proc/net/tcp6"):
            try:
                with open(name) as f:
                    text += f.read()
            except OSError:
                pass
    else:
        rc, text = remote.run_on(host, "cat /proc/net/tcp /proc/net/tcp6 2>/dev/null", timeout=20)
        if rc != 0 and not text:
            raise LaunchError(f"host {host}: cannot read its ports in use (/proc/net/tcp): exit {rc}")
    used = ports_in_use(text) | set(taken)
    free = [p for p in range(PORT_RANGE[0], PORT_RANGE[1] + 1) if p not in used]
    if len(free) < n:
        raise LaunchError(f"host {host}: fewer than {n} free ports in {PORT_RANGE[0]}-{PORT_RANGE[1]}")
    return random.SystemRandom().sample(free, n)


class PortPicker:
    """Ports for one launch, per host, never the same one twice (etcd's
    members and the coordinators draw from it). Main thread."""

    def __init__(self, remote, local, dry_run):
        self.remote, self.local, self.dry_run = remote, local, dry_run
        self.given = {}  # host -> ports handed out

    def pick(self, host, n):
        if self.dry_run:
            ports = [f"<port {len(self.given.get(host, [])) + j}>" for j in range(n)]
        else:
            ports = pick_ports(self.remote, host, n, self.local, self.given.get(host, ()))
        self.given.setdefault(host, []).extend(ports)
        return ports


def member_hosts(coords, used):
    """The hosts of etcd's members: the coordinators' hosts, then the job's
    other hosts, each once while there are enough (so that losing one host
    loses one member); with fewer than three hosts, in turn again."""
    distinct = []
    for h in list(coords) + list(used):
        if h["name"] not in [d["name"] for d in distinct]:
            distinct.append(h)
    return [distinct[i % len(distinct)] for i in range(ETCD_MEMBERS)]


def coordinator_hosts(hosts, leader, n):
    """The hosts of `n` coordinators: the leader's first, then the standbys
    on other hosts than the leader's while there are any (round-robin), on
    the leader's own only when it is the only host."""
    others = [h for h in hosts if h is not leader] or [leader]
    return [leader] + [others[i % len(others)] for i in range(n - 1)]


def endpoint_reachable(endpoint, seconds=3):
    """'' when etcd answers at HOST:PORT (its /version), else why not."""
    try:
        with urllib.request.urlopen(f"http://{endpoint}/version", timeout=seconds) as r:
            body = r.read(4096).decode(errors="replace")
        return "" if "etcdserver" in body else f"{endpoint} answers, but not as etcd ({body[:80]!r})"
    except OSError as e:
        return f"{endpoint}: {getattr(e, 'reason', None) or e}"


class Etcd:
    """The etcd cluster of one launch: the one given, or the members this
    launch starts (`local`). Main thread only (the members' reader threads
    only set events)."""

    def __init__(self, spec, run_dir, name):
        self.local = spec == "local"
        self.endpoints = [] if self.local else [e.strip() for e in spec.split(",") if e.strip()]
        # The job's keys go under a prefix of its own: jobs sharing a cluster
        # never see each other's state.
        self.token = secrets.token_hex(4)
        self.prefix = f"shardps/{name}-{self.token}"
        self.run_dir = run_dir
        self.members = []  # (name, host, address, client port, peer port)

    def url(self):
        return "etcd://" + ",".join(self.endpoints) + "/" + self.prefix

    def describe(self):
        return {"endpoints": self.endpoints, "prefix": self.prefix, "started_by_launcher": self.local}

    def plan(self, hosts, addr, ports):
        """Where the members of `--etcd local` go: on `hosts` (member_hosts),
        each with a client and a peer port free there (`ports`, a
        PortPicker); loopback for a local job."""
        for i, h in enumerate(hosts):
            client, peer = ports.pick(h["name"], 2)
            self.members.append((f"m{i}", h["name"], addr[h["name"]], client, peer))
        self.endpoints = [f"{a}:{c}" for _, _, a, c, _ in self.members]

    def data_dir(self, name):
        """A member's data: new for each launch (in a reused run directory,
        an old member's data would make etcd ignore the new cluster)."""
        return os.path.join(self.run_dir, "etcd", self.token, name)

    def member_argv(self, i, etcd_bin):
        name, _, address, client, peer = self.members[i]
        cluster = ",".join(f"{n}=http://{a}:{p}" for n, _, a, _, p in self.members)
        return [etcd_bin, "--name", name, "--data-dir", self.data_dir(name),
                "--listen-client-urls", f"http://{address}:{client}", "--advertise-client-urls",
                f"http://{address}:{client}", "--listen-peer-urls", f"http://{address}:{peer}",
                "--initial-advertise-peer-urls", f"http://{address}:{peer}", "--initial-cluster", cluster,
                "--initial-cluster-state", "new", "--initial-cluster-token", self.prefix]

    def start(self, processes, etcd_bin, dry_run):
        """Starts the members and waits (at most ETCD_READY_SEC) until each
        serves: its 'ready to serve client requests' line, which etcd prints
        once the cluster has elected a leader. Raises JobFailed naming a
        member that exited or did not get there."""
        ready = [threading.Event() for _ in self.members]
        procs = []
        for i, (name, host, _, _, _) in enumerate(self.members):
            def watch(line, ev=ready[i]):
                if "ready to serve client requests" in line:
                    ev.set()
            procs.append(processes.start("etcd", i, host, self.member_argv(i, etcd_bin), {}, watchers=[watch]))
        if dry_run:
            return
        t0 = time.monotonic()
        while not all(ev.is_set() for ev in ready):
            for i, p in enumerate(procs):
                if p.poll() is not None:
                    p.reader.join(timeout=2)
                    last = (p.last_lines() or ["(no output)"])[-1]
                    raise JobFailed(p, f"etcd member {self.members[i][0]} on {self.members[i][1]} "
                                       f"{p.describe_exit()} before it served: {last}")
            if time.monotonic() - t0 > ETCD_READY_SEC:
                slow = [i for i, ev in enumerate(ready) if not ev.is_set()]
                raise JobFailed(procs[slow[0]], f"etcd members {', '.join(self.members[i][0] for i in slow)} did not "
                                                f"serve within {ETCD_READY_SEC} s")
            time.sleep(0.05)
        say(f"etcd: {len(self.members)} members serving ({', '.join(self.endpoints)}) in "
            f"{time.monotonic() - t0:.1f} s; the job's state under {self.prefix}")

    def check(self, remote, mode, hosts):
        """Pre-flight of a given cluster, from each coordinator host (here
        for a local job): a member that does not answer is named; none
        answering from a host fails the launch."""
        if mode == "local":
            problems = [w for w in (endpoint_reachable(e) for e in self.endpoints) if w]
            if len(problems) == len(self.endpoints):
                raise LaunchError("etcd cannot be reached: " + "; ".join(problems))
            for w in problems:
                say(f"etcd: a member does not answer ({w}); the job goes on with the others", err=True)
            return
        for h in {h["name"]: h for h in hosts}:
            probes = []
            for e in self.endpoints:
                host, port = e.rsplit(":", 1)
                probe = shlex.quote(f"exec 3<>/dev/tcp/{host}/{port}")
                probes.append(f"timeout 5 bash -c {probe} 2>/dev/null || echo unreachable {shlex.quote(e)}")
            script = "; ".join(probes)
            rc, out = remote.run_on(h, script, timeout=30)
            bad = [l.split(" ", 1)[1] for l in out.splitlines() if l.startswith("unreachable ")]
            if rc != 0 and not bad:
                raise LaunchError(f"host {h}: cannot check etcd from there: {out or 'exit ' + str(rc)}")
            if len(bad) == len(self.endpoints):
                raise LaunchError(f"host {h}: etcd cannot be reached from there ({', '.join(bad)})")
            for e in bad:
                say(f"etcd: member {e} does not answer from {h}; the job goes on with the others", err=True)


def etcd_binary(mode):
    """Debian's etcd (etcd-server), here; the same path on other hosts."""
    path = shutil.which("etcd") or "/usr/bin/etcd"
    if mode == "local" and not os.access(path, os.X_OK):
        raise LaunchError("--etcd local starts etcd, which is not installed here (Debian: apt-get install "
                          "etcd-server)")
    return path


def check_etcd_installed(remote, hosts, etcd_bin):
    """Over ssh/Slurm: etcd is where --etcd local starts its members."""
    for name in sorted({h["name"] for h in hosts}):
        rc, out = remote.run_on(name, f"test -x {shlex.quote(etcd_bin)} && echo shardps-ok", timeout=20)
        if "shardps-ok" not in out:
            raise LaunchError(f"host {name}: --etcd local starts an etcd member there, but {etcd_bin} is not "
                              f"installed (Debian: apt-get install etcd-server){'' if rc in (0, 1) else ': ' + out}")


def given_etcd(state_dir):
    """job.json's `etcd` for a job whose state the user put in an etcd of
    their own ([coordinator] store or [job] state_dir = etcd://HOST:PORT[,
    HOST:PORT...]/PREFIX): its endpoints and prefix, not started by the
    launcher; None for a state directory."""
    if not state_dir.startswith("etcd://"):
        return None
    hosts, _, prefix = state_dir[len("etcd://"):].partition("/")
    return {"endpoints": hosts.split(","), "prefix": prefix, "started_by_launcher": False}


def start_etcd(launcher, coords, used, addr):
    """[launch] etcd of `launcher` (a Launcher): starts the job's cluster
    (local) on the coordinators' hosts `coords` and then the other `used`
    ones, or checks the one given; then the coordinators keep the job's
    state there (under a prefix of the job's own: `coordinator.store`, in
    place of [launch] etcd for them)."""
    etcd, dry_run = launcher.etcd, launcher.args.dry_run
    if not etcd:  # the user's own etcd ([coordinator] store), if any: job.json names it too
        given = given_etcd(launcher.job.get("state_dir") or "")
        if given and launcher.files:
            launcher.files.etcd = given
        return
    if etcd.local:
        hosts = member_hosts(coords, used)
        etcd_bin = etcd_binary(launcher.mode)
        if launcher.mode != "local" and not dry_run:
            check_etcd_installed(launcher.remote, hosts, etcd_bin)
        etcd.plan(hosts, addr, launcher.ports)
        etcd.start(launcher.processes, etcd_bin, dry_run)
    elif not dry_run:
        etcd.check(launcher.remote, launcher.mode, coords)
    launcher.cfg["_sets"] += [json_set("launch.etcd", ""), json_set("coordinator.store", etcd.url())]
    if launcher.files:
        launcher.files.etcd = etcd.describe()


def start_coordinators(launcher, coords, addr):
    """The coordinator on `coords[0]`; with its state in etcd, on a fixed
    endpoint, and its standbys (--standby) on the other hosts of `coords`,
    on theirs: each waits to lead, binding nothing meanwhile. Returns every
    endpoint, the leader's first, as one comma-separated list (what
    servers, workers and tools are given)."""
    if not launcher.etcd and not launcher.standbys:
        return launcher.start_coordinator(coords[0], addr)
    fixed = launcher.launch["coordinator_port"]
    ports = [fixed + i if fixed else launcher.ports.pick(h["name"], 1)[0] for i, h in enumerate(coords)]
    endpoints = [f"tcp://{addr[h['name']]}:{ports[i]}" for i, h in enumerate(coords)]
    listed = ",".join(endpoints)
    launcher.start_coordinator(coords[0], addr, port=ports[0], all_endpoints=listed)
    for i, h in enumerate(coords[1:], 1):
        argv = launcher.commands.coordinator(h["name"], addr[h["name"]], launcher.job_file_for(h["name"]),
                                             port=ports[i], standby=True)
        p = launcher.processes.start("coordinator", i, h["name"], argv, {},
                                     watchers=[stop_watcher(launcher.stop_requested)])
        if p:
            p.endpoint = endpoints[i]
    if launcher.standbys:
        where = [f"{e} on {h['name']}" for e, h in zip(endpoints[1:], coords[1:])]
        say(f"standby coordinators: {', '.join(where)}")
    return listed
