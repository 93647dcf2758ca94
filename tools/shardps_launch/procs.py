"""Process supervision, the mechanics: starting a process so that it dies
with the launcher, reading its output, signalling it (and what it started
on its host), and stopping a set of processes: SIGTERM, a grace period,
SIGKILL. What to do when one fails is supervise.py's."""

import collections
import ctypes
import os
import shlex
import signal
import subprocess
import threading
import time

from .commands import GRACE_SEC
from .errors import LaunchError
from .output import WARNING, emit

PR_SET_PDEATHSIG = 1
LAST_LINES = 20  # kept per process for a failure report
STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}

_LIBC = ctypes.CDLL(None, use_errno=True)  # loaded before any fork: preexec_fn must not dlopen
_LAUNCHER_PID = os.getpid()


def _die_with_launcher():
    """In the child before exec: SIGKILL when the launcher dies without
    cleaning up; if it already died between fork and here, go at once."""
    signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)  # blocked by signals_blocked()
    _LIBC.prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != _LAUNCHER_PID:
        os._exit(137)


class signals_blocked:
    """SIGINT, SIGTERM and SIGHUP wait while a child is started and recorded
    (so an interrupted launcher never loses one), and during cleanup."""

    def __enter__(self):
        self.old = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)

    def __exit__(self, *exc):
        signal.pthread_sigmask(signal.SIG_SETMASK, self.old)


def popen(argv, **kw):
    """subprocess.Popen in a session of its own, with the parent-death signal.
    The parent-death signal fires when the *thread* that started the child
    ends: start children from the main thread."""
    kw.setdefault("start_new_session", True)
    kw.setdefault("preexec_fn", _die_with_launcher)
    try:
        return subprocess.Popen(argv, **kw)
    except OSError as e:
        raise LaunchError(f"cannot start {argv[0]}: {e.strerror}")


def stop_popen(p, slurm=False):
    """Ends a helper process (a probe): its stdin closed, then SIGTERM, then
    SIGKILL; an srun by its own pid only (its group holds srun's helper,
    which cancels the step)."""
    kill = os.kill if slurm else os.killpg
    try:
        p.stdin.close()
    except (OSError, AttributeError):
        pass
    try:
        kill(p.pid, signal.SIGTERM)
        p.wait(timeout=GRACE_SEC)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            kill(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass


class Proc:
    """One started process of the job (`kind`: local, ssh or slurm): its
    output is prefixed, logged and its last lines kept; signal() reaches it
    and everything it started on its host.

    Threads: the main thread creates, polls and signals it; its reader
    thread (_read) owns the pipe and the log file and calls the watchers.
    `_lock` guards `_last` and `_first_line_at`. The watchers are fixed
    before the process starts, so none misses a line (a coordinator may
    print its endpoint before the launcher could look)."""

    def __init__(self, role, rank, host, argv, env, kind, log_path, echo, spec, incarnation=0, watchers=()):
        self.role, self.rank, self.host, self.kind = role, rank, host, kind
        self.spec = spec  # (argv, env) before command_for: to start it again
        self.incarnation = incarnation  # 0: first start; k: its k-th restart
        self.handled = False  # main thread: its failure was dealt with (restarted, or its work left to the others)
        self.failed_over = False  # main thread: a dead server whose groups went to their backups (replicas)
        self.name = "coordinator" if (role, rank) == ("coordinator", 0) else f"{role} {rank}"
        self.endpoint = None  # a coordinator's own, when the launcher fixed it (standbys)
        self.prefix = f"[{self.name} @{host}] "
        self.echo = echo
        self.watchers = tuple(watchers)  # callables(line) -> None, called by the reader thread; never change
        self.rc = None  # main thread
        self._lock = threading.Lock()  # guards _last, _first_line_at
        self._last = collections.deque(maxlen=LAST_LINES)
        self._first_line_at = None
        try:
            self.log = open(log_path, "w")
        except OSError as e:
            raise LaunchError(f"cannot write the log {log_path}: {e.strerror}")
        full_env = dict(os.environ)
        full_env.update(env)
        # ssh / srun: the channel's stdin stays open; closing it stops the process.
        try:
            self.p = popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           stdin=subprocess.DEVNULL if kind == "local" else subprocess.PIPE, env=full_env)
        except LaunchError:
            self.log.close()
            raise
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for raw in iter(self.p.stdout.readline, b""):
            line = raw.decode(errors="replace").rstrip("\r\n")
            with self._lock:
                if self._first_line_at is None:
                    self._first_line_at = time.monotonic()
                self._last.append(line)
            self.log.write(line + "\n")
            self.log.flush()
            if self.echo or WARNING.match(line):
                emit(self.prefix + line)
            for w in self.watchers:
                w(line)

    def last_lines(self):
        """Its last LAST_LINES lines (any thread)."""
        with self._lock:
            return list(self._last)

    def first_line_at(self):
        """When its first line came (time.monotonic()), or None."""
        with self._lock:
            return self._first_line_at

    def poll(self):
        if self.rc is None:
            self.rc = self.p.poll()
        return self.rc

    def group_alive(self):
        """Local: whether anything of its process group is left (the leader
        may be gone while a child it started lives on)."""
        if self.kind != "local":
            return self.poll() is None
        try:
            os.killpg(self.p.pid, 0)
            return True
        except (ProcessLookupError, PermissionError):
            return False

    def signal(self, sig):
        if self.kind == "local":
            try:  # the whole group, even when its leader already exited
                os.killpg(self.p.pid, sig)
            except ProcessLookupError:
                pass
            return
        if self.poll() is not None:
            return
        if self.kind == "ssh" and sig == signal.SIGTERM:
            try:  # the remote watchdog sees EOF and stops the remote group
                self.p.stdin.close()
            except OSError:
                pass
            return
        try:
            if self.kind == "slurm":
                # srun ends its step itself (SIGTERM: at once; SIGKILL of the
                # main pid: its helper cancels the step). Killing srun's whole
                # group would take the helper too and leave the task running.
                os.kill(self.p.pid, sig)
            else:
                os.killpg(self.p.pid, sig)
        except ProcessLookupError:
            pass

    def killed(self):
        """Ended by a signal (a crash, kill -9, the OOM killer) rather than
        by an error it reported with an exit status."""
        rc = self.poll()
        return rc is not None and (rc < 0 or (self.kind != "local" and rc > 128 and rc != 255))

    def describe_exit(self):
        rc = self.poll()
        if rc is None:
            return "running"
        if rc < 0:
            return f"killed by signal {signal.Signals(-rc).name}"
        if rc == 255 and self.kind == "ssh":
            return "lost its ssh connection (ssh exited 255)"
        if rc > 128 and self.kind != "local":
            return f"exited with status {rc} (signal {rc - 128}?)"
        return f"exited with status {rc}"


def terminate(procs, grace, exited_too=True):
    """SIGTERM each of `procs` (remote ones through their watchdog; those
    already exited too unless `exited_too` is false), wait up to `grace` s
    for them and what they started, SIGKILL what is left, and reap them."""
    for p in procs:
        if exited_too or p.poll() is None:
            p.signal(signal.SIGTERM)
    end = time.monotonic() + grace
    while time.monotonic() < end and any(p.poll() is None or p.group_alive() for p in procs):
        time.sleep(0.05)
    for p in procs:
        if p.poll() is None or p.group_alive():
            p.signal(signal.SIGKILL)
    for p in procs:
        try:
            p.p.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass


class ProcessSet:
    """Every process one launch started: the job's (Proc, in start order)
    and the helpers of the host checks (probes). Main thread only."""

    def __init__(self, commands, run_dir, echo_all, dry_run):
        self.commands = commands  # JobCommands: how a command runs on its host
        self.mode = commands.mode
        self.run_dir, self.echo_all, self.dry_run = run_dir, echo_all, dry_run
        self.procs = []
        self.probes = []
        self.stopping = False

    def start(self, role, rank, host, argv, env, incarnation=0, watchers=()):
        """Starts argv as `role rank` on `host` (local, ssh or srun), with
        `watchers` on its lines from the first; with --dry-run only prints
        the command line and returns None."""
        full, full_env = self.commands.command_for(role, rank, host, argv, env)
        if self.dry_run:
            emit(f"  {role} {rank} on {host}: {shlex.join(full)}")
            return None
        again = f".restart{incarnation}" if incarnation else ""
        log = os.path.join(self.run_dir, f"{role}{'' if (role, rank) == ('coordinator', 0) else rank}{again}.log")
        with signals_blocked():
            proc = Proc(role, rank, host, full, full_env, self.mode, log, self.echo_all or role == "worker",
                        (argv, env), incarnation, watchers)
            self.procs.append(proc)
        return proc

    def start_again(self, p, argv=None, watchers=()):
        """The next incarnation of `p`, with its command line (or `argv`)."""
        spec_argv, env = p.spec
        return self.start(p.role, p.rank, p.host, argv or spec_argv, env, p.incarnation + 1, watchers)

    def start_probe(self, argv):
        """A helper of the host checks, stopped with the job if still running."""
        with signals_blocked():
            p = popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, stdin=subprocess.PIPE, text=True)
            self.probes.append(p)
        return p

    def newest(self, roles):
        """The newest process of every (role, rank) of `roles`, whatever became of it."""
        newest = {}
        for p in self.procs:
            if p.role in roles:
                newest[(p.role, p.rank)] = p
        return list(newest.values())

    def stop_all(self):
        """Stops everything: probes, then workers, servers, the coordinators,
        then the job's etcd (SIGTERM, a grace period, SIGKILL); waits for
        their last lines."""
        if self.stopping:
            return
        self.stopping = True
        # etcd last: the coordinators clear the job's state there as they end.
        order = ([p for p in self.procs if p.role == "worker"] + [p for p in self.procs if p.role == "server"] +
                 [p for p in self.procs if p.role == "coordinator"])
        etcd = [p for p in self.procs if p.role == "etcd"]
        for p in self.probes:
            if p.poll() is None:
                stop_popen(p, self.mode == "slurm")
        terminate(order, GRACE_SEC + (2 if self.mode != "local" else 0))
        for p in etcd:  # one at a time: together, each waits out the others' loss (7 s), alone 0.1 s
            terminate([p], GRACE_SEC + (2 if self.mode != "local" else 0))
        for p in order + etcd:
            p.reader.join(timeout=2)
