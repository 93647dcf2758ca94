"""Throwaway multi-host and Slurm environments for testing the launcher.

Two context managers, both for root on a Linux (Debian 12) machine:

``NetnsHosts(n=3)``
    ``n`` "hosts", each a network namespace with its own address on a veth
    pair joined by a bridge in the root namespace, each running Debian's
    ``sshd`` with throwaway host/user keys.  All namespaces share the file
    system, so one build tree is "installed" on every host.

    Addressing: each run takes a *slot* K (an fcntl lock on
    ``/tmp/shardps-hostenv-netns-K.lock``, held for the run's lifetime, so
    concurrent runs on one machine never share addresses or names) and uses
    ``198.18.K.0/24`` (RFC 2544 benchmarking range): bridge ``198.18.K.1``,
    host ``hI`` = ``198.18.K.(10+I)``.  Slots whose subnet overlaps any
    address or route already on the machine are skipped.  Leftovers of a
    crashed run in the same slot are removed when the slot is taken.

    Reachability: the namespaces reach each other.  On the machines seen so
    far the root namespace reaches them too *with this addressing*; the
    older recipe (``192.0.2.0/24``) collided with the machine's own eth0
    subnet (and its 192.0.2.1 gateway), which is why the root namespace got
    ``No route to host`` there.  ``root_reachable`` says what this run
    measured.  Tests should still prefer running the launcher inside one of
    the namespaces (``popen_in('h1', [...])``, h1 playing the login node):
    then every connection of the job is between namespaces, as on a real
    cluster, and the test does not depend on ``root_reachable``.

    ``add_unreachable_address(host)`` gives a host an extra /32 from
    ``198.19.K.0/24`` on its eth0 that no other namespace has a route to
    (connect fails at once with ENETUNREACH); the root namespace gets an
    ``unreachable`` route for that /24, so it fails fast there too.

``SlurmCluster()``
    A real single-node Slurm (slurmctld + slurmd, Debian's 22.05 packages),
    configured entirely from a temp dir (``SLURM_CONF``; ``/etc/slurm`` is
    not used), on free ports, so it does not clash with another run.  Uses
    munged; starts it when none answers and stops it later only if this
    module started it and no other SlurmCluster still uses it.

Both raise ``HostEnvUnavailable(reason)`` when the environment cannot be
built (not root, ``ip netns add`` refused, sshd/slurm/munge missing, a
daemon that dies at start: the reason includes its log tail), so a test can
``pytest.skip(reason)``; ``netns_hosts_or_skip()`` and
``slurm_cluster_or_skip()`` do exactly that.

Teardown kills everything by pid (pid files / Popen handles, plus every
process left in a namespace, plus slurmstepd and job tasks tagged by this
run's environment), deletes namespaces, veths, bridge and route, and removes
the temp dirs, also after an exception.  As a best effort the same cleanup
runs at interpreter exit and on SIGTERM/SIGHUP (then the previous handler or
the default action follows).  A SIGKILLed run leaves its namespaces behind;
the next run that takes the same slot removes them.

Every wait is a bounded poll whose timeout error says what it waited for.
Run ``python3 tests/launch/hostenv.py`` as root for a self-check.

Slurm 22.05.8 (Debian 12) behaviour, measured with SlurmCluster:

* Several concurrent steps in one allocation: ``srun --overlap --nodes=1
  --ntasks=1 --nodelist=NODE cmd &`` (one per process) runs all of them at
  once in ``salloc -N1 -n1``, ``salloc -N1 -n5 --mem=1000``, ``salloc -N1
  --exclusive`` and inside ``sbatch -N1 -n1`` (next to the batch step),
  with CR_Core and with CR_Core_Memory.  Without ``--overlap`` a step
  takes all of the job's CPUs on the node (and, with memory as a
  consumable, all of its memory): the 2nd..5th step print ``step creation
  temporarily disabled, retrying (Requested nodes are busy)`` and wait.
  ``--exact`` helps only when CPUs and memory suffice for each step
  (``-n5`` with DefMemPerCPU yes, ``-n5 --mem=1000`` no).
* srun gets SIGTERM (or SIGINT twice within 1 s): "forcing job
  termination"; the step's tasks are SIGKILLed (SIGTERM is *not*
  forwarded: a TERM-trapping task dies without running its trap; two
  SIGINTs do deliver SIGINT to the task first) within ~0.05 s; srun exits
  137.  A single SIGINT only prints the task status.
  ``scancel --signal=TERM JOB.STEP`` delivers SIGTERM to the task
  (graceful), then the step ends.
* srun gets SIGKILL: srun forks a helper child; if only the main srun
  process is killed (``kill -9 <srun pid>``) the helper cancels the step
  and the task dies within ~0.05 s.  If both die (``killpg(pgid,
  SIGKILL)``, e.g. the launcher's whole process group) the task keeps
  running (measured: still alive after 130 s, quiet or printing) until
  the step or job is cancelled (``scancel JOB.STEP`` / end of
  allocation).
* Node list inside an allocation: ``SLURM_JOB_NODELIST`` (= the older
  ``SLURM_NODELIST``) in the salloc shell, the sbatch script and every
  step; expand it with ``scontrol show hostnames "$SLURM_JOB_NODELIST"``
  (no argument: expands ``SLURM_JOB_NODELIST`` itself).  Also
  ``SLURM_JOB_NUM_NODES``/``SLURM_NNODES``, ``SLURM_JOB_ID``,
  ``SLURM_NTASKS``, ``SLURM_TASKS_PER_NODE``, ``SLURM_JOB_CPUS_PER_NODE``;
  ``SLURM_CPUS_ON_NODE`` and ``SLURM_NODEID`` only in sbatch scripts and
  steps.  Inside a step: ``SLURM_STEP_NODELIST``, ``SLURMD_NODENAME``,
  ``SLURM_NODEID``, ``SLURM_PROCID``, ``SLURM_STEP_ID``,
  ``SLURM_LAUNCH_NODE_IPADDR``/``SLURM_SRUN_COMM_HOST`` (srun's host).
* Output: each step's stdout/stderr comes back through its own srun, line
  by line as the task writes it (a partial line is held until its
  newline).  The task's stdout is a *pipe*, so a program whose stdio
  fully buffers a pipe (C/C++ stdio, Python without PYTHONUNBUFFERED)
  shows nothing until it flushes or exits; ``srun -u`` gives the task a
  pty on stdout (stdio then line-buffers) and forwards partial lines at
  once.  ``srun -l`` prefixes lines with the task rank ("0: ").
  Beware: this machine's environment sets PYTHONUNBUFFERED=1, and srun
  propagates the environment to the task.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import ipaddress
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid

__all__ = [
    "HostEnvUnavailable",
    "NetnsHosts",
    "SlurmCluster",
    "netns_hosts_or_skip",
    "slurm_cluster_or_skip",
]


class HostEnvUnavailable(RuntimeError):
    """The environment cannot be built here; ``reason`` says why."""

    def __init__(self, reason: str):
        super().__init__(reason)
        self.reason = reason


# --------------------------------------------------------------------------
# small helpers


def _wait_for(what, predicate, timeout, interval=0.02, max_interval=0.25):
    """Poll ``predicate`` until it returns a truthy value (returned) or
    ``timeout`` seconds pass (TimeoutError naming ``what``)."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        now = time.monotonic()
        if now >= deadline:
            raise TimeoutError(f"timed out after {timeout:.1f}s waiting for {what}")
        time.sleep(min(interval, deadline - now))
        interval = min(interval * 1.5, max_interval)


def _run(argv, timeout=30.0, check=True, **kw):
    kw.setdefault("capture_output", True)
    kw.setdefault("text", True)
    kw.setdefault("stdin", subprocess.DEVNULL)
    cp = subprocess.run(argv, timeout=timeout, **kw)
    if check and cp.returncode != 0:
        raise subprocess.CalledProcessError(cp.returncode, argv, cp.stdout, cp.stderr)
    return cp


def _err_text(exc):
    if isinstance(exc, subprocess.CalledProcessError):
        out = (exc.stderr or "") + (exc.stdout or "")
        return f"{' '.join(map(str, exc.cmd))}: rc={exc.returncode}: {out.strip()}"
    return str(exc)


def _pid_alive(pid):
    """True while ``pid`` exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def _proc_comm(pid):
    try:
        with open(f"/proc/{pid}/comm") as f:
            return f.read().strip()
    except OSError:
        return None


def _read_pidfile(path, comm=None):
    """The pid in ``path`` if it names a live process (whose comm starts
    with ``comm`` when given), else None."""
    try:
        with open(path) as f:
            pid = int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return None
    if not _pid_alive(pid):
        return None
    if comm is not None and not (_proc_comm(pid) or "").startswith(comm):
        return None
    return pid


def _terminate(pid, timeout=5.0, popen=None, what=None):
    """SIGTERM ``pid``, wait (bounded) for it to go, then SIGKILL.  Reaps it
    when ``popen`` is its Popen handle.  Returns True when it is gone."""
    what = what or f"pid {pid}"

    def gone():
        if popen is not None and popen.poll() is not None:
            return True
        return not _pid_alive(pid)

    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        if gone():
            break
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            break
        try:
            _wait_for(f"{what} to exit after {sig.name}", gone, wait)
            break
        except TimeoutError:
            continue
    if popen is not None:
        with contextlib.suppress(subprocess.TimeoutExpired):
            popen.wait(timeout=1.0)
    return gone()


def _kill_pids(pids, timeout=3.0):
    """SIGTERM a group of pids, wait (bounded), SIGKILL survivors."""
    pids = [p for p in pids if p != os.getpid()]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        live = [p for p in pids if _pid_alive(p)]
        if not live:
            return
        for p in live:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(p, sig)
        with contextlib.suppress(TimeoutError):
            _wait_for(f"pids {live} to exit after {sig.name}",
                      lambda: not any(_pid_alive(p) for p in live),
                      timeout if sig == signal.SIGTERM else 5.0)


def _log_tail(path, lines=25):
    try:
        with open(path, errors="replace") as f:
            data = f.readlines()
    except OSError as e:
        return f"(no log {path}: {e})"
    return f"--- last lines of {path} ---\n" + "".join(data[-lines:])


def _proc_start(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _owner_token():
    """'pid.starttime' of this process: survives pid reuse checks."""
    return f"{os.getpid()}.{_proc_start(os.getpid())}"


def _owner_alive(token):
    try:
        pid, start = token.split(".", 1)
        return _proc_start(int(pid)) == start
    except ValueError:
        return False


def _my_ancestors():
    pids, pid = set(), os.getpid()
    while pid > 1 and pid not in pids:
        pids.add(pid)
        try:
            with open(f"/proc/{pid}/stat") as f:
                pid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _environs(skip=()):
    """(pid, its environment as [b'KEY=VALUE', ...]) of every process
    whose environment can be read, but the pids in ``skip``."""
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) in skip:
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                yield int(d), f.read().split(b"\0")
        except OSError:
            continue


def _pids_with_environ(*needles):
    """Pids whose environment contains any of the ``needles``
    (``b'KEY=VALUE'``), excluding this process and its ancestors."""
    return [pid for pid, env in _environs(_my_ancestors()) if any(n in env for n in needles)]


# --------------------------------------------------------------------------
# cleanup at exit / on signals (best effort)

_live_envs = []  # objects with _emergency_cleanup()
_live_lock = threading.Lock()
_prev_handlers = {}


def _register(env):
    with _live_lock:
        _live_envs.append(env)
    _install_signal_handlers()


def _unregister(env):
    with _live_lock:
        if env in _live_envs:
            _live_envs.remove(env)


def _cleanup_all():
    with _live_lock:
        envs = list(reversed(_live_envs))
    for env in envs:
        with contextlib.suppress(BaseException):
            env.close()


atexit.register(_cleanup_all)


def _on_signal(signum, frame):
    _cleanup_all()
    prev = _prev_handlers.get(signum, signal.SIG_DFL)
    if callable(prev):
        prev(signum, frame)
    elif prev != signal.SIG_IGN:
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)


def _install_signal_handlers():
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGTERM, signal.SIGHUP):
        cur = signal.getsignal(sig)
        if cur is _on_signal or cur is None:
            continue
        _prev_handlers[sig] = cur
        with contextlib.suppress(ValueError, OSError):
            signal.signal(sig, _on_signal)


# --------------------------------------------------------------------------
# network namespaces + sshd

_PROBE = r"""
import json, socket, sys, time
targets, deadline = json.loads(sys.argv[1]), time.monotonic() + float(sys.argv[2])
result = {}
while True:
    for addr, port in targets:
        key = f"{addr}:{port}"
        if result.get(key, "").startswith("SSH-"):
            continue
        try:
            with socket.create_connection((addr, port), timeout=1.0) as s:
                s.settimeout(1.0)
                result[key] = s.recv(64).decode(errors="replace").strip() or "closed"
        except OSError as e:
            result[key] = f"error: {e.__class__.__name__}: {e}"
    if all(v.startswith("SSH-") for v in result.values()) or time.monotonic() > deadline:
        break
    time.sleep(0.05)
print(json.dumps(result))
"""

_CONNECT_ONCE = r"""
import socket, sys, time
t = time.monotonic()
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
    print("connected")
except OSError as e:
    print(f"failed {e.__class__.__name__} errno={e.errno} after {time.monotonic()-t:.3f}s")
"""


class _HostEnv:
    """What NetnsHosts and SlurmCluster share: a context manager whose
    ``start()`` builds the environment once (``_setup()``; torn down again
    if it fails) and whose ``close()`` tears it down once (``_teardown()``,
    returning the problems found, raised as one RuntimeError when the body
    raised nothing); both timed (``setup_seconds``, ``teardown_seconds``)."""

    def __init__(self):
        self.setup_seconds = None
        self.teardown_seconds = None
        self._started = False
        self._closed = False

    def start(self):
        if self._started:
            return self
        self._started = True
        t0 = time.monotonic()
        self._setup()
        self.setup_seconds = time.monotonic() - t0
        return self

    def close(self):
        """Idempotent.  Returns a list of problems."""
        if self._closed:
            return []
        self._closed = True
        t0 = time.monotonic()
        errors = self._teardown()
        _unregister(self)
        self.teardown_seconds = time.monotonic() - t0
        return errors

    def __enter__(self):
        try:
            self.start()
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, exc_type, exc, tb):
        errors = self.close()
        if errors and exc_type is None:
            raise RuntimeError(f"{type(self).__name__} teardown: " + "; ".join(errors))
        return False


class _NetnsSlot:
    """Slot K of NetnsHosts: an fcntl lock on ``LOCK_FMT.format(K)``, held
    while a run uses what is named after K (namespaces ``shpsK-*``, links
    ``shpsKb``/``shpsKvI``, ``198.18.K.0/24``, ``198.19.K.0/24``, temp dirs
    ``shardps-netns-K-*``).  Whoever takes K removes a crashed run's
    leftovers there first.  Used by one thread."""

    SLOTS = 256
    LOCK_FMT = "/tmp/shardps-hostenv-netns-{}.lock"
    NAME_RE = re.compile(r"^shps(\d+)(?:b|v\d+)$")

    def __init__(self):
        self.k = None
        self._fd = None

    def take(self):
        """Takes the lowest free slot whose subnets overlap nothing on the
        machine (few lock files); returns K."""
        for k in range(self.SLOTS):
            path = self.LOCK_FMT.format(k)
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue
            # We own slot k: anything named after it is a crashed run's.
            self.remove_leftovers(k)
            used = self.used_networks()
            net_a = ipaddress.ip_network(f"198.18.{k}.0/24")
            net_b = ipaddress.ip_network(f"198.19.{k}.0/24")
            if any(net_a.overlaps(u) or net_b.overlaps(u) for u in used):
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
            self._fd, self.k = fd, k
            return k
        raise HostEnvUnavailable("no free NetnsHosts slot (all 256 locked or overlapping)")

    def release(self):
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, 0)
                fcntl.flock(self._fd, fcntl.LOCK_UN)
                os.close(self._fd)
            self._fd = None

    @staticmethod
    def used_networks():
        nets = []
        with contextlib.suppress(Exception):
            for a in json.loads(_run(["ip", "-j", "-4", "addr"]).stdout):
                for ai in a.get("addr_info", []):
                    nets.append(ipaddress.ip_network(f"{ai['local']}/{ai['prefixlen']}", strict=False))
        with contextlib.suppress(Exception):
            for r in json.loads(_run(["ip", "-j", "-4", "route", "show", "table", "all"]).stdout):
                dst = r.get("dst", "")
                if dst and dst != "default" and r.get("type", "unicast") in ("unicast", "unreachable", "blackhole", "prohibit"):
                    nets.append(ipaddress.ip_network(dst if "/" in dst else f"{dst}/32", strict=False))
        return nets

    @classmethod
    def sweep_stale(cls):
        """Remove what crashed (e.g. SIGKILLed) runs left behind: every
        slot that has namespaces/links/temp dirs but whose lock nobody
        holds.  Returns the slots cleaned."""
        slots = set()
        with contextlib.suppress(Exception):
            for line in _run(["ip", "netns", "list"]).stdout.splitlines():
                m = re.match(r"^shps(\d+)-", line)
                if m:
                    slots.add(int(m.group(1)))
        with contextlib.suppress(Exception):
            for link in json.loads(_run(["ip", "-j", "link"]).stdout):
                m = cls.NAME_RE.match(link.get("ifname", ""))
                if m:
                    slots.add(int(m.group(1)))
        tmp = tempfile.gettempdir()
        for name in os.listdir(tmp):
            m = re.match(r"^shardps-netns-(\d+)-", name)
            if m:
                slots.add(int(m.group(1)))
        cleaned = []
        for k in sorted(slots):
            if not 0 <= k < cls.SLOTS:
                continue
            fd = os.open(cls.LOCK_FMT.format(k), os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                os.close(fd)
                continue  # a live run owns it (or it is our own slot)
            try:
                cls.remove_leftovers(k)
                cleaned.append(k)
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)
        return cleaned

    @classmethod
    def remove_leftovers(cls, k):
        """Caller holds slot k's lock: remove namespaces (and the processes
        in them), links, route and temp dirs named after slot k."""
        prefix = f"shps{k}-"
        with contextlib.suppress(Exception):
            for line in _run(["ip", "netns", "list"]).stdout.splitlines():
                name = line.split()[0] if line.split() else ""
                if name.startswith(prefix):
                    _kill_ns_processes(name)
                    _run(["ip", "netns", "del", name], check=False)
        with contextlib.suppress(Exception):
            for link in json.loads(_run(["ip", "-j", "link"]).stdout):
                m = cls.NAME_RE.match(link.get("ifname", ""))
                if m and int(m.group(1)) == k:
                    _run(["ip", "link", "del", link["ifname"]], check=False)
        _run(["ip", "route", "del", "unreachable", f"198.19.{k}.0/24"], check=False)
        tmp = tempfile.gettempdir()
        for name in os.listdir(tmp):
            if name.startswith(f"shardps-netns-{k}-"):
                shutil.rmtree(os.path.join(tmp, name), ignore_errors=True)


def _kill_ns_processes(ns):
    cp = _run(["ip", "netns", "pids", ns], check=False)
    pids = [int(p) for p in cp.stdout.split() if p.isdigit()]
    _kill_pids(pids)


class _SshdSet:
    """Debian's sshd in each host's namespace, with throwaway host and user
    keys in the environment's workdir.  Part of a NetnsHosts (``env``: its
    hosts, addresses, namespaces and workdir); used by one thread."""

    def __init__(self, env, sshd):
        self.env = env
        self.sshd = sshd  # its path
        self.procs = {}  # host -> Popen

    def make_keys(self):
        """Writes the keys; returns the ssh client options that use them."""
        d = self.env.workdir
        for name in ("hostkey", "userkey"):
            _run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"shardps-{name}",
                  "-f", os.path.join(d, name)])
        shutil.copy(os.path.join(d, "userkey.pub"), os.path.join(d, "authorized_keys"))
        # Every remote command's shell complains first, as real login shells
        # do (a ~/.bashrc whose pyenv rehash races a parallel session printed
        # "rm: cannot remove ..." to stderr on a CI machine and broke the
        # launcher's probe): the launcher must read through such lines.
        with open(os.path.join(d, "noisy-shell"), "w") as f:
            f.write("echo 'noisy-shell: a login shell complaining on stderr' >&2\n"
                    "echo 'noisy-shell: and chatting on stdout'\n")
        return [
            "-F", "/dev/null",
            "-i", os.path.join(d, "userkey"),
            "-o", "IdentitiesOnly=yes",
            "-o", "BatchMode=yes",
            "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null",
            "-o", "LogLevel=ERROR",
            "-o", "ConnectTimeout=5",
        ]

    def pidfile(self, host):
        return os.path.join(self.env.workdir, f"sshd-{host}.pid")

    def pid(self, host):
        return _read_pidfile(self.pidfile(host), "sshd")

    def start(self, h):
        d = self.env.workdir
        log = open(os.path.join(d, f"sshd-{h}.log"), "ab")
        argv = [
            *self.env.exec_prefix(h), self.sshd, "-D", "-e", "-f", "/dev/null",
            "-o", f"HostKey={d}/hostkey",
            "-o", f"AuthorizedKeysFile={d}/authorized_keys",
            "-o", f"PidFile={self.pidfile(h)}",
            "-o", "ListenAddress=0.0.0.0",
            "-o", "Port=22",
            "-o", "PermitRootLogin=prohibit-password",
            "-o", "StrictModes=no",
            "-o", "UsePAM=no",
            "-o", "PasswordAuthentication=no",
            "-o", "KbdInteractiveAuthentication=no",
            "-o", "UseDNS=no",
            "-o", "PrintMotd=no",
            "-o", "MaxStartups=200",
            "-o", "MaxSessions=100",
            "-o", "LogLevel=INFO",
            "-o", f"SetEnv=BASH_ENV={d}/noisy-shell",
        ]
        try:
            self.procs[h] = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log,
                                             stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            log.close()

    def wait_ready(self, hosts):
        env = self.env
        deadline = time.monotonic() + env.start_timeout
        pending = set(hosts)
        while True:
            for h in pending:
                p = self.procs[h]
                if p.poll() is not None:
                    raise HostEnvUnavailable(
                        f"sshd of {h} exited rc={p.returncode}\n"
                        + _log_tail(os.path.join(env.workdir, f"sshd-{h}.log")))
            # probe each host from a peer namespace (from itself when n == 1)
            by_prober = {}
            for h in pending:
                peers = [x for x in env.hosts if x != h]
                by_prober.setdefault(peers[0] if peers else h, []).append(h)
            results = {}
            for prober, targets in by_prober.items():
                cp = env.run_in(prober, [sys.executable, "-c", _PROBE,
                                         json.dumps([[env.address(t), 22] for t in targets]), "2"],
                                timeout=30)
                with contextlib.suppress(ValueError):
                    got = json.loads(cp.stdout.strip().splitlines()[-1]) if cp.stdout.strip() else {}
                    for t in targets:
                        results[t] = got.get(f"{env.address(t)}:22", f"no answer ({cp.stderr.strip()})")
            pending = {h for h in pending if not results.get(h, "").startswith("SSH-")}
            if not pending:
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    f"timed out after {env.start_timeout:.1f}s waiting for sshd to answer on "
                    + ", ".join(f"{h} ({env.address(h)}: {results.get(h)})" for h in sorted(pending)))

    def stop(self, host, timeout=5.0):
        """Stop ``host``'s sshd listener (sessions already open stay) and
        wait until its port refuses connections."""
        pid = self.pid(host)
        popen = self.procs.get(host)
        if pid is not None:
            _terminate(pid, timeout, popen if popen and popen.pid == pid else None,
                       what=f"sshd of {host}")
        if popen is not None:
            _terminate(popen.pid, timeout, popen, what=f"sshd of {host}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.pidfile(host))
        out = self.env.run_in(host, [sys.executable, "-c", _CONNECT_ONCE,
                                     self.env.address(host), "22", "2"], timeout=10).stdout
        if "connected" in out:
            raise RuntimeError(f"sshd of {host} still accepts connections after stop")

    def kill_all(self, attempt):
        """Teardown: every sshd, by the pid in its pid file and its Popen
        (``attempt(what, fn, *args)`` runs each step, collecting errors)."""
        for h, popen in self.procs.items():
            pid = _read_pidfile(self.pidfile(h), "sshd")
            if pid is not None and pid != popen.pid:
                attempt(f"kill sshd {h}", _terminate, pid, 5.0, None, f"sshd of {h}")
            attempt(f"kill sshd {h}", _terminate, popen.pid, 5.0, popen, f"sshd of {h}")


class NetnsHosts(_HostEnv):
    """``n`` hosts = network namespaces running sshd.  See module docstring.

    Attributes: ``hosts`` (['h1', ...]), ``ssh_options`` (ssh client args),
    ``user`` ('root'), ``slot``, ``subnet``, ``bridge``, ``workdir`` (temp
    dir: keys, sshd logs), ``root_reachable`` (bool, measured),
    ``setup_seconds`` / ``teardown_seconds``.  Used by one thread (teardown
    may also run from an atexit hook or a signal handler).
    """

    SLOTS = _NetnsSlot.SLOTS
    LOCK_FMT = _NetnsSlot.LOCK_FMT

    def __init__(self, n=3, *, start_timeout=30.0, sshd="/usr/sbin/sshd"):
        if n < 1:
            raise ValueError("n must be >= 1")
        super().__init__()
        self.n = n
        self.start_timeout = start_timeout
        self.user = "root"
        self.hosts = [f"h{i}" for i in range(1, n + 1)]
        self.slot = None
        self.subnet = None
        self.bridge = None
        self.workdir = None
        self.root_reachable = None
        self.ssh_options = []
        self._slot = _NetnsSlot()
        self._sshd = _SshdSet(self, sshd)
        self._ns = {}
        self._addr = {}
        self._veth = {}
        self._extra = {}  # host -> [extra addresses]
        self._extra_count = 0
        self._route = None

    # ---- public API ------------------------------------------------------

    @property
    def sshd(self):
        return self._sshd.sshd

    def address(self, host):
        return self._addr[host]

    def netns(self, host):
        return self._ns[host]

    def ssh_target(self, host, address=None):
        return f"{self.user}@{address or self._addr[host]}"

    def ssh_argv(self, host, *remote):
        """['ssh', <ssh_options>, 'root@<addr>', *remote]."""
        return ["ssh", *self.ssh_options, self.ssh_target(host), *remote]

    def exec_prefix(self, host):
        return ["ip", "netns", "exec", self._ns[host]]

    def popen_in(self, host, argv, **kw):
        """subprocess.Popen(argv) inside ``host``'s namespace."""
        return subprocess.Popen([*self.exec_prefix(host), *argv], **kw)

    def run_in(self, host, argv, timeout, **kw):
        """subprocess.run(argv, timeout=timeout) inside ``host``'s
        namespace (stdout/stderr captured as text unless ``kw`` says
        otherwise; no check)."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        return subprocess.run([*self.exec_prefix(host), *argv], timeout=timeout, **kw)

    def sshd_pid(self, host):
        return self._sshd.pid(host)

    def stop_sshd(self, host, timeout=5.0):
        """Stop ``host``'s sshd listener (sessions already open stay) and
        wait until its port refuses connections."""
        self._sshd.stop(host, timeout)

    def start_sshd(self, host):
        """(Re)start ``host``'s sshd, e.g. after stop_sshd, and wait until
        it answers."""
        if self.sshd_pid(host) is not None:
            return
        self._sshd.start(host)
        self._sshd.wait_ready([host])

    def add_unreachable_address(self, host, verify=True):
        """Give ``host`` an extra /32 on its eth0 that no other namespace
        (nor the root namespace) can reach; returns it as a string."""
        self._extra_count += 1
        if self._extra_count > 250:
            raise RuntimeError("too many unreachable addresses")
        addr = f"198.19.{self.slot}.{self._extra_count}"
        _run(["ip", "-n", self._ns[host], "addr", "add", f"{addr}/32", "dev", "eth0"])
        self._extra.setdefault(host, []).append(addr)
        if verify:
            others = [h for h in self.hosts if h != host]
            for other in others[:1]:
                out = self.run_in(other, [sys.executable, "-c", _CONNECT_ONCE, addr, "22", "3"],
                                  timeout=15).stdout.strip()
                if "connected" in out:
                    raise RuntimeError(f"{addr} on {host} is reachable from {other}")
            out = _run([sys.executable, "-c", _CONNECT_ONCE, addr, "22", "3"], timeout=15).stdout
            if "connected" in out:
                raise RuntimeError(f"{addr} on {host} is reachable from the root namespace")
        return addr

    @staticmethod
    def sweep_stale():
        """Remove what crashed runs left behind (see _NetnsSlot.sweep_stale).
        Called by start(); returns the slots cleaned."""
        return _NetnsSlot.sweep_stale()

    # ---- setup -----------------------------------------------------------

    def _setup(self):
        if os.geteuid() != 0:
            raise HostEnvUnavailable("NetnsHosts needs root (ip netns, sshd)")
        for tool in ("ip", "ssh", "ssh-keygen"):
            if shutil.which(tool) is None:
                raise HostEnvUnavailable(f"{tool} not found (apt-get install iproute2 openssh-client)")
        if not os.access(self.sshd, os.X_OK):
            raise HostEnvUnavailable(f"{self.sshd} missing (apt-get install openssh-server)")
        _register(self)
        self.sweep_stale()
        k = self.slot = self._slot.take()
        self.subnet = f"198.18.{k}.0/24"
        self.bridge = f"shps{k}b"
        self.workdir = tempfile.mkdtemp(prefix=f"shardps-netns-{k}-")
        os.chmod(self.workdir, 0o755)
        self.ssh_options = self._sshd.make_keys()
        for i, h in enumerate(self.hosts, start=1):
            self._ns[h] = f"shps{k}-{os.getpid()}-{h}"
            self._addr[h] = f"198.18.{k}.{10 + i}"
            self._veth[h] = f"shps{k}v{i}"
        self._build_network(k)
        os.makedirs("/run/sshd", mode=0o755, exist_ok=True)  # privsep dir
        for h in self.hosts:
            self._sshd.start(h)
        self._sshd.wait_ready(self.hosts)
        self.root_reachable = self._probe_root()

    def _build_network(self, k):
        """The bridge, the unreachable route, and per host its namespace
        with eth0 (one end of a veth pair on the bridge) and lo up."""
        try:
            _run(["ip", "link", "add", self.bridge, "type", "bridge"])
        except subprocess.CalledProcessError as e:
            raise HostEnvUnavailable(f"cannot create a bridge: {_err_text(e)}") from None
        _run(["ip", "addr", "add", f"198.18.{k}.1/24", "dev", self.bridge])
        _run(["ip", "link", "set", self.bridge, "up"])
        self._route = f"198.19.{k}.0/24"
        _run(["ip", "route", "replace", "unreachable", self._route])
        for h in self.hosts:
            ns, veth = self._ns[h], self._veth[h]
            try:
                _run(["ip", "netns", "add", ns])
            except subprocess.CalledProcessError as e:
                raise HostEnvUnavailable(f"ip netns add refused: {_err_text(e)}") from None
            _run(["ip", "link", "add", veth, "type", "veth", "peer", "name", "eth0", "netns", ns])
            _run(["ip", "link", "set", veth, "master", self.bridge])
            _run(["ip", "link", "set", veth, "up"])
            _run(["ip", "-n", ns, "addr", "add", f"{self._addr[h]}/24", "dev", "eth0"])
            _run(["ip", "-n", ns, "link", "set", "eth0", "up"])
            _run(["ip", "-n", ns, "link", "set", "lo", "up"])

    def _probe_root(self):
        addr = self._addr[self.hosts[0]]
        try:
            with socket.create_connection((addr, 22), timeout=2.0) as s:
                s.settimeout(2.0)
                return s.recv(64).startswith(b"SSH-")
        except OSError:
            return False

    # ---- teardown ----------------------------------------------------------

    def _teardown(self):
        """Tear everything down (best effort); returns a list of problems."""
        errors = []

        def attempt(what, fn, *a):
            try:
                fn(*a)
            except Exception as e:  # keep going: best effort, report at end
                errors.append(f"{what}: {_err_text(e)}")

        if self.workdir is not None:
            self._sshd.kill_all(attempt)
        existing = set()
        with contextlib.suppress(Exception):
            existing = {l.split()[0] for l in _run(["ip", "netns", "list"]).stdout.splitlines() if l.split()}
        for h, ns in self._ns.items():
            if ns in existing:
                attempt(f"kill processes in {ns}", _kill_ns_processes, ns)
                attempt(f"delete netns {ns}", _run, ["ip", "netns", "del", ns])
        # Deleting a namespace deletes its veth pair, asynchronously: delete
        # what is still there (ignoring "Cannot find device") and then wait
        # until none of our links is left.
        ours = [*self._veth.values(), *([self.bridge] if self.bridge else [])]
        for link in ours:
            _run(["ip", "link", "del", link], check=False)

        def links_left():
            try:
                names = {l["ifname"] for l in json.loads(_run(["ip", "-j", "link"]).stdout)}
            except Exception:
                return []
            return [l for l in ours if l in names]
        try:
            _wait_for(f"links {ours} to disappear", lambda: not links_left(), 10.0)
        except TimeoutError as e:
            errors.append(f"{e}: still there: {links_left()}")
        if self._route:
            _run(["ip", "route", "del", "unreachable", self._route], check=False)
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        self._slot.release()
        return errors


# --------------------------------------------------------------------------
# munge (shared between SlurmCluster instances and runs)

_MUNGE_LOCK = "/tmp/shardps-hostenv-munge.lock"
_MUNGE_MARK = "/tmp/shardps-hostenv-munged.started"  # pid of a munged we started


def _munge_works():
    try:
        cred = _run(["munge", "-n"], timeout=10)
        cp = _run(["unmunge"], input=cred.stdout, timeout=10, check=False, stdin=None)
        return cp.returncode == 0 and "Success" in cp.stdout
    except (OSError, subprocess.SubprocessError):
        return False


class _MungeUse:
    """Holds a shared flock on _MUNGE_LOCK while a SlurmCluster uses munged."""

    def __init__(self, timeout):
        self.fd = os.open(_MUNGE_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        self.started_pid = None
        try:
            self._acquire(timeout)
        except BaseException:
            os.close(self.fd)
            self.fd = None
            raise

    def _lock(self, mode, timeout, what):
        def try_lock():
            try:
                fcntl.flock(self.fd, mode | fcntl.LOCK_NB)
                return True
            except BlockingIOError:
                return False
        _wait_for(what, try_lock, timeout, interval=0.05)

    def _acquire(self, timeout):
        # Users hold LOCK_SH while they need munged; whoever has to start
        # it takes LOCK_EX first (so no one stops it meanwhile), and the
        # last user (the one whose non-blocking upgrade to LOCK_EX works)
        # stops a munged that this module started.
        self._lock(fcntl.LOCK_SH, timeout, f"shared lock {_MUNGE_LOCK}")
        if _munge_works():
            return
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        self._lock(fcntl.LOCK_EX, timeout,
                   f"exclusive lock {_MUNGE_LOCK} (to start munged; other users hold it)")
        try:
            if not _munge_works():
                self._start_munged(timeout)
        finally:
            self._lock(fcntl.LOCK_SH, timeout, f"shared lock {_MUNGE_LOCK}")

    def _start_munged(self, timeout):
        for tool in ("munged", "munge", "unmunge"):
            if shutil.which(tool) is None and not os.access(f"/usr/sbin/{tool}", os.X_OK):
                raise HostEnvUnavailable(f"{tool} not found (apt-get install munge)")
        try:
            os.stat("/etc/munge/munge.key")
        except FileNotFoundError:
            raise HostEnvUnavailable("/etc/munge/munge.key missing (apt-get install munge)") from None
        except OSError as e:
            raise HostEnvUnavailable(f"cannot access /etc/munge/munge.key: {e}") from None
        # a stale munged that does not answer: leave it alone, but say so
        for run_dir in ("/run/munge", "/var/log/munge", "/var/lib/munge"):
            os.makedirs(run_dir, exist_ok=True)
            shutil.chown(run_dir, "munge", "munge")
        os.chmod("/run/munge", 0o755)
        munged = shutil.which("munged") or "/usr/sbin/munged"
        p = subprocess.Popen([munged, "--foreground"], user="munge", group="munge",
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE, start_new_session=True)
        try:
            _wait_for("munged to answer (munge -n | unmunge)",
                      lambda: p.poll() is not None or _munge_works(), timeout)
        except TimeoutError as e:
            _terminate(p.pid, 3.0, p, "munged")
            raise HostEnvUnavailable(f"munged did not answer: {e}\n"
                                     + _log_tail("/var/log/munge/munged.log")) from None
        if p.poll() is not None:
            err = p.stderr.read().decode(errors="replace")
            raise HostEnvUnavailable(f"munged exited rc={p.returncode}: {err}\n"
                                     + _log_tail("/var/log/munge/munged.log"))
        p.stderr.close()
        self.started_pid = p.pid
        self._popen = p
        with open(_MUNGE_MARK, "w") as f:
            f.write(f"{p.pid}\n")

    def release(self):
        """Drop our use; stop munged if this module started it (this run or
        an earlier one) and no other user holds the lock."""
        if self.fd is None:
            return
        try:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return  # someone else still uses munged
            pid = _read_pidfile(_MUNGE_MARK, "munged")
            if pid is not None:
                popen = getattr(self, "_popen", None)
                _terminate(pid, 5.0, popen if popen and popen.pid == pid else None, "munged")
            with contextlib.suppress(FileNotFoundError):
                os.unlink(_MUNGE_MARK)
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(self.fd, fcntl.LOCK_UN)
                os.close(self.fd)
            self.fd = None


# --------------------------------------------------------------------------
# Slurm


def _free_port():
    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        return s.getsockname()[1]


def _sweep_stale_slurm():
    """SlurmCluster.sweep_stale: what crashed runs left, by the tag in the
    environment of their daemons and by the owner file of their temp dirs."""
    tagged = {}
    for pid, env in _environs():
        for item in env:
            if item.startswith(b"SHARDPS_HOSTENV_TAG="):
                tag = item.split(b"=", 1)[1].decode(errors="replace")
                tagged.setdefault(tag.split("-", 1)[0], []).append(pid)
    killed = []
    for owner, pids in tagged.items():
        if not _owner_alive(owner):
            _kill_pids(pids, timeout=1.0)
            killed += pids
    tmp = tempfile.gettempdir()
    for name in os.listdir(tmp):
        if not name.startswith("shardps-slurm-"):
            continue
        path = os.path.join(tmp, name)
        try:
            with open(os.path.join(path, "owner")) as f:
                owner = f.read().strip()
        except OSError:
            continue
        if not _owner_alive(owner):
            # tasks of that run carry SLURM_CONF=<its conf>
            _kill_pids(_pids_with_environ(f"SLURM_CONF={path}/slurm.conf".encode()), timeout=1.0)
            shutil.rmtree(path, ignore_errors=True)
    return killed


def _slurm_conf(c, ctld_port, slurmd_port):
    """The slurm.conf of SlurmCluster `c`: everything under its workdir."""
    w = c.workdir
    return f"""\
# written by tests/launch/hostenv.py
ClusterName=shardps
SlurmctldHost={c.node}
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
AuthType=auth/munge
CredType=cred/munge
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
MpiDefault=none
SlurmUser=root
SlurmdUser=root
SlurmctldPidFile={w}/slurmctld.pid
SlurmdPidFile={w}/slurmd.pid
SlurmdSpoolDir={w}/spool
StateSaveLocation={w}/state
SlurmctldLogFile={w}/log/slurmctld.log
SlurmdLogFile={w}/log/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
SchedulerType=sched/backfill
SelectType=select/cons_tres
SelectTypeParameters={c.select_params}
SlurmdParameters=config_overrides
ReturnToService=2
MailProg=/bin/true
NodeName={c.node} NodeAddr=127.0.0.1 CPUs={c.cpus} RealMemory={c.real_memory} State=UNKNOWN
PartitionName={c.partition} Nodes={c.node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=NO
{c.extra_conf}
"""


class SlurmCluster(_HostEnv):
    """A single-node Slurm from a temp dir.  See module docstring.

    Attributes: ``node`` (the node name, ``hostname -s``), ``cpus`` (CPUs
    the node advertises), ``partition``, ``conf`` (path of slurm.conf),
    ``env`` (os.environ + SLURM_CONF, for client commands), ``workdir``,
    ``started_munged``, ``setup_seconds``/``teardown_seconds``.

    ``cpus`` defaults to max(8, nproc): with ``SlurmdParameters=
    config_overrides`` slurmd accepts a node with more CPUs than the
    machine has (without it the node would be drained for a low CPU
    count).  ``select_params`` (default ``CR_Core``; ``CR_Core_Memory``
    plus ``extra_conf="DefMemPerCPU=500"`` mimics clusters where memory is
    a consumable) and ``extra_conf`` (appended to slurm.conf) let a test
    model a site's configuration.  Slurm defaults otherwise (KillWait=30,
    InactiveLimit=0, MessageTimeout=10).

    ``run(argv, timeout)`` / ``popen(argv)`` run client commands (srun,
    salloc, sbatch, squeue, ...) with ``env``; ``node_state()``, ``jobs()``
    and ``log_tail('slurmctld'|'slurmd')`` help when a test fails.

    Behaviour of Slurm 22.05.8 measured with this class (see the module
    docstring for the list): use ``srun --overlap --nodes=1 --ntasks=1
    --nodelist=NODE`` for each of several concurrent long-lived steps.
    """

    _SETUP_LOCK = "/tmp/shardps-hostenv-slurm.lock"

    def __init__(self, *, cpus=None, real_memory=4000, partition="debug",
                 select_params="CR_Core", start_timeout=60.0, extra_conf=""):
        super().__init__()
        self.cpus = cpus if cpus is not None else max(8, os.cpu_count() or 1)
        self.select_params = select_params
        self.real_memory = real_memory
        self.partition = partition
        self.start_timeout = start_timeout
        self.extra_conf = extra_conf
        self.node = socket.gethostname().split(".")[0]
        self.workdir = None
        self.conf = None
        self.env = None
        self.tag = f"{_owner_token()}-{uuid.uuid4().hex[:12]}"
        self.started_munged = False
        self._munge = None
        self._ctld = None
        self._slurmd = None

    # ---- public API ------------------------------------------------------

    def run(self, argv, timeout, **kw):
        """subprocess.run with this cluster's env (text, captured, no check
        unless ``kw`` says otherwise)."""
        kw.setdefault("capture_output", True)
        kw.setdefault("text", True)
        kw.setdefault("env", self.env)
        return subprocess.run(argv, timeout=timeout, **kw)

    def popen(self, argv, **kw):
        kw.setdefault("env", self.env)
        return subprocess.Popen(argv, **kw)

    def node_state(self):
        cp = self.run(["sinfo", "-h", "-N", "-n", self.node, "-o", "%T"], timeout=20)
        return cp.stdout.strip() if cp.returncode == 0 else None

    def jobs(self):
        cp = self.run(["squeue", "-h", "-o", "%i"], timeout=20)
        return cp.stdout.split() if cp.returncode == 0 else []

    def log_tail(self, which="slurmctld", lines=25):
        return _log_tail(os.path.join(self.workdir, "log", f"{which}.log"), lines)

    @staticmethod
    def sweep_stale():
        """Kill daemons/steps/tasks and remove temp dirs left by crashed
        (e.g. SIGKILLed) runs whose owner process is gone.  Called by
        start(); returns the pids killed."""
        return _sweep_stale_slurm()

    # ---- setup -----------------------------------------------------------

    def _setup(self):
        if os.geteuid() != 0:
            raise HostEnvUnavailable("SlurmCluster needs root")
        for tool in ("slurmctld", "slurmd", "slurmstepd"):
            if shutil.which(tool) is None and not os.access(f"/usr/sbin/{tool}", os.X_OK):
                raise HostEnvUnavailable(f"{tool} missing (apt-get install slurmctld slurmd)")
        for tool in ("srun", "sinfo", "squeue", "scancel", "scontrol", "salloc", "sbatch"):
            if shutil.which(tool) is None:
                raise HostEnvUnavailable(f"{tool} missing (apt-get install slurm-client)")
        if shutil.which("munge") is None:
            raise HostEnvUnavailable("munge missing (apt-get install munge)")
        _register(self)
        self.sweep_stale()
        self._munge = _MungeUse(min(self.start_timeout, 30.0))
        self.started_munged = self._munge.started_pid is not None
        self.workdir = tempfile.mkdtemp(prefix="shardps-slurm-")
        os.chmod(self.workdir, 0o755)
        with open(os.path.join(self.workdir, "owner"), "w") as f:
            f.write(_owner_token() + "\n")
        for sub in ("state", "spool", "log"):
            os.makedirs(os.path.join(self.workdir, sub))
        self.conf = os.path.join(self.workdir, "slurm.conf")
        self.env = dict(os.environ, SLURM_CONF=self.conf)
        for k in list(self.env):
            if k.startswith(("SLURM_", "SALLOC_", "SBATCH_", "SRUN_")) and k != "SLURM_CONF":
                del self.env[k]
        daemon_env = dict(self.env, SHARDPS_HOSTENV_TAG=self.tag)
        # serialize port choice + daemon start between concurrent runs
        lock_fd = os.open(self._SETUP_LOCK, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            def try_lock():
                try:
                    fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    return True
                except BlockingIOError:
                    return False
            _wait_for(f"lock {self._SETUP_LOCK}", try_lock, 120.0, interval=0.1)
            ctld_port, slurmd_port = _free_port(), _free_port()
            while slurmd_port == ctld_port:
                slurmd_port = _free_port()
            self._write_conf(ctld_port, slurmd_port)
            self._ctld = self._start_daemon("slurmctld", ["-D", "-i", "-f", self.conf], daemon_env)
            _wait_for("slurmctld to answer (scontrol ping)", self._ctld_up_or_dead, self.start_timeout)
            self._check_alive(self._ctld, "slurmctld")
            self._slurmd = self._start_daemon("slurmd", ["-D", "-f", self.conf, "-N", self.node],
                                              daemon_env)
            try:
                _wait_for(f"node {self.node} to be idle in sinfo", self._node_idle_or_dead,
                          self.start_timeout)
            except TimeoutError as e:
                raise HostEnvUnavailable(
                    f"{e} (state {self.node_state()!r})\n"
                    + self.run(["sinfo", "-R"], timeout=20).stdout
                    + self.log_tail("slurmd") + self.log_tail("slurmctld")) from None
            self._check_alive(self._ctld, "slurmctld")
            self._check_alive(self._slurmd, "slurmd")
        finally:
            with contextlib.suppress(OSError):
                fcntl.flock(lock_fd, fcntl.LOCK_UN)
            os.close(lock_fd)

    def _write_conf(self, ctld_port, slurmd_port):
        with open(self.conf, "w") as f:
            f.write(_slurm_conf(self, ctld_port, slurmd_port))

    def _start_daemon(self, name, args, env):
        exe = shutil.which(name) or f"/usr/sbin/{name}"
        out = open(os.path.join(self.workdir, "log", f"{name}.stdout"), "wb")
        try:
            return subprocess.Popen([exe, *args], env=env, stdin=subprocess.DEVNULL, stdout=out,
                                    stderr=subprocess.STDOUT, start_new_session=True,
                                    cwd=self.workdir)
        finally:
            out.close()

    def _check_alive(self, popen, name):
        if popen.poll() is not None:
            raise HostEnvUnavailable(
                f"{name} exited rc={popen.returncode}\n"
                + _log_tail(os.path.join(self.workdir, "log", f"{name}.stdout"))
                + self.log_tail(name))

    def _ctld_up_or_dead(self):
        if self._ctld.poll() is not None:
            return True
        cp = self.run(["scontrol", "ping"], timeout=20)
        return "UP" in cp.stdout

    def _node_idle_or_dead(self):
        if self._ctld.poll() is not None or self._slurmd.poll() is not None:
            self._check_alive(self._ctld, "slurmctld")
            self._check_alive(self._slurmd, "slurmd")
        state = self.node_state() or ""
        if state.startswith(("drain", "down", "inval", "fail")) and "idle" not in state:
            # ReturnToService=2 revives "down" nodes once slurmd registers;
            # a drained/invalid node will not come back: fail now.
            if state.startswith(("drain", "inval")):
                raise HostEnvUnavailable(
                    f"node {self.node} is {state}: "
                    + self.run(["sinfo", "-R"], timeout=20).stdout
                    + self.log_tail("slurmctld"))
        return state == "idle"

    # ---- teardown ----------------------------------------------------------

    def _teardown(self):
        """Cancel all jobs, stop the daemons (by pid), kill leftovers, remove
        the temp dir, release munged.  Returns problems found."""
        errors = []
        ctld_ok = self._ctld is not None and self._ctld.poll() is None
        if ctld_ok:
            try:
                jobs = self.jobs()
                if jobs:
                    self.run(["scancel", *jobs], timeout=20)
                    _wait_for("all jobs to leave squeue after scancel",
                              lambda: not self.jobs(), 30.0)
            except Exception as e:
                errors.append(f"scancel: {_err_text(e)}")
        for name, popen in (("slurmd", self._slurmd), ("slurmctld", self._ctld)):
            if popen is None:
                continue
            pid = _read_pidfile(os.path.join(self.workdir, f"{name}.pid"), "slurm")
            if pid is not None and pid != popen.pid:
                _terminate(pid, 10.0, None, name)
            if not _terminate(popen.pid, 10.0, popen, name):
                errors.append(f"{name} pid {popen.pid} did not exit")
        if self.conf:
            # slurmstepd inherits the daemons' tag; job tasks and stray
            # clients carry SLURM_CONF=<our conf>
            leftovers = _pids_with_environ(f"SHARDPS_HOSTENV_TAG={self.tag}".encode(),
                                           f"SLURM_CONF={self.conf}".encode())
            if leftovers:
                _kill_pids(leftovers)
        if self.workdir:
            shutil.rmtree(self.workdir, ignore_errors=True)
        if self._munge is not None:
            try:
                self._munge.release()
            except Exception as e:
                errors.append(f"munge release: {_err_text(e)}")
        return errors


# --------------------------------------------------------------------------
# pytest helpers


@contextlib.contextmanager
def netns_hosts_or_skip(n=3, **kw):
    """``with netns_hosts_or_skip(3) as env:`` -- pytest.skip when
    unavailable."""
    import pytest
    try:
        env = NetnsHosts(n, **kw).__enter__()
    except HostEnvUnavailable as e:
        pytest.skip(f"NetnsHosts unavailable: {e.reason}")
    with env:
        yield env


@contextlib.contextmanager
def slurm_cluster_or_skip(**kw):
    import pytest
    try:
        env = SlurmCluster(**kw).__enter__()
    except HostEnvUnavailable as e:
        pytest.skip(f"SlurmCluster unavailable: {e.reason}")
    with env:
        yield env


# --------------------------------------------------------------------------
# self-check


def _self_check():
    ok = True

    def report(what, good, detail=""):
        nonlocal ok
        ok &= bool(good)
        print(f"[{'ok' if good else 'FAIL'}] {what}{': ' + detail if detail else ''}", flush=True)

    print("== NetnsHosts(3)")
    try:
        with NetnsHosts(3) as env:
            report("setup", True, f"slot {env.slot}, {env.subnet}, {env.setup_seconds:.2f}s")
            for h in env.hosts:
                print(f"     {h}: netns {env.netns(h)} addr {env.address(h)} sshd pid {env.sshd_pid(h)}")
            cp = env.run_in("h1", env.ssh_argv("h2", "hostname; ip -4 -br addr show eth0"), timeout=30)
            report("ssh h1 -> h2", cp.returncode == 0 and env.address("h2") in cp.stdout,
                   cp.stdout.strip().replace("\n", " | ") or cp.stderr.strip())
            cp = env.run_in("h3", env.ssh_argv("h1", "true"), timeout=30)
            report("ssh h3 -> h1", cp.returncode == 0, cp.stderr.strip())
            report("root namespace reaches hosts (informational)", True, str(env.root_reachable))
            extra = env.add_unreachable_address("h2")
            cp = env.run_in("h1", [sys.executable, "-c", _CONNECT_ONCE, extra, "22", "3"], timeout=10)
            report(f"unreachable address {extra} on h2 fails from h1", "failed" in cp.stdout,
                   cp.stdout.strip())
            cp = env.run_in("h2", [sys.executable, "-c", _CONNECT_ONCE, extra, "22", "3"], timeout=10)
            report(f"... but h2 reaches its own {extra}", "connected" in cp.stdout, cp.stdout.strip())
            env.stop_sshd("h3")
            cp = env.run_in("h1", env.ssh_argv("h3", "true"), timeout=30)
            report("ssh to h3 after stop_sshd fails", cp.returncode == 255, cp.stderr.strip())
            env.start_sshd("h3")
            cp = env.run_in("h1", env.ssh_argv("h3", "true"), timeout=30)
            report("ssh to h3 after start_sshd works", cp.returncode == 0, cp.stderr.strip())
            names = list(env._ns.values())
        report("teardown", True, f"{env.teardown_seconds:.2f}s")
        left = [n for n in names if n in _run(["ip", "netns", "list"]).stdout]
        report("no namespace left", not left, str(left))
    except HostEnvUnavailable as e:
        print(f"[skip] NetnsHosts unavailable: {e.reason}")

    print("== SlurmCluster()")
    try:
        with SlurmCluster() as sl:
            report("setup", True, f"node {sl.node} cpus {sl.cpus} munged started here: "
                   f"{sl.started_munged}, {sl.setup_seconds:.2f}s")
            cp = sl.run(["srun", "-N1", "-n2", "hostname"], timeout=60)
            report("srun -N1 -n2 hostname", cp.returncode == 0 and cp.stdout.count(sl.node) == 2,
                   cp.stdout.strip().replace("\n", " ") or cp.stderr.strip())
            cp = sl.run(["salloc", "-N1", "-n5", "bash", "-c",
                         "for i in 1 2 3 4 5; do srun --overlap -N1 -n1 --nodelist="
                         "$(scontrol show hostnames $SLURM_JOB_NODELIST | head -1) "
                         "bash -c 'echo step $SLURM_STEP_ID start; sleep 2' & done; wait"],
                        timeout=120)
            report("5 parallel steps inside salloc", cp.returncode == 0 and cp.stdout.count("start") == 5,
                   cp.stdout.strip().replace("\n", " ") or cp.stderr.strip())
        report("teardown", True, f"{sl.teardown_seconds:.2f}s")
    except HostEnvUnavailable as e:
        print(f"[skip] SlurmCluster unavailable: {e.reason}")
    print("self-check", "PASSED" if ok else "FAILED")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(_self_check())
